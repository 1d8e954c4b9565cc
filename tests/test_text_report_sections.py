"""The text report's optional sections: operator tables, collapsed repeated layers, the depth
limit of the detailed tree, efficiency lines; and the default layout left as DeepSpeed's.

Every expected figure is derived by hand from the model's shapes (see each comment)."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
import torch
from models import LeNet
from torch import nn

import flopsight
from flopsight.analysis.report_options import check_text_options
from flopsight.renderers.numbers import bytes_to_string, duration_to_string, macs_to_string, params_to_string
from flopsight.renderers.text_renderer import render_text
from flopsight.result import ProfileResult
from flopsight.result.metadata import Metadata
from flopsight.result.stats import Stats


def mlp():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def section(text: str, title: str) -> str:
    """The lines of one section of the report (from its dashed title to the next one)."""
    start = text.index(title)
    end = text.find("\n------", start + len(title))
    return text[start:end]


def table(text: str, title: str) -> list[list[str]]:
    """The rows of the operator table whose title starts with ``title``, split on spaces."""
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith(title))
    rows = []
    for line in lines[i + 2:]:  # after the title and the column header
        if not line.startswith("    "):
            break
        rows.append(line.split())
    return rows


# -- operator tables ------------------------------------------------------------------------
def test_operator_table_of_a_linear_by_hand(fake_clock):
    result = flopsight.profile(mlp(), torch.ones(8, 16))
    text = render_text(result, ops=3)
    # Linear(16, 32) on 8 rows is one aten.addmm: 8*16*32 = 4096 MACs, 2*4096 + 8*32 bias adds
    # = 8448 flops; it reads the input 8*16, the weight 16*32 and the bias 32 and writes 8*32
    # floats: (128 + 512 + 32 + 256) * 4 bytes = 3712 bytes
    (addmm,) = [r for r in table(text, "0 (Linear), fwd, top 3 by flops") if r[0] == "aten.addmm"]
    # name, calls, MACs (2 words), flops (2 words), % flops, latency (2 words), % latency, bytes (2 words)
    assert addmm[:7] == ["aten.addmm", "1", "4.1", "KMACs", "8.45", "K", "100%"]
    assert " ".join(addmm[-2:]) == bytes_to_string(3712) == "3.71 KB"
    # the whole model: both Linears' addmm, 4096 + 8*32*4 = 5120 MACs, 8448 + 2*1024 + 8*4 =
    # 10528 flops, of 10528 + 256 (ReLU: one per element of 8x32)
    addmm = result.ops("forward")["aten.addmm"]
    assert (addmm.macs, addmm.flops, addmm.calls) == (5120, 10528, 2)
    first = table(text, "whole model (Sequential), fwd, top 3 by flops")[0]
    assert first[:7] == ["aten.addmm", "2", "5.12", "KMACs", "10.53", "K", f"{round(100 * 10528 / 10784, 2):g}%"]


def test_operator_table_is_inclusive_and_the_whole_model_is_result_ops(fake_clock):
    model = nn.Sequential(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), nn.Linear(4, 2))
    result = flopsight.profile(model, torch.ones(3, 4))
    text = render_text(result, ops=5)
    header = section(text, "Operator Profile per GPU")
    assert "include its submodules' (inclusive)" in header
    # entry "0" (a Sequential with no code of its own) lists its Linear's and its ReLU's ops
    entry = next(l for l in text.splitlines() if l.startswith("0 (Sequential), fwd"))
    block = text.split(entry)[1].split("\n\n")[0]
    assert "aten.addmm" in block and "aten.relu" in block
    # the whole model's table is result.ops(): every op with flops, most first
    whole = next(l for l in text.splitlines() if l.startswith("whole model (Sequential), fwd, top 5 by flops"))
    rows = text.split(whole)[1].split("\n\n")[0].splitlines()[2:]
    expected = [name for name, s in result.ops("forward").items() if s.flops > 0]
    assert [r.split()[0] for r in rows if r.startswith("    ")][:len(expected)] == expected


def test_operator_table_follows_module_depth_and_phases(fake_clock):
    model = mlp()
    with flopsight.Profiler(model) as prof:
        model(torch.ones(8, 16)).sum().backward()
    text = render_text(prof.result, ops=2, module_depth=0)
    ops = section(text, "Operator Profile per GPU")
    titles = [l for l in ops.splitlines() if ", top 2 by" in l]
    assert titles and all(t.startswith("whole model (Sequential)") for t in titles)  # depth 0: the model only
    assert any(", fwd, top 2" in t for t in titles) and any(", bwd, top 2" in t for t in titles)
    # the backward's matrix products: Linear(32, 4)'s weight gradient and input gradient, and
    # Linear(16, 32)'s weight gradient (its input needs no gradient): 1024 + 1024 + 4096 MACs
    assert prof.result.ops("backward")["aten.mm"].macs == 6144


def test_operator_table_is_off_by_default(fake_clock):
    result = flopsight.profile(mlp(), torch.ones(8, 16))
    assert "Operator Profile" not in render_text(result)
    assert render_text(result, ops=0) == render_text(result) == render_text(result, ops=None)


# -- collapsed repeated layers --------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.fc1 = nn.Linear(width, 2 * width)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(2 * width, width)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(x)))


class Encoder(nn.Module):
    def __init__(self, layers=12, width=8):
        super().__init__()
        self.embed = nn.Linear(4, width)
        self.layers = nn.ModuleList(Block(width) for _ in range(layers))
        self.head = nn.Linear(width, 2)

    def forward(self, x):
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def figures(nodes, total, per, mean=False):
    """A collapsed line's figures, computed here from the copies' own records."""
    params = sum(n.params for n in nodes) // per
    macs = sum(n.forward.macs for n in nodes) // per
    latency = sum(n.forward.latency for n in nodes) / per
    pct = lambda a, b: f"{round(100 * a / b, 2):g}%"
    return (f"{params_to_string(params)} = {pct(params, total.params)} Params, "
            f"{macs_to_string(macs)} = {pct(macs, total.forward.macs)} MACs, "
            f"{'mean ' if mean else ''}{duration_to_string(latency)} = {pct(latency, total.forward.latency)} latency")


def with_latencies(result: ProfileResult, latencies: dict[str, float]) -> ProfileResult:
    """``result`` with the forward self latency of some modules replaced."""
    modules = dict(result.modules)
    for path, seconds in latencies.items():
        rec = modules[path]
        fwd = rec.phases["forward"]
        modules[path] = rec._replace(phases={**rec.phases, "forward": Stats(fwd.macs, fwd.flops, seconds, fwd.calls)})
    return ProfileResult(modules, result.unsupported_ops, result.metadata, spans=result.spans, calls=result.calls)


def test_twelve_identical_layers_collapse_with_summed_and_per_copy_figures(fake_clock):
    result = flopsight.profile(Encoder(), torch.ones(2, 4))
    # copies never take the same time: give every layer's fc1 its own latency
    result = with_latencies(result, {f"layers.{i}.fc1": (i + 1) * 1e-3 for i in range(12)})
    text = render_text(result, collapse=True)
    tree = text.split("\n\n")[-1]
    copies = [result.module(f"layers.{i}") for i in range(12)]
    line = next(l for l in tree.splitlines() if "(0-11): 12 x Block(" in l)
    assert line.strip() == "(0-11): 12 x Block("
    figures_line = tree.splitlines()[tree.splitlines().index(line) + 1].strip()
    total = result.total
    # all: the twelve copies summed; each: one copy, its latency the mean of the twelve
    assert figures_line.startswith(f"all: {figures(copies, total, 1)}, ")
    assert f"; each: {figures(copies, total, 12, mean=True)}, " in figures_line
    assert sum(c.params for c in copies) == 12 * copies[0].params
    assert sum(c.forward.macs for c in copies) == 12 * (8 * 16 * 2 * 2)  # fc1 and fc2: 2 rows x 8 x 16 each
    # the lines inside are one copy's: fc1's latency the mean of 1..12 ms = 6.5 ms
    fc1 = next(l for l in tree.splitlines() if "(fc1): Linear(" in l)
    assert "mean 6.5 ms = " in fc1 and "in_features=8, out_features=16" in fc1
    assert len([l for l in tree.splitlines() if "(fc1)" in l]) == 1
    # siblings that differ stay apart; the first and last modules are not part of the run
    assert "(embed): Linear(" in tree and "(head): Linear(" in tree


def test_collapse_is_off_by_default_and_changes_only_the_tree(fake_clock):
    result = flopsight.profile(Encoder(), torch.ones(2, 4))
    plain, collapsed = render_text(result), render_text(result, collapse=True)
    assert " x Block" not in plain and "(11): Block(" in plain
    # the summary and aggregated profile are the same
    assert plain.split("Detailed Profile")[0] == collapsed.split("Detailed Profile")[0]


def test_siblings_that_differ_do_not_collapse(fake_clock):
    model = nn.Sequential(
        nn.Linear(8, 8), nn.Linear(8, 8),  # identical: collapse
        nn.Dropout(0.1), nn.Dropout(0.2),  # same type, different extra_repr
        nn.Sequential(nn.ReLU()), nn.Sequential(nn.Tanh()),  # same type, different children
        nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8),  # identical but not consecutive
    )
    named = nn.ModuleDict({"q": nn.Linear(8, 8), "k": nn.Linear(8, 8)})  # named: never collapse

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.named = model, named

        def forward(self, x):
            return self.body(x) + self.named["q"](x) + self.named["k"](x)

    result = flopsight.profile(Model(), torch.ones(2, 8))
    tree = render_text(result, collapse=True).split("\n\n")[-1]
    collapsed = re.findall(r"\((\d+-\d+)\): (\d+) x (\w+)", tree)
    assert collapsed == [("0-1", "2", "Linear")]
    for key in ("(2): Dropout", "(3): Dropout", "(4): Sequential", "(5): Sequential", "(6): Linear", "(8): Linear",
                "(q): Linear", "(k): Linear"):
        assert key in tree, key


def test_identical_layers_that_differ_in_counts_do_not_collapse(fake_clock):
    class Gate(nn.Module):  # the same module twice, but the second copy is called twice
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(x)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.gates = nn.ModuleList([Gate(), Gate()])

        def forward(self, x):
            return self.gates[1](self.gates[1](self.gates[0](x)))

    tree = render_text(flopsight.profile(Model(), torch.ones(1, 4)), collapse=True).split("\n\n")[-1]
    assert " x Gate" not in tree and "(0): Gate(" in tree and "(1): Gate(" in tree


def test_nested_runs_collapse_inside_a_collapsed_run(fake_clock):
    model = nn.Sequential(*(nn.Sequential(*(nn.Linear(4, 4) for _ in range(3))) for _ in range(5)))
    result = flopsight.profile(model, torch.ones(1, 4))
    tree = render_text(result, collapse=True).split("\n\n")[-1].splitlines()
    assert tree[2] == "  (0-4): 5 x Sequential("
    inner = tree[4].strip()
    # per copy of the outer run: three Linears of 16 MACs each; one Linear 16 MACs
    assert inner.startswith(f"(0-2): 3 x Linear(all: 60 = 20% Params, {macs_to_string(48)} = 20% MACs, ")
    assert f"; each: 20 = 6.67% Params, {macs_to_string(16)} = 6.67% MACs, mean " in inner
    assert len(tree) == 8  # root, its figures, the outer run, its figures, the inner run, ")", ")" and the rule


# -- the depth limit ------------------------------------------------------------------------
def test_detail_depth_stops_the_tree_and_says_what_it_hides(fake_clock):
    result = flopsight.profile(Encoder(layers=3), torch.ones(2, 4))
    text = render_text(result, detail_depth=1)
    tree = text.split("\n\n")[-1]
    assert "(fc1)" not in tree
    # each Block hides fc1, act and fc2; the ModuleList hides its 3 Blocks and their 9 modules
    assert re.search(r"^  \(layers\): ModuleList\(.*, 12 submodules not shown\)$", tree, re.M)
    assert "Modules deeper than depth 1 are not shown (detail_depth=1)" in text
    full = render_text(result).split("\n\n")[-1]
    figures = re.search(r"\(layers\): ModuleList\(\n\s+(.*)\n", full).group(1)
    assert f"(layers): ModuleList({figures}, 12 submodules not shown)" in tree  # the same figures
    assert render_text(result, detail_depth=0).split("\n\n")[-1].splitlines()[0].startswith("Encoder(")
    assert len(render_text(result, detail_depth=0).split("\n\n")[-1].splitlines()) == 2  # root line and the rule


def test_detail_depth_limits_the_operator_table_too(fake_clock):
    result = flopsight.profile(Encoder(layers=2), torch.ones(2, 4))
    ops = section(render_text(result, ops=1, detail_depth=1), "Operator Profile per GPU")
    titles = [l.split(",")[0] for l in ops.splitlines() if ", top 1 by" in l]
    assert titles == ["whole model (Encoder)", "embed (Linear)", "layers (ModuleList)", "head (Linear)"]


@pytest.mark.parametrize("options, message", [
    ({"ops": -1}, "ops: expected None or an int >= 0"),
    ({"ops": True}, "ops: expected None or an int >= 0"),
    ({"detail_depth": -1}, "detail_depth: expected None"),
    ({"collapse": 1}, "collapse: expected True or False"),
    ({"efficiency": "yes"}, "efficiency: expected True or False"),
    ({"peak": "no such gpu"}, "peak: no device named"),
    ({"dtype": "float7"}, "dtype: expected one of"),
])
def test_options_are_checked_with_their_names(options, message):
    with pytest.raises((ValueError, TypeError), match=message):
        check_text_options(**options)


# -- efficiency -----------------------------------------------------------------------------
def test_efficiency_block_prints_the_peak_beside_the_ratio(fake_clock):
    result = flopsight.profile(mlp(), torch.ones(8, 16))
    text = render_text(result, peak=1e12)
    block = text.split("Efficiency (docs/efficiency.md):\n")[1].split("\n\n")[0]
    lines = dict(re.split(r":\s{2,}", l.rstrip(), maxsplit=1) for l in block.splitlines())
    # 10528 + 256 flops in the forward's measured latency, against 1 TFLOPS
    fwd = result.phase_total("forward")
    fraction = 100 * (fwd.flops / fwd.latency) / 1e12
    assert lines["fwd fraction of peak (peak 1 TFLOPS fp32, given)"] == (
        "<0.01%" if fraction < 0.01 else f"{round(fraction, 2):g}%")
    assert lines["peak (given, dense fp32)"].startswith("1 TFLOPS")
    # after the summary, before the aggregated profile
    assert (text.index("Efficiency (docs") < text.index("Aggregated Profile")
            and text.index("op coverage") < text.index("Efficiency (docs"))


def test_efficiency_is_off_by_default_and_on_cpu_says_nothing_it_cannot_know(fake_clock):
    result = flopsight.profile(mlp(), torch.ones(8, 16))
    assert "Efficiency" not in render_text(result)
    on = render_text(result, efficiency=True)  # the CPU has no table peak: no ratio, bytes only
    block = on.split("Efficiency (docs/efficiency.md):\n")[1].split("\n\n")[0]
    assert "peak" not in block and "fwd bytes moved, arithmetic intensity:" in block


def test_efficiency_adds_the_transformer_cross_check_for_a_language_model(fake_clock):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=500, n_positions=64)).eval()
    ids = torch.randint(0, 500, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        result = flopsight.profile(model, ids, kwargs={"use_cache": False}, warm_up=0)
    text = render_text(result, peak=1e12)
    # see tests/test_transformer_estimate.py: PaLM's 8,978,432 beside the measured 8,839,168
    assert re.search(r"^fwd flops, PaLM estimate \(2N \+ 4·L·H·Q·T\).*  8\.98 M\s*$", text, re.M)
    assert re.search(r"^fwd flops, measured .*  8\.84 M \(0\.984 x PaLM\)\s*$", text, re.M)
    assert "PaLM" not in render_text(result)
    assert "PaLM" not in render_text(flopsight.profile(mlp(), torch.ones(8, 16)), peak=1e12)  # not an LM


# -- metadata -------------------------------------------------------------------------------
def test_metadata_records_device_name_and_matmul_precision():
    result = flopsight.profile(mlp(), torch.ones(1, 16), warm_up=0)
    md = result.metadata
    assert md.device_name == ""  # the CPU: its peak is measured on request, not looked up by name
    assert md.float32_matmul_precision == torch.get_float32_matmul_precision()
    old = result.to_dict()
    for key in ("device_name", "float32_matmul_precision"):
        del old["metadata"][key]  # a result saved before they were recorded
    assert ProfileResult.from_dict(old).metadata.device_name == ""
    assert Metadata.from_dict(md.to_dict()) == md


# -- front-ends and the default layout --------------------------------------------------------
def test_default_options_keep_deepspeeds_layout(fake_clock, golden):
    with tempfile.TemporaryDirectory() as d:
        out = str(Path(d) / "report.txt")
        flopsight.get_model_profile(LeNet(), input_shape=(8, 3, 32, 32), top_modules=3, output_file=out, ops=None,
                                    collapse=False, detail_depth=None, peak=None, efficiency=False)
        golden("lenet_get_model_profile.txt", Path(out).read_text())


def test_deepspeed_front_ends_pass_the_options_and_keep_positional_arguments(fake_clock, capsys):
    model = Encoder(layers=4)
    # DeepSpeed's positional arguments, then the new keyword-only ones
    flopsight.get_model_profile(model, (2, 4), [], {}, True, True, -1, 1, 1, True, None, collapse=True, ops=1)
    out = capsys.readouterr().out
    assert "(0-3): 4 x Block(" in out and "Operator Profile per GPU" in out

    prof = flopsight.FlopsProfiler(model)
    prof.start_profile()
    model(torch.ones(2, 4))
    prof.stop_profile()
    prof.print_model_profile(1, -1, 1, True, None, detail_depth=1)
    prof.end_profile()
    assert "(layers): ModuleList(" in (out := capsys.readouterr().out)
    assert "16 submodules not shown" in out  # 4 Blocks of 3 modules each


def test_bad_options_raise_before_the_model_runs():
    calls = []
    model = mlp()
    model.register_forward_hook(lambda *_: calls.append(1))
    with pytest.raises(ValueError, match="detail_depth"):
        flopsight.get_model_profile(model, input_shape=(1, 16), detail_depth=-2)
    assert calls == []


def test_a_deep_model_nests_as_nn_module_prints_it(fake_clock):
    # 120 nested Sequentials: the tree is built line by line with an explicit stack (no
    # recursion, no re-indenting of each subtree's text at every level)
    model = nn.Linear(2, 2)
    for _ in range(120):
        model = nn.Sequential(model)
    tree = render_text(flopsight.profile(model, torch.ones(1, 2))).split("\n\n")[-1].splitlines()
    assert tree[0].startswith("Sequential(") and tree[1].startswith("  6 = 100% Params")
    assert tree[2].startswith("  (0): Sequential(") and tree[3].startswith("    6 = 100% Params")
    assert tree[240].startswith(" " * 240 + "(0): Linear(6 = 100% Params")
    assert tree[241:] == [" " * (2 * k) + ")" for k in range(119, -1, -1)] + ["-" * 78]
