"""The text report: DeepSpeed's layout line for line, with its bugs fixed."""

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import with_metadata
from models import JSC_Tiny, LeNet, Stack
from torch import nn

import flopsight
from flopsight.renderers.text_renderer import render_text

DATA = Path(__file__).parent / "data"


def report_of(fn):
    """Run ``fn(path)`` and return what it wrote to ``path``."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "report.txt"
        fn(str(path))
        return path.read_text()


def test_lenet_get_model_profile_golden(fake_clock, golden):
    text = report_of(
        lambda out: flopsight.get_model_profile(LeNet(), input_shape=(8, 3, 32, 32), top_modules=3, output_file=out)
    )
    golden("lenet_get_model_profile.txt", text)


def test_flops_profiler_with_engine_info_golden(fake_clock, golden):
    model = Stack(width=8, depth=3)
    engine = SimpleNamespace(
        world_size=2, dp_world_size=2, mp_world_size=1, train_micro_batch_size_per_gpu=lambda: 4
    )
    prof = flopsight.FlopsProfiler(model, ds_engine=engine)
    prof.start_profile()
    model(torch.ones(4, 8))
    prof.stop_profile()
    text = report_of(lambda out: prof.print_model_profile(profile_step=5, module_depth=1, top_modules=2,
                                                          output_file=out))
    prof.end_profile()
    golden("stack_flops_profiler.txt", text)


def detailed_lines(text):
    return text.split("\n\n")[-1].splitlines()


def test_lenet_params_and_macs_columns_equal_deepspeeds_real_report():
    # The same model and batch as DeepSpeed's data-parallel sample: every params and MACs
    # figure (and percentage) must be identical; latencies differ by nature.
    sample = (DATA / "deepspeed-lenet-dp2.txt").read_text()
    ours = flopsight.FlopsProfiler(LeNet())
    model = ours.model
    ours.start_profile()
    model(torch.ones(8, 3, 32, 32))
    ours.stop_profile()
    text = render_text(ours.result)
    ours.end_profile()

    def columns(line):
        m = re.match(r"\s*(\(\w+\): )?(\w+)\((\S+ = \S+ Params), (\S+ \w*MACs = \S+ MACs),", line)
        return m and (m.group(1), m.group(2), m.group(3), m.group(4))

    theirs = [columns(line) for line in sample.split("Detailed Profile per GPU")[1].splitlines()]
    mine = [columns(line) for line in text.split("Detailed Profile per GPU")[1].splitlines()]
    assert [c for c in mine if c] == [c for c in theirs if c]
    for label, value in [("params per", "62.01 K"), ("fwd MACs per", "5.21 MMACs"), ("fwd flops per", "10.58 M")]:
        assert re.search(rf"^{label} GPU: +{re.escape(value)}", text, re.M), label


def test_summary_layout_matches_deepspeed_line_format():
    sample = (DATA / "deepspeed-jsc-tiny.txt").read_text().splitlines()
    model = JSC_Tiny()
    text = report_of(lambda out: flopsight.get_model_profile(model, input_shape=(4, 16), output_file=out))
    lines = text.splitlines()
    # the same banner and lines in the same order; flopsight names itself on one line of its own
    banner = sample.index("Profile Summary at step 1:") - 1
    assert lines[1] == sample[banner]
    for theirs, mine in zip(sample[banner + 1 : banner + 9], lines[3:11]):
        assert mine == theirs
    def summary_labels(text_lines, unit):
        start = next(i for i, line in enumerate(text_lines) if line.startswith(f"params per {unit}"))
        end = text_lines.index("", start)
        return [line[:70].rstrip() for line in text_lines[start:end]]

    # DeepSpeed's lines word for word, in order; flopsight's own lines only after them
    theirs = summary_labels(sample, "GPU")
    mine = summary_labels(lines, "GPU")
    assert mine[: len(theirs)] == theirs
    # one pass timed (DeepSpeed's default): its noise is unknown, and the report says so last
    assert mine[len(theirs):] == ["inputs (shapes and dtypes; batch size):", "GPU utilization (NVML):",
                                  "device busy:", "op coverage (ops with a formula / ops seen):", "noise:"]
    # the label column is 70 wide, then two spaces, then the value padded to 8
    params_line = next(line for line in lines if line.startswith("params per"))
    assert params_line == "params per GPU:".ljust(70) + "  " + "117".ljust(8)
    # DeepSpeed's banner word for word, flopsight named on the line after it
    assert lines[1] == "-------------------------- DeepSpeed Flops Profiler --------------------------"
    assert lines[2].startswith("(flopsight: ")
    assert lines[-1] == "-" * 78


def test_params_of_model_is_right_without_an_engine():
    text = render_text(flopsight.profile(JSC_Tiny(), torch.ones(4, 16)))
    assert re.search(r"^params of model = params per GPU \* mp_size: +117 ", text, re.M)


def aggregated_depths(text):
    return [int(d) for d in re.findall(r"^depth (\d+):", text, re.M)]


@pytest.mark.parametrize("module_depth, depths",
                         [(-1, [0, 1, 2]), (0, [0]), (1, [0, 1]), (2, [0, 1, 2]), (50, [0, 1, 2])])
def test_module_depth_prints_up_to_that_depth_including_the_deepest(module_depth, depths):
    result = flopsight.profile(JSC_Tiny(), torch.ones(4, 16))
    assert aggregated_depths(render_text(result, module_depth=module_depth)) == depths


def test_top_modules_and_ties_keep_first_seen_order():
    result = flopsight.profile(Stack(width=8, depth=3), torch.ones(2, 8))
    text = render_text(result, top_modules=2, detailed=False)
    # depth 1: the two ModuleLists (216 + 48 params) then the head Linear (9)
    assert "    params      - {'ModuleList': '264', 'Linear': '9'}" in text
    assert "Detailed Profile" not in text


def test_never_called_module_is_marked_and_containers_show_totals():
    # Stack(8, 3): layers 3 * (8*8+8) = 216 params, norms 3 * 16 = 48, head 9: total 273.
    # MACs at batch 2: layers 3 * 2*8*8 = 384, head 2*8 = 16: total 400.
    result = flopsight.profile(Stack(width=8, depth=3), torch.ones(2, 8), clock=flopsight.FakeClock())
    text = render_text(result)
    assert "(2): LayerNorm(16 = 5.86% Params, 0 MACs = 0% MACs, 0 s = 0% latency, 0 FLOPS, not called, (8,)" in text
    assert "(layers): ModuleList(\n    216 = 79.12% Params, 384 MACs = 96% MACs," in text


def test_zero_latency_does_not_divide_by_zero():
    result = flopsight.profile(nn.Linear(4, 4), torch.ones(1, 4), clock=flopsight.FakeClock())
    data = result.to_dict()
    for module in data["modules"]:
        for phase in module["phases"].values():
            phase["latency"] = 0.0
    data["spans"] = {}
    text = render_text(flopsight.ProfileResult.from_dict(data))
    assert "fwd FLOPS per GPU = fwd flops per GPU / fwd latency:" in text
    assert "0 FLOPS" in text


def test_labels_say_gpu_on_every_device_as_deepspeed_s_do():
    # DeepSpeed's log parsers look for "per GPU": the wording does not follow the device
    for device_type in ("cpu", "cuda", "meta"):
        result = with_metadata(flopsight.profile(nn.Linear(4, 4), torch.ones(1, 4)), device_type=device_type)
        text = render_text(result)
        assert "params per GPU:" in text and "Aggregated Profile per GPU" in text and "per device" not in text


def test_print_model_aggregated_profile(capsys):
    model = Stack(width=8, depth=2)
    prof = flopsight.FlopsProfiler(model)
    prof.start_profile()
    model(torch.ones(1, 8))
    prof.print_model_aggregated_profile(module_depth=0, top_modules=1)
    prof.end_profile()
    assert capsys.readouterr().out == (
        "Top 1 modules in terms of params, MACs or fwd latency at different model depths:\n"
        "depth 0:\n"
        "    params      - {'Stack': '185'}\n"  # 2 * (64 + 8) + 2 * 16 + 9
        "    MACs        - {'Stack': '136 MACs'}\n"  # 2 * 8*8 + 8
        f"    fwd latency - {{'Stack': '{flopsight.duration_to_string(prof.get_total_duration())}'}}\n"
    )


def test_unsupported_ops_are_named_in_the_summary():
    registry = flopsight.REGISTRY.copy()
    registry.unregister(torch.ops.aten.addmm)
    with pytest.warns(flopsight.UnsupportedOpWarning):
        result = flopsight.profile(nn.Linear(4, 4), torch.ones(1, 4), registry=registry)
    assert re.search(r"^ops not counted \(no formula\): +aten.addmm x1", render_text(result), re.M)
