"""The text report of a training step, gradient accumulation, recompute and generate()."""

import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import with_metadata
from torch import nn
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

import flopsight
from flopsight.analysis.report_figures import ParallelInfo
from flopsight.renderers.numbers import duration_to_string, flops_to_string, macs_to_string, number_to_string
from flopsight.renderers.text_renderer import render_aggregated, render_text

DATA = Path(__file__).parent / "data"
B = 4  # rows per micro-batch


class MLP(nn.Module):
    """Linear(8, 16) frozen -> ReLU -> Linear(16, 16) -> ReLU -> Linear(16, 4)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(16, 16)
        self.act2 = nn.ReLU()
        self.fc3 = nn.Linear(16, 4)
        self.fc1.requires_grad_(False)

    def forward(self, x):
        return self.fc3(self.act2(self.fc2(self.act1(self.fc1(x)))))


# Hand-derived, batch B. Forward: in * out per row for each Linear.
FWD_MACS = B * (8 * 16 + 16 * 16 + 16 * 4)  # 1792
# Backward: fc1 is frozen and its input needs no gradient, so nothing flows into fc1 or
# act1, and fc2 (whose input then needs no gradient either) computes only grad_weight =
# g^T @ x (B*16*16 MACs); fc3 computes grad_input = g @ W and grad_weight (2 * B*16*4).
BWD_MACS = {"fc1": 0, "act1": 0, "fc2": B * 16 * 16, "act2": 0, "fc3": 2 * B * 16 * 4}


def make():
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    return model, opt


def batch(rows=B):
    torch.manual_seed(1)
    return torch.randn(rows, 8), torch.zeros(rows, 4)


def train_step(model, opt, micro_batches=1):
    for _ in range(micro_batches):
        x, y = batch()
        (F.mse_loss(model(x), y) / micro_batches).backward()
    opt.step()
    opt.zero_grad()


def profiled_step(micro_batches=1):
    model, opt = make()
    with flopsight.Profiler(model) as prof:
        train_step(model, opt, micro_batches)
    return prof.result


def value(text, label):
    """The value column of the summary line whose label starts with ``label``."""
    m = re.search(rf"^{re.escape(label)}.*?:\s+(\S.*?)\s*$", text, re.M)
    assert m, f"no summary line {label!r}"
    return m.group(1)


def summary_lines(text):
    """The summary's label/value lines (after the notations, up to the blank line)."""
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("step (weights update latency)")) + 2
    return lines[start : lines.index("", start)]


def assert_aligned(text):
    """The label column is 70 wide (no label overflows it), then two spaces, then the value."""
    lines = summary_lines(text)
    assert lines
    for line in lines:
        label, _, _ = line.partition(": ")
        assert len(label) + 2 <= 70 and line[70:72] == "  " and line[72] != " ", line


# -- goldens ---------------------------------------------------------------------------------
def test_training_step_golden_via_profiler(fake_clock, golden):
    result = profiled_step()
    golden("mlp_training_step.txt", render_text(result, top_modules=2))


def test_training_step_golden_via_flops_profiler(fake_clock, golden, tmp_path):
    model, opt = make()
    prof = flopsight.FlopsProfiler(model)
    prof.start_profile()
    train_step(model, opt)
    prof.stop_profile()
    out = tmp_path / "report.txt"
    prof.print_model_profile(profile_step=3, module_depth=1, top_modules=2, output_file=str(out))
    prof.end_profile()
    golden("mlp_training_flops_profiler.txt", out.read_text())


# -- what the training lines say --------------------------------------------------------------
def test_training_lines_are_deepspeeds_word_for_word_then_the_measured_ones(fake_clock):
    text = render_text(profiled_step())
    lines = summary_lines(text)
    # DeepSpeed's engine summary (the data-parallel LeNet sample): the same 18 labels, in its
    # order, one after the other, before any line of flopsight's own
    sample = (DATA / "deepspeed-lenet-dp2.txt").read_text().splitlines()
    start = sample.index("world size:".ljust(70) + "  " + "2".ljust(8))
    theirs = [l[:70].rstrip() for l in sample[start : sample.index("", start)]]
    mine = [l[:70].rstrip() for l in lines]
    assert len(theirs) == 18 and mine[: len(theirs)] == theirs
    assert all(l.startswith(("measured ", "step anatomy", "inputs (", "GPU utilization", "device busy", "op coverage",
                             "noise:", "note:"))
               for l in mine[len(theirs):]), mine[len(theirs):]
    assert_aligned(text)
    assert "iter latency (sum of fwd, bwd and step latency)" in text  # DeepSpeed's notation, and its definition


def test_deepspeeds_lines_keep_deepspeeds_definitions(fake_clock):
    result = profiled_step()
    text = render_text(result)
    fwd, it = result.total.forward, result.iteration
    # DeepSpeed estimates the backward as 2 x the forward and sums fwd, bwd and step latency
    assert value(text, "bwd latency") == duration_to_string(it.backward.latency)
    assert value(text, "bwd FLOPS per GPU = 2 * fwd flops per GPU / bwd latency") == flops_to_string(
        2 * fwd.flops / it.backward.latency
    )
    assert value(text, "fwd+bwd FLOPS per GPU = 3 * fwd flops per GPU / (fwd+bwd latency)") == flops_to_string(
        3 * fwd.flops / (fwd.latency + it.backward.latency)
    )
    iter_latency = fwd.latency + it.backward.latency + it.step.latency
    assert value(text, "iter latency") == duration_to_string(iter_latency)
    assert value(text, "FLOPS per GPU = 3 * fwd flops per GPU / iter latency") == flops_to_string(
        3 * fwd.flops / iter_latency
    )
    # batch size per GPU * world size / iter latency
    assert value(text, "samples/second") == f"{round(B * 1 / iter_latency, 2):g}"
    # an engine configured with recompute_fwd_factor=0.5 (activation checkpointing) says 2.5 and 3.5
    text = render_text(result, recompute_fwd_factor=0.5)
    assert value(text, "bwd FLOPS per GPU = 2.5 * fwd flops per GPU / bwd latency") == flops_to_string(
        2.5 * fwd.flops / it.backward.latency
    )
    assert value(text, "FLOPS per GPU = 3.5 * fwd flops per GPU / iter latency") == flops_to_string(
        3.5 * fwd.flops / iter_latency
    )


def test_bwd_figures_are_measured_not_estimated(fake_clock):
    result = profiled_step()
    text = render_text(result)
    bwd_macs = sum(BWD_MACS.values())  # 1536: not 2 * forward (3584), as DeepSpeed estimates
    assert value(text, "measured bwd MACs per GPU") == macs_to_string(bwd_macs) == "1.54 KMACs"
    assert result.iteration.backward.macs == bwd_macs
    it = result.iteration
    assert value(text, "measured bwd FLOPS per GPU = measured bwd flops / bwd latency") == flops_to_string(
        it.backward.flops / it.backward.latency
    )
    assert value(text, "measured bwd flops per GPU") == number_to_string(it.backward.flops)
    fwd = result.total.forward
    assert value(text, "fwd MACs per GPU") == macs_to_string(FWD_MACS)
    assert value(text, "measured fwd+bwd FLOPS per GPU") == flops_to_string(
        (fwd.flops + it.backward.flops) / (fwd.latency + it.backward.latency)
    )
    # AdamW: its step is counted, and the step is a span of its own
    assert it.step.flops > 0 and value(text, "measured step flops per GPU") == number_to_string(it.step.flops)
    assert value(text, "step latency") == duration_to_string(result.spans["step"][0])
    iter_flops = fwd.flops + it.backward.flops + it.step.flops
    assert value(text, "measured iter flops per GPU = fwd + bwd + step flops") == number_to_string(iter_flops)
    assert value(text, "measured iter wall time") == duration_to_string(result.spans["iteration"][0])
    assert value(text, "measured FLOPS per GPU = measured iter flops / iter wall time") == flops_to_string(
        iter_flops / it.latency
    )
    assert value(text, "measured samples/second") == f"{round(B / it.latency, 2):g}"
    assert value(text, "batch size per GPU") == str(B)
    assert (value(text, "world size"), value(text, "data parallel size"), value(text, "model parallel size")) == (
        "1",
        "1",
        "1",
    )
    assert "micro-batches" not in text and "recompute" not in text.split("Aggregated")[0].split("Notations")[1]


def test_detailed_tree_shows_each_modules_backward(fake_clock):
    result = profiled_step()
    text = render_text(result)
    # DeepSpeed's field-order line word for word, then the fields a measured backward adds
    assert (
        "params, percentage of total params, MACs, percentage of total MACs, fwd latency, percentage of total fwd "
        "latency, fwd FLOPS\nthen, with the backward measured (flopsight): bwd MACs, percentage of total bwd MACs, "
        "bwd op time, percentage of total bwd op time, bwd FLOPS\n" in text
    )
    total = sum(BWD_MACS.values())
    for name, macs in BWD_MACS.items():
        stats = result.module(name)
        assert stats.backward.macs == macs
        pct = f"{round(100 * macs / total, 2):g}%"
        lat = duration_to_string(stats.backward.latency)
        lat_pct = f"{round(100 * stats.backward.latency / result.total.backward.latency, 2):g}%"
        line = next(l for l in text.splitlines() if l.startswith(f"  ({name}): "))
        assert f", {macs_to_string(macs)} = {pct} bwd MACs, {lat} = {lat_pct} bwd op time, " in line, line
    fc1 = next(l for l in text.splitlines() if l.startswith("  (fc1): "))
    assert "0 MACs = 0% bwd MACs, 0 s = 0% bwd op time, 0 FLOPS bwd, in_features=8" in fc1


def test_aggregated_profile_adds_bwd_rows(fake_clock):
    result = profiled_step()
    text = render_aggregated(result, module_depth=1, top_modules=2)
    fc = result.module("fc2").backward.latency + result.module("fc3").backward.latency + result.module(
        "fc1"
    ).backward.latency
    # DeepSpeed's header word for word, then flopsight's note of the two rows it adds per depth
    assert text.splitlines()[0] == "Top 2 modules in terms of params, MACs or fwd latency at different model depths:"
    assert text.splitlines()[1].startswith("(flopsight: with the backward measured")
    assert f"    bwd MACs    - {{'Linear': '{macs_to_string(sum(BWD_MACS.values()))}', 'ReLU': '0 MACs'}}" in text
    assert f"    bwd op time - {{'Linear': '{duration_to_string(fc)}'" in text


def test_flops_profiler_getters_keep_deepspeeds_meaning_and_add_the_backward(fake_clock):
    model, opt = make()
    prof = flopsight.FlopsProfiler(model)
    prof.start_profile()
    train_step(model, opt)
    prof.stop_profile()
    result = prof.result
    assert prof.get_total_macs() == result.total.forward.macs  # forward, as DeepSpeed
    assert prof.get_total_duration() == result.total.forward.latency
    assert prof.get_total_backward_macs() == sum(BWD_MACS.values())
    assert prof.get_total_backward_macs(as_string=True) == "1.54 KMACs"
    assert prof.get_total_backward_flops() == result.iteration.backward.flops > 0
    assert prof.get_total_backward_flops(as_string=True) == number_to_string(result.iteration.backward.flops)
    assert prof.get_total_backward_duration() == result.spans["backward"][0] > 0
    assert prof.get_total_step_duration() == result.spans["step"][0] > 0
    assert prof.get_total_iteration_duration() == result.spans["iteration"][0]
    assert prof.get_total_iteration_duration(as_string=True) == duration_to_string(result.spans["iteration"][0])
    prof.end_profile()


def test_forward_only_flops_profiler_report_has_no_training_lines(fake_clock, capsys):
    model, _ = make()
    prof = flopsight.FlopsProfiler(model)
    prof.start_profile()
    with torch.no_grad():
        model(batch()[0])
    prof.stop_profile()
    prof.print_model_profile()
    prof.end_profile()
    out = capsys.readouterr().out
    labels = [line[:70] for line in summary_lines(out)]
    assert labels and not [l for l in labels if "bwd" in l or "step" in l or "iter" in l or "world" in l]
    assert "iter latency (sum of fwd, bwd and step latency)" in out and "bwd MACs" not in out
    assert prof.get_total_backward_macs() == 0 and prof.get_total_step_duration() == 0


# -- parallel sizes ----------------------------------------------------------------------------
def test_distributed_world_size_is_read_from_the_result(fake_clock):
    result = with_metadata(profiled_step(), world_size=4)  # what a run under torch.distributed records
    text = render_text(result)
    assert (value(text, "world size"), value(text, "data parallel size"), value(text, "model parallel size")) == (
        "4",
        "4",
        "1",
    )
    # samples of every data-parallel rank
    assert value(text, "measured samples/second") == f"{round(4 * B / result.iteration.latency, 2):g}"


def test_engine_parallel_info_wins(fake_clock):
    result = profiled_step()
    text = render_text(result, parallel=ParallelInfo(world_size=8, dp_size=4, mp_size=2, batch_size=16))
    assert [value(text, k) for k in ("world size", "data parallel size", "model parallel size")] == ["8", "4", "2"]
    assert value(text, "batch size per GPU") == "16"
    assert value(text, "params of model = params per GPU * mp_size") == str(2 * result.total.params)
    assert value(text, "measured samples/second") == f"{round(4 * B / result.iteration.latency, 2):g}"
    # DeepSpeed's own line: batch size per GPU * world size / (fwd + bwd + step latency)
    fwd, it = result.total.forward, result.iteration
    ds_iter = fwd.latency + it.backward.latency + it.step.latency
    assert value(text, "samples/second") == f"{round(16 * 8 / ds_iter, 2):g}"


def test_forward_only_report_ignores_the_world_size():
    with torch.no_grad():
        result = flopsight.profile(MLP(), batch()[0], clock=flopsight.FakeClock())
    result = with_metadata(result, world_size=2)
    assert "world size" not in render_text(result)


# -- gradient accumulation ------------------------------------------------------------------------
def test_gradient_accumulation_keeps_deepspeeds_lines_to_one_micro_batch_and_measures_all(fake_clock):
    one = profiled_step(micro_batches=1)
    four = profiled_step(micro_batches=4)
    text = render_text(four)
    it1, it4 = one.iteration, four.iteration
    assert it4.micro_batches == 4 and it4.samples == 4 * B
    assert value(text, "micro-batches per step (DeepSpeed's lines show one of them)") == "4"
    assert value(text, "batch size per GPU") == str(B)
    # forward and backward: 4x one micro-batch (the loss scaling included), plus, in the
    # backward of micro-batches 2..4, one add per trainable parameter element to
    # accumulate into .grad (fc2: 16*16 + 16, fc3: 16*4 + 4); one step
    accumulate = 3 * (16 * 16 + 16 + 16 * 4 + 4)
    assert it4.forward.flops == 4 * it1.forward.flops and it4.forward.macs == 4 * FWD_MACS
    assert it4.backward.flops == 4 * it1.backward.flops + accumulate
    assert it4.backward.macs == 4 * sum(BWD_MACS.values())
    assert it4.step.flops == it1.step.flops and it4.step.calls == 1
    # DeepSpeed's lines keep DeepSpeed's meaning, one micro-batch's forward (the step's over 4);
    # the step's totals are on flopsight's own lines
    assert value(text, "fwd flops per GPU") == number_to_string(it1.forward.flops)
    assert value(text, "fwd MACs per GPU") == macs_to_string(FWD_MACS)
    assert value(text, "measured fwd MACs per GPU, all micro-batches") == macs_to_string(4 * FWD_MACS)
    assert value(text, "measured fwd flops per GPU, all micro-batches") == number_to_string(4 * it1.forward.flops)
    assert value(text, "measured bwd flops per GPU") == number_to_string(4 * it1.backward.flops + accumulate)
    # over the same span: four forwards, four backward passes, one step, one wall time
    assert len(four.spans["forward"]) == len(four.spans["backward"]) == 4 and len(four.spans["step"]) == 1
    assert value(text, "bwd latency") == duration_to_string(sum(four.spans["backward"]) / 4)
    assert value(text, "measured bwd latency, all micro-batches") == duration_to_string(sum(four.spans["backward"]))
    assert it4.latency >= sum(four.spans["forward"]) + sum(four.spans["backward"]) + four.spans["step"][0]
    iter_flops = 4 * (it1.forward.flops + it1.backward.flops) + accumulate + it1.step.flops
    assert value(text, "measured iter flops per GPU") == number_to_string(iter_flops)
    assert value(text, "measured FLOPS per GPU") == flops_to_string(iter_flops / it4.latency)
    assert value(text, "measured samples/second") == f"{round(4 * B / it4.latency, 2):g}"


# -- activation checkpointing ----------------------------------------------------------------------
class Checkpointed(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.Linear(16, 16))
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(checkpoint(self.body, x, use_reentrant=False))


def test_recompute_lines_separate_model_and_hardware_flops(fake_clock):
    torch.manual_seed(0)
    model = Checkpointed()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with set_checkpoint_early_stop(False), flopsight.Profiler(model) as prof:
        model(torch.randn(B, 8)).sum().backward()
        opt.step()
    result = prof.result
    text = render_text(result)
    it = result.iteration
    # the whole body runs again in the backward pass: B*8*16 + B*16*16 MACs
    assert it.recompute.macs == B * (8 * 16 + 16 * 16)
    assert value(text, "measured recompute MACs per GPU (activation checkpointing)") == macs_to_string(
        B * (8 * 16 + 16 * 16)
    )
    assert value(text, "measured recompute flops per GPU") == number_to_string(it.recompute.flops)
    assert value(text, "measured bwd FLOPS per GPU (recompute included)") == flops_to_string(
        (it.backward.flops + it.recompute.flops) / it.backward.latency
    )
    hardware = result.total.forward.flops + it.backward.flops + it.recompute.flops + it.step.flops
    assert value(text, "measured iter flops per GPU = fwd + bwd + recompute + step flops") == number_to_string(
        hardware
    )
    assert value(text, "measured FLOPS per GPU") == flops_to_string(hardware / it.latency)
    assert value(text, "measured model FLOPS per GPU (recompute left out)") == flops_to_string(
        (hardware - it.recompute.flops) / it.latency
    )
    assert "measured bwd flops / bwd latency" not in text
    assert value(text, "measured fwd+bwd FLOPS per GPU (recompute included)") == flops_to_string(
        (result.total.forward.flops + it.backward.flops + it.recompute.flops)
        / (result.total.forward.latency + it.backward.latency)
    )
    # the anatomy's bwd compute holds the recomputed forward's operators (they run in the backward
    # pass), the modules' bwd op time does not (recompute is a phase of its own): the line says so
    anatomy = value(text, "step anatomy, bwd compute (recompute included)")
    assert anatomy.startswith(duration_to_string(it.anatomy.backward) + " (")
    assert it.anatomy.backward > result.total.backward.latency
    assert "step anatomy, bwd compute: " not in text
    assert_aligned(text)
    gpu = with_metadata(result, device_type="cuda")
    assert_aligned(render_text(gpu))


# -- generate() --------------------------------------------------------------------------------------
def tiny_gpt2():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=100, bos_token_id=None, eos_token_id=None
    )
    return transformers.GPT2LMHeadModel(config).eval()


def gpt2_generate_report(tmp_path, max_new_tokens=4):
    out = tmp_path / "generate.txt"
    flopsight.get_model_profile(
        tiny_gpt2(),
        args=[torch.ones(2, 5, dtype=torch.long)],
        kwargs={"max_new_tokens": max_new_tokens, "do_sample": False, "pad_token_id": 0},
        mode="generate",
        detailed=False,
        output_file=str(out),
    )
    return out.read_text()


def gpt2_macs(batch, new, context):
    """MACs of one GPT-2 call on ``new`` positions attending over ``context`` positions
    (n_embd 64, 2 layers, vocab 100): per layer and position the c_attn 64x192, c_proj
    64x64, mlp 64x256 and 256x64 matmuls, plus QK^T and AV over the context (64 each);
    generate() computes the logits of the last position only (64x100)."""
    per_layer = batch * new * (64 * 192 + 64 * 64 + 2 * 64 * 256) + batch * new * context * 2 * 64
    return 2 * per_layer + batch * 64 * 100


def test_generate_summary_lines(fake_clock, tmp_path, golden):
    text = gpt2_generate_report(tmp_path)
    summary = text.split("\n\n-----")[0] + "\n"
    golden("gpt2_generate_summary.txt", summary)
    prefill = gpt2_macs(2, 5, 5)  # 1008640
    steps = [gpt2_macs(2, 1, 5 + t) for t in (1, 2, 3)]  # the cache grows by one per step
    assert value(text, "prefill MACs per GPU") == macs_to_string(prefill) == "1.01 MMACs"
    assert value(text, "new tokens per sequence (prefill + decode steps)") == "4"
    assert value(text, "decode steps") == "3"
    assert value(text, "decode MACs per GPU per step") == macs_to_string(sum(steps) / 3) == "212.99 KMACs"
    assert value(text, "decode MACs per generated token = per step / batch size") == macs_to_string(
        sum(steps) / 3 / 2
    )
    assert value(text, "generate() MACs per GPU") == macs_to_string(prefill + sum(steps))
    assert value(text, "batch size per GPU") == "2"
    assert_aligned(text)
    latency = value(text, "generate() latency")
    seconds = float(latency.split()[0]) * {"s": 1, "ms": 1e-3, "us": 1e-6}[latency.split()[1]]
    assert (value(text, "tokens/second = batch size * new tokens / generate() latency")
            == f"{round(2 * 4 / seconds, 2):g}")


def test_generate_with_a_single_new_token_has_no_decode_figures(fake_clock, tmp_path):
    text = gpt2_generate_report(tmp_path, max_new_tokens=1)
    assert value(text, "decode steps") == "0"
    assert "decode MACs" not in text and "decode tokens/second" not in text
    assert value(text, "new tokens per sequence (prefill + decode steps)") == "1"


def test_forward_mode_report_has_no_generate_lines():
    with torch.no_grad():
        result = flopsight.profile(MLP(), batch()[0], clock=flopsight.FakeClock())
    text = render_text(result)
    assert result.generation is None and "prefill" not in text and "tokens/second" not in text


# -- the profiler's own time, and latencies of a step timed apart from the counted one ---------
def _step_spans(result, **spans):
    """``result`` (a training step) as JSON with its spans replaced, read back."""
    data = result.to_dict()
    data["spans"] = spans
    (root,) = [m for m in data["modules"] if m["name"] == ""]
    # one op of the root per phase, taking the seconds below
    root["ops"] = {phase: {"aten.mm": {"macs": 0, "flops": 0, "latency": t, "calls": 1}}
                   for phase, t in (("forward", 1.0), ("backward", 1.5), ("step", 0.5))}
    for m in data["modules"]:
        if m["name"]:
            m["ops"] = {}
    data["collectives"] = []
    return flopsight.ProfileResult.from_dict(data)


def test_the_profilers_own_time_is_its_own_part_of_the_anatomy_never_framework(fake_clock):
    # a 10 s step: forward 2 s, backward 4 s, step 1 s; ops 1 + 1.5 + 0.5 s. The profiler's own
    # time left in them: 0.25 s of the forward, 1 s of the backward, 2 s in the step, where only
    # 0.5 s is not compute (it is capped there: the profiler never takes the ops' time)
    r = _step_spans(profiled_step(), iteration=[10.0], forward=[2.0], backward=[4.0], step=[1.0],
                    **{"profiler.forward": [0.25], "profiler.backward": [1.0], "profiler.step": [2.0]})
    a = r.iteration.anatomy
    # framework: (2 - 1 - 0.25) + (4 - 1.5 - 1) + (1 - 0.5 - 0.5) = 0.75 + 1.5 + 0 = 2.25
    # profiler: 0.25 + 1 + min(2, 0.5) = 1.75; other: 10 - 7 = 3
    assert (a.forward, a.backward, a.step, a.framework, a.communication, a.other, a.profiler) == (
        1.0, 1.5, 0.5, 2.25, 0.0, 3.0, 1.75)
    assert a.total == 10.0
    text = render_text(r)
    assert value(text, "step anatomy, framework and hooks") == "2.25 s (22.5%)"
    assert value(text, "step anatomy, profiler (flopsight's own time left in the phases)") == "1.75 s (17.5%)"
    assert "latencies above" not in text  # the counted step's own latencies
    # the figure is per step in the samples too, and in the JSON
    assert flopsight.combine_steps([r, r]).samples.figures["anatomy.profiler"] == (1.75, 1.75)


def test_results_from_before_the_profiler_part_read_it_as_zero(fake_clock):
    r = _step_spans(profiled_step(), iteration=[10.0], forward=[2.0], backward=[4.0], step=[1.0])
    a = r.iteration.anatomy
    assert a.profiler == 0.0 and a.framework == 1.0 + 2.5 + 0.5 and a.total == 10.0


def test_latencies_of_a_timed_step_are_reported_and_the_anatomy_stays_the_counted_steps(fake_clock):
    # the counted step took 10 s (forward 2, backward 4, step 1); the step timed at its phases'
    # boundaries only took 5 s (forward 1, two backward calls of 1 s, step 0.5)
    timed = {"timed.iteration": [5.0], "timed.forward": [1.0], "timed.backward": [1.0, 1.0], "timed.step": [0.5]}
    r = _step_spans(profiled_step(), iteration=[10.0], forward=[2.0], backward=[4.0], step=[1.0], **timed)
    it = r.iteration
    assert it.timed and (it.latency, it.forward.latency, it.backward.latency, it.step.latency) == (5.0, 1.0, 2.0, 0.5)
    assert it.counted_latency == 10.0 and it.anatomy.total == 10.0
    assert it.forward.macs == r.total.forward.macs  # counts are the counted step's
    text = render_text(r)
    # DeepSpeed's lines read the timed step: fwd 1 s, bwd 2 s, step 0.5 s, iter their sum
    assert (value(text, "fwd latency"), value(text, "bwd latency"), value(text, "step latency"),
            value(text, "iter latency")) == ("1 s", "2 s", "500 ms", "3.5 s")
    assert value(text, "measured iter wall time") == "5 s"
    assert value(text, "latencies above (fwd, bwd, step, iter)") == (
        "of the step before the profiled one, timed at its phases' boundaries only (not counted)")
    assert value(text, "step anatomy, of the profiled step's wall time") == "10 s (the profiler's own time in it below)"
    assert_aligned(text)
    # the DeepSpeed getters read the timed step too
    prof = flopsight.FlopsProfiler(nn.Linear(2, 2))
    prof._result = r
    assert (prof.get_total_duration(), prof.get_total_step_duration(), prof.get_total_iteration_duration()) == (
        1.0, 0.5, 5.0)
