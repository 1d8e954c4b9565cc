"""flopsight.diff and `flopsight diff`: per-module changes, gates for CI, the noise rule.

Counts come from real profiles of two versions of a small model, their deltas derived by
hand in the comments. Latency decisions are made deterministic in two ways: results whose
spans are chosen (``with_spans``), and real repeated calls timed by a FakeClock. Nothing
here asserts on wall-clock time.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import pytest
import torch
from torch import nn

import flopsight
from flopsight.__main__ import main
from flopsight.analysis.diff import DIFF_FORMATS, GATE_METRICS, Change, mann_whitney_p, parse_gate
from flopsight.renderers.diff_renderer import (
    format_percent,
    format_signed,
    format_threshold,
    format_value,
    gate_message,
    render_diff,
)

B = 2  # batch


class Net(nn.Module):
    """encoder (Linear 8->hidden, ReLU) -> head (Linear hidden->4) [-> extra (Linear 4->4)]."""

    def __init__(self, hidden: int = 16, extra: bool = False, frozen: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.encoder = nn.Sequential(nn.Linear(8, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, 4)
        if extra:
            self.extra = nn.Linear(4, 4)
        if frozen:
            self.encoder[0].requires_grad_(False)

    def forward(self, x):
        y = self.head(self.encoder(x))
        return self.extra(y) if hasattr(self, "extra") else y


def inference(model: nn.Module, memory: bool = False) -> flopsight.ProfileResult:
    with torch.no_grad():
        return flopsight.profile(model, torch.ones(B, 8), clock=flopsight.FakeClock(), memory=memory)


def training(model: nn.Module, calls: int = 1, memory: bool = False, warm: bool = False) -> flopsight.ProfileResult:
    """``calls`` forward + backward calls, each timed (a FakeClock: one ms per stamp); ``warm``:
    after one call before profiling, so that every profiled call accumulates into gradients
    that exist (the ops of a first accumulation differ between torch releases)."""
    if warm:
        model(torch.ones(B, 8)).sum().backward()
    with flopsight.Profiler(model, clock=flopsight.FakeClock(), memory=memory) as prof:
        for _ in range(calls):
            model(torch.ones(B, 8)).sum().backward()
    return prof.result


def with_spans(result: flopsight.ProfileResult, forward, backward=()) -> flopsight.ProfileResult:
    """``result`` with chosen per-call latencies (milliseconds), so a noise decision is fixed."""
    spans = {"forward": [t / 1e3 for t in forward]}
    if backward:
        spans["backward"] = [t / 1e3 for t in backward]
    return dataclasses.replace(result, spans=spans)


@pytest.fixture(scope="module")
def base():
    return inference(Net())


@pytest.fixture(scope="module")
def wide():
    return inference(Net(hidden=32))


# Base, batch 2, forward only:
#   encoder.0 Linear(8, 16): params 8*16 + 16 = 144; MACs 2*8*16 = 256; FLOPs 2*256 + 2*16 bias adds = 544
#   encoder.1 ReLU: FLOPs 2*16 = 32
#   head Linear(16, 4): params 16*4 + 4 = 68; MACs 2*16*4 = 128; FLOPs 2*128 + 2*4 = 264
#   model: params 212, MACs 384, FLOPs 840
# Wide (hidden 32):
#   encoder.0: params 288, MACs 512, FLOPs 1024 + 64 = 1088; ReLU 64; head: params 132, MACs 256, FLOPs 520
#   model: params 420 (+208, +98.1%), MACs 768 (+384, +100%), FLOPs 1672 (+832, +99.05%)


# -- the figures ----------------------------------------------------------------------------
def test_widened_linear_totals_and_modules(base, wide):
    d = flopsight.diff(base, wide)
    assert (d.total["params"].a, d.total["params"].b, d.total["params"].delta) == (212, 420, 208)
    assert (d.total["macs"].delta, d.total["flops"].delta) == (384, 832)
    assert d.total["macs"].relative == 1.0
    assert d.total["flops"].relative == pytest.approx(832 / 840)
    assert (d.module("encoder.0")["flops"].a, d.module("encoder.0")["flops"].b) == (544, 1088)
    assert d.module("encoder.1")["flops"].delta == 32
    assert (d.module("head")["params"].a, d.module("head")["params"].b) == (68, 132)
    # every module changed (the ReLU's input widened too); none added or removed
    assert [m.path for m in d.changed] == ["encoder", "encoder.0", "encoder.1", "head"]
    assert d.added == d.removed == [] and d.notes == []


def test_layer_added_and_removed(base):
    grown = inference(Net(extra=True))
    d = flopsight.diff(base, grown)
    # extra Linear(4, 4): params 4*4 + 4 = 20; MACs 2*4*4 = 32; FLOPs 2*32 + 2*4 = 72
    assert d.added == ["extra"] and d.module("extra").status == "added"
    assert (d.module("extra")["params"].a, d.module("extra")["params"].b) == (0, 20)
    assert d.module("extra")["flops"].relative == math.inf
    assert (d.total["params"].delta, d.total["macs"].delta, d.total["flops"].delta) == (20, 32, 72)
    assert [m.path for m in d.changed] == ["extra"]  # the rest ran exactly as before
    back = flopsight.diff(grown, base)
    assert back.removed == ["extra"] and back.total["flops"].delta == -72
    assert list(back.modules) == ["encoder", "encoder.0", "encoder.1", "head", "extra"]  # tree order kept


def test_frozen_layer_changes_backward_and_trainable_params():
    d = flopsight.diff(training(Net()), training(Net(frozen=True)))
    # One training call, batch 2. Forward: 384 MACs, 840 FLOPs on both sides. Backward, trainable:
    #   head: grad input 2*4*16 = 128 MACs, grad weight 4*2*16 = 128 MACs, grad bias 2*4 = 8 FLOPs
    #         -> 256 MACs, 2*256 + 8 = 520 FLOPs
    #   encoder.1 ReLU: 2 FLOPs per element, 2*16*2 = 64 FLOPs
    #   encoder.0: grad weight 16*2*8 = 256 MACs, grad bias 2*16 = 32 FLOPs (no grad for x) -> 256 MACs, 544 FLOPs
    #   model: 896 MACs, 840 + 1128 = 1968 FLOPs
    # Frozen encoder.0: nothing upstream of head needs a gradient, so only head's grad weight and bias are left:
    #   128 MACs, 264 FLOPs -> model 512 MACs, 1104 FLOPs
    assert (d.total["macs"].a, d.total["macs"].b) == (896, 512)
    assert (d.total["flops"].a, d.total["flops"].b) == (1968, 1104)
    assert d.total["params"].delta == 0 and d.total["trainable"].delta == -144  # 212 -> 68
    assert d.module("encoder.0")["flops"].b == 544  # its forward only
    assert d.module("encoder.1").status == "changed" and d.module("encoder.1")["flops"].delta == -64
    # the module table shows trainable params apart from params: they moved apart
    assert "trainable params" in d.render()


def test_memory_figures_and_gates():
    with torch.enable_grad():  # activations are saved for backward only with autograd on
        small = flopsight.profile(Net(), torch.ones(B, 8), memory=True, clock=flopsight.FakeClock())
        big = flopsight.profile(Net(hidden=32), torch.ones(B, 8), memory=True, clock=flopsight.FakeClock())
    d = flopsight.diff(small, big)
    # saved for backward: encoder.0's input (2*8*4 B = 64) and the ReLU's output (2*hidden*4 B), which head
    # also saves (one storage): 64 + 128 = 192 -> 64 + 256 = 320; peak, everything live at once: the
    # parameters, (8*hidden + hidden + hidden*4 + 4) * 4 B = 848 -> 1680, and the Linear's and the ReLU's
    # outputs live at once, 2 * 2*hidden*4 B = 256 -> 512: 1104 -> 2192
    assert (d.total["activations"].a, d.total["activations"].b) == (192, 320)
    assert (d.total["memory"].a, d.total["memory"].b) == (1104, 2192)
    assert d.module("encoder.1")["activations"].delta == 128
    assert [g.gate.text for g in d.check(["memory>+1087", "memory>+1088", "activations>+50%", "activations>+70%"])] \
        == ["memory>+1087", "activations>+50%"]  # +1088 B and +66.7%
    # memory not tracked on one side: a memory gate cannot pass silently
    untracked = flopsight.diff(inference(Net()), big)
    assert untracked.total["memory"].a is None
    assert any("memory was tracked in b only" in n for n in untracked.notes)
    (failure,) = untracked.check(["memory>+1%"])
    assert "not measured in a" in failure.message


# -- gates on counts: exact -------------------------------------------------------------------
@pytest.mark.parametrize("gate, fails", [
    ("flops>+1%", True),           # +99.05%
    ("flops>+99%", True),
    ("flops>+99.1%", False),
    ("flops > 100%", False),        # spaces, unsigned percentage
    ("macs>+100%", False),          # exactly +100% is not beyond
    ("macs>+99.99%", True),
    ("flops>+831", True),           # +832 FLOPs: absolute, exact
    ("flops>+832", False),
    ("flops>+1K", False),
    ("params>+0.2K", True),         # +208
    ("params>200", True),
    ("macs<-1%", False),            # grew: not below -1%
    ("flops<+100%", True),          # below +100% (an expected-growth gate)
    ("flops@encoder.0>+1%", True),  # 544 -> 1088, +100%
    ("flops@encoder.0>+100%", False),
    ("params@head>+94%", True),     # 68 -> 132, +94.1%
    ("params@head>+95%", False),
    ("macs@encoder>+256", False),   # 256 -> 512
    ("macs@encoder>+255", True),
    ("flops@encoder.1>+31", True),  # 32 -> 64
])
def test_count_gates(base, wide, gate, fails):
    d = flopsight.diff(base, wide)
    failures = d.check([gate])
    assert bool(failures) == fails
    if fails:
        assert failures[0].gate.text == gate and failures[0].message.startswith(gate + ": ")
        assert failures[0].tested is None  # counts have no noise to test


def test_gate_messages_are_readable(base, wide):
    d = flopsight.diff(base, wide)
    (f,) = d.check(["flops>+1%"])
    assert str(f) == "flops>+1%: FLOPs of the model rose 840 -> 1.67 K (+832, +99%), beyond +1%"
    (f,) = d.check("params@head<+100%")  # one gate as a string
    assert str(f) == "params@head<+100%: params of module 'head' rose 68 -> 132 (+64, +94.1%), below +100%"
    (ok,) = d.evaluate(["macs>+100%"])
    assert ok.passed and ok.message.endswith("within +100%")
    assert flopsight.diff(base, base).check(["flops>+0%", "params<-0%"]) == []  # equal: passes both ways


def test_gate_on_an_added_module(base):
    d = flopsight.diff(base, inference(Net(extra=True)))
    (f,) = d.check(["flops@extra>+1%"])
    assert "from 0" in f.message  # 0 -> 72: no percentage to speak of, and beyond any
    assert d.check(["flops@extra>+72"]) == []


@pytest.mark.parametrize("gate, says", [
    ("flop>+1%", "unknown metric 'flop' (did you mean 'flops'?)"),
    ("flops>>1%", "not understood"),
    ("flops>=1%", "not understood"),
    ("flops=1%", "not understood"),
    ("flops>+1x", "not understood"),
    ("flops>", "not understood"),
    ("", "not understood"),
    ("latency>+5", "needs a time unit"),
    ("flops>+5ms", "flops is not a time"),
    ("trainable>+1%", "unknown metric"),
])
def test_malformed_gate_raises_before_comparing(base, wide, gate, says):
    d = flopsight.diff(base, wide)
    with pytest.raises(ValueError) as e:
        d.check(["flops>+1%", gate])  # the good gate is not evaluated first
    assert f"gate {gate!r}" in str(e.value) and says in str(e.value)
    assert "<metric>[@<module path>]<op><threshold>" in str(e.value)


def test_unknown_module_in_a_gate_raises(base, wide):
    says = r"gate 'flops@encoder\.2>\+1%': no module 'encoder\.2' in either profile; did you mean 'encoder\.1'"
    with pytest.raises(ValueError, match=says):
        flopsight.diff(base, wide).check(["flops@encoder.2>+1%"])


def test_parse_gate_units():
    assert parse_gate("flops>+2G").value == 2 * 10**9
    assert parse_gate("params<-1.5M").value == -1_500_000
    assert float(parse_gate("latency>+500us").value) == pytest.approx(5e-4)
    assert float(parse_gate("bwd_latency>0.25s").value) == 0.25
    assert parse_gate("latency>0").value == 0  # zero needs no unit
    assert parse_gate("memory@encoder.0>+1%").path == "encoder.0"
    assert set(GATE_METRICS) == {"params", "macs", "flops", "latency", "fwd_latency", "bwd_latency", "memory",
                                 "activations"}
    with pytest.raises(TypeError, match="gate: expected a string"):
        parse_gate(3)


# -- gates on times: noise-aware -----------------------------------------------------------------
A = [10.05, 9.8, 10.3, 9.6, 10.1, 9.95, 10.4, 9.7, 10.2, 9.9]  # ms per call, no ties, median 10.0


def test_latency_regression_beyond_threshold_and_significant_fails(base):
    slower = [t * 1.3 for t in A]  # median 13.0 ms: +30%
    d = flopsight.diff(with_spans(base, A), with_spans(base, slower))
    assert d.total["latency"].a == pytest.approx(0.010) and d.total["latency"].b == pytest.approx(0.013)
    (f,) = d.check(["latency>+10%"])
    # every call of b (>= 12.48 ms) is slower than every call of a moved by +10% (<= 11.44 ms): the exact
    # one-sided p-value is 1 ordering in C(20, 10) = 184756
    assert f.tested and f.p_value == pytest.approx(1 / 184756)
    assert "median of 10 vs 10 calls" in f.message and "significant" in f.message
    assert d.check(["latency>+50%"]) == []  # +30% is within
    assert [g.gate.text for g in d.check(["latency>+2ms", "latency>+4ms"])] == ["latency>+2ms"]  # +3 ms


def test_one_slow_call_does_not_fail_the_gate(base):
    outlier = [100.0 if t == max(A) else t for t in A]  # one call stalled: the mean rises 90%, the median not
    d = flopsight.diff(with_spans(base, A), with_spans(base, outlier))
    assert d.total["latency"].relative == 0.0  # the figure is the median
    (result,) = d.evaluate(["latency>+10%"])
    assert result.passed and result.tested
    # the same change seen once per side can only be compared point to point, and that fails
    (f,) = flopsight.diff(with_spans(base, [10.0]), with_spans(base, [19.0])).check(["latency>+10%"])
    assert f.tested is False


def test_beyond_threshold_but_not_significant_passes(base):
    a = [8, 9, 10, 11, 12, 8.5, 9.5, 10.5, 11.5, 12.5]  # a wide spread
    b = [t * 1.12 for t in a]  # medians +12%, but a slowdown beyond +10% is not shown by the calls
    d = flopsight.diff(with_spans(base, a), with_spans(base, b))
    (result,) = d.evaluate(["latency>+10%"])
    assert result.passed and result.tested
    assert result.p_value == pytest.approx(mann_whitney_p([t * 1.1 for t in a], b)) and result.p_value > 0.05
    assert "beyond +10%, but not significant" in result.message
    # a looser significance level does not help: p is 0.37
    assert d.check(["latency>+10%"], alpha=0.2) == []


def test_too_few_samples_compares_points_and_says_so(base):
    d = flopsight.diff(with_spans(base, [10.0]), with_spans(base, [12.0]))
    (f,) = d.check(["latency>+10%"])
    assert "rose 10 ms -> 12 ms per call (+2 ms, +20%), beyond +10%" in f.message
    assert "could not be tested for noise: 1 vs 1 timed calls cannot show significance at alpha=0.05" in f.message
    (ok,) = d.evaluate(["latency>+25%"])
    assert ok.passed and ok.tested is False and "could not be tested" in ok.message
    # 3 vs 3 calls: the best possible p-value is 1/C(6, 3) = 0.05, never below alpha; 3 vs 4 can be tested
    three, four = with_spans(base, [20.0] * 3), with_spans(base, [20.0, 21, 22, 23])
    assert flopsight.diff(with_spans(base, A[:3]), three).check(["latency>+10%"])[0].tested is False
    assert flopsight.diff(with_spans(base, A[:3]), four).check(["latency>+10%"])[0].tested


def test_speedup_gate_and_backward_samples(base):
    fwd, bwd = A, [2 * t for t in A]
    d = flopsight.diff(with_spans(base, fwd, bwd), with_spans(base, [t * 0.7 for t in fwd], bwd))
    # forward 30% faster, backward unchanged: latency per call 30 -> 27 ms (-10%)
    assert d.total["fwd_latency"].relative == pytest.approx(-0.3)
    assert d.total["latency"].relative == pytest.approx(-0.1)
    assert [g.gate.text for g in d.check(["fwd_latency<-20%", "bwd_latency<-1%", "bwd_latency>+1%"])] \
        == ["fwd_latency<-20%"]
    assert "bwd latency" in d.render()  # shown once a side has a backward pass


def test_module_latency_gates_are_point_values(base):
    d = flopsight.diff(with_spans(base, A), with_spans(base, A))
    (result,) = d.evaluate(["latency@encoder>+10%"])
    assert result.tested is False and "no per-call samples are kept for a module" in result.message


def test_noise_rule_on_real_repeated_calls():
    # Five timed training calls per side (FakeClock: every span counts its clock stamps, so the calls of
    # one side are alike and the decision is fixed). Frozen encoder.0: its backward (and the ReLU's)
    # no longer runs, so the backward pass takes fewer stamps.
    a, b = training(Net(), calls=5, warm=True), training(Net(frozen=True), calls=5, warm=True)
    d = flopsight.diff(a, b)
    assert (d.a.forward_calls, d.a.backward_passes, len(d.a.samples["latency"])) == (5, 5, 5)
    (f,) = d.check(["bwd_latency<-10%"])
    assert f.tested and f.p_value < 0.05  # every frozen call is faster
    # the same model again: every call alike on both sides, all ties, no evidence either way
    (same,) = flopsight.diff(a, training(Net(), calls=5, warm=True)).evaluate(["latency>+0%"])
    assert same.passed and same.tested and same.p_value == 1.0


def test_real_clock_samples_are_tested():
    # perf_counter: no assertion on the outcome, only that the samples were used
    model = Net()
    x = torch.ones(B, 8)
    runs = []
    for _ in range(2):
        with torch.no_grad(), flopsight.Profiler(model) as prof:
            for _ in range(8):
                model(x)
        runs.append(prof.result)
    (result,) = flopsight.diff(*runs).evaluate(["latency>+10%"])
    assert result.tested is True and 0 <= result.p_value <= 1
    assert "median of 8 vs 8 calls" in result.message


def test_mann_whitney():
    # no ties, small: exact; 1 of C(7, 3) = 35 orderings puts all of y above x
    assert mann_whitney_p([1, 2, 3], [4, 5, 6, 7]) == pytest.approx(1 / 35)
    assert mann_whitney_p([1, 2, 3, 5], [4, 6, 7]) == pytest.approx(2 / 35)  # U = 11 or 12 of 12
    assert mann_whitney_p([4, 5, 6, 7], [1, 2, 3]) == 1.0
    assert mann_whitney_p([1.0] * 4, [1.0] * 4) == 1.0  # all equal: no evidence
    big_x, big_y = list(range(30)), [t + 15.5 for t in range(30)]  # 900 pairs: normal approximation
    assert mann_whitney_p(big_x, big_y) < 1e-3 < mann_whitney_p(big_y, big_x)
    with pytest.raises(ValueError):
        mann_whitney_p([], [1.0])


# -- output -------------------------------------------------------------------------------------
def test_text_render(base, wide):
    text = flopsight.diff(base, wide).render()
    lines = text.splitlines()
    assert lines[0] == "flopsight diff: a -> b"
    assert lines[2].split() == ["run", "a", "b"]  # what each side ran, then the totals, then the modules
    assert lines.index("Model totals") < lines.index("Modules: 4 of 4 changed, 0 added, 0 removed")
    assert any(line.split()[:4] == ["FLOPs", "840", "1.67", "K"] for line in lines)
    assert "Modules: 4 of 4 changed, 0 added, 0 removed" in text
    assert "~ encoder.0" in text


def test_markdown_shape(base):
    grown = inference(Net(extra=True))
    d = flopsight.diff(base, grown)
    md = d.render("md", gates=d.evaluate(["flops>+1%", "params>+50%"]))
    lines = md.splitlines()
    assert lines[0] == "### flopsight diff: `a` → `b`"
    tables = [[line for line in block.splitlines()] for block in md.split("\n\n") if block.startswith("|")]
    header, totals, modules, gates = tables
    assert header[0] == "| run | a | b |" and header[2] == "| model | Net | Net |"
    assert totals[0] == "| metric | a | b | change | % | noise |"
    assert totals[1] == "| --- | --: | --: | --: | --: | --: |"
    assert "| FLOPs | 840 | 912 | +72 | +8.57% |  |" in totals
    assert modules[0] == "|  | module | type | params | MACs | FLOPs | latency |"
    assert modules[2].startswith("| + | `extra` | Linear | +20 | +32 | +72 |")
    assert len(modules) == 3  # only the changed module
    assert gates[2].startswith("| `flops>+1%` | ❌ fail |") and gates[3].startswith("| `params>+50%` | ✅ pass |")
    assert all(line.count("|") == table[0].count("|") for table in tables for line in table)
    everything = d.render("md", all_modules=True)
    assert "`encoder.0`" in everything and "(all shown)" in everything


def test_markdown_escapes_pipes(base):
    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            self.add_module("a|b", nn.Linear(8, 4))

        def forward(self, x):
            return getattr(self, "a|b")(x)

    with torch.no_grad():
        odd = flopsight.profile(Odd(), torch.ones(B, 8), clock=flopsight.FakeClock())
    md = flopsight.diff(base, odd, force=True).render("md")  # two model classes: modules compared only by force
    assert "`a\\|b`" in md


def test_json_shape(base):
    grown = inference(Net(extra=True))
    d = flopsight.diff(base, grown)
    data = json.loads(d.render("json", gates=d.evaluate(["flops>+1%"])))
    assert data["flopsight_diff"] == 2
    assert set(data) == {"flopsight_diff", "a", "b", "header", "warnings", "notes", "module_level", "sameness",
                         "units", "total", "modules", "summary", "gates", "verdict"}
    assert data["verdict"] is None  # one call a side: no verdict
    assert data["a"]["forward_calls"] == 1 and data["a"]["memory_tracked"] is False
    assert data["total"]["metrics"]["flops"] == {"a": 840, "b": 912, "delta": 72, "relative": 72 / 840}
    assert data["total"]["metrics"]["memory"] == {"a": None, "b": None, "delta": None, "relative": None}
    # FakeClock, 1 ms per stamp: the extra module's call adds two stamps; one call per side cannot be tested
    noise = {"samples": [1, 1], "median": pytest.approx([0.009, 0.011]), "p_value": None}
    assert data["total"]["noise"]["latency"] == noise
    (extra,) = data["modules"]
    assert extra["path"] == "extra" and extra["status"] == "added" and extra["type_a"] is None
    assert extra["metrics"]["params"]["relative"] is None  # from 0: no finite ratio (JSON has no inf)
    assert data["summary"] == {"modules": 5, "changed": 1, "added": 1, "removed": 0}
    assert data["gates"][0]["passed"] is False and data["units"]["latency"] == "seconds per call"
    assert len(json.loads(d.render("json", all_modules=True))["modules"]) == 5


def test_render_rejects_unknown_format(base):
    with pytest.raises(ValueError, match="fmt: expected one of text, md, json"):
        flopsight.diff(base, base).render("html")


def test_change_arithmetic():
    assert Change(4, 4).relative == 0.0 and Change(0, 0).relative == 0.0
    assert Change(0, -3).relative == -math.inf
    assert Change(None, 3).delta is None and Change(None, 3).relative is None


# -- inputs -------------------------------------------------------------------------------------
def test_diff_reads_saved_profiles(tmp_path, base, wide):
    base.save(tmp_path / "a.json")
    wide.save(tmp_path / "b.json")
    d = flopsight.diff(str(tmp_path / "a.json"), tmp_path / "b.json")
    assert d.a.label.endswith("a.json") and d.b.label.endswith("b.json")
    assert d.total["flops"].delta == 832


def test_diff_input_errors(tmp_path, base):
    with pytest.raises(TypeError, match="a: expected a ProfileResult or the path"):
        flopsight.diff(3, base)
    with pytest.raises(FileNotFoundError, match="b: no such file"):
        flopsight.diff(base, tmp_path / "missing.json")
    (tmp_path / "x.json").write_text('{"traceEvents": []}')
    with pytest.raises(ValueError, match="b: .* is not a flopsight profile JSON"):
        flopsight.diff(base, tmp_path / "x.json")


def test_notes_when_profiles_differ(base):
    d = flopsight.diff(base, training(Net(), calls=2))
    assert any("a timed 1 forward call(s) and 0 backward pass(es), b 2 and 2" in n for n in d.notes)


# -- the CLI -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def saved(tmp_path_factory, base, wide):
    folder = tmp_path_factory.mktemp("diff")
    base.save(folder / "a.json")
    wide.save(folder / "b.json")
    (folder / "bad.json").write_text("[1, 2]")
    return folder


def cli(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flopsight", "diff", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_cli_gate_fails_with_exit_1(saved):
    run = cli("a.json", "b.json", "--fail-on", "flops>+1%", "--fail-on", "latency>+1000%", cwd=saved)
    assert run.returncode == 1, run.stderr
    assert "Model totals" in run.stdout and "FAIL  flops>+1%" in run.stdout
    assert "flopsight diff: gate failed: flops>+1%: FLOPs of the model rose" in run.stderr
    assert "latency>+1000%" not in run.stderr  # that one passed


def test_cli_gates_pass_with_exit_0_in_markdown(saved):
    run = cli("a.json", "b.json", "--format", "md", "--fail-on", "flops>+100%", "--all", cwd=saved)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("### flopsight diff: `a.json` → `b.json`") and "✅ pass" in run.stdout
    assert run.stderr == ""


@pytest.mark.parametrize("args, says", [
    (["a.json", "b.json", "--fail-on", "flops>>1%"], "gate 'flops>>1%'"),
    (["a.json", "missing.json"], "b: no such file"),
    (["a.json", "bad.json"], "is not a flopsight profile JSON"),
    (["a.json", "b.json", "--fail-on", "flops@nowhere>1%"], "no module 'nowhere'"),
    (["a.json", "b.json", "--alpha", "2"], "--alpha"),
    (["a.json"], "the following arguments are required: b"),
    (["a.json", "b.json", "--format", "html"], "invalid choice"),
])
def test_cli_usage_errors_exit_2(saved, capsys, monkeypatch, args, says):
    # in-process through the same entry point as the console script, to keep the suite quick
    monkeypatch.chdir(saved)
    try:
        code = main(["diff", *args])
    except SystemExit as e:  # argparse's own usage errors
        code = e.code
    captured = capsys.readouterr()
    assert code == 2 and says in captured.err
    assert captured.out == ""


def test_cli_usage_error_in_a_subprocess(saved):
    run = cli("a.json", "b.json", "--fail-on", "flop>1%", cwd=saved)
    assert run.returncode == 2 and "unknown metric 'flop'" in run.stderr and run.stdout == ""


def test_cli_json_output(saved, capsys, monkeypatch):
    monkeypatch.chdir(saved)
    code = main(["diff", "a.json", "b.json", "--format", "json", "--fail-on", "params>+1M"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["total"]["metrics"]["params"]["delta"] == 208 and data["gates"][0]["passed"]


# -- layers: the analysis holds numbers, the renderer writes them -------------------------------------
def test_gate_result_holds_the_figures_not_the_text(base):
    slower = [t * 1.3 for t in A]
    d = flopsight.diff(with_spans(base, A), with_spans(base, slower))
    (r,) = d.evaluate(["latency>+10%"], alpha=0.01)
    assert (r.a, r.b) == (pytest.approx(0.010), pytest.approx(0.013))  # the medians of the calls
    assert r.beyond and r.tested and r.significant and not r.passed
    assert (r.samples, r.alpha, r.p_value) == ((10, 10), 0.01, pytest.approx(1 / 184756))
    assert r.message == str(r) == gate_message(r)
    assert r.to_dict() == {"gate": "latency>+10%", "passed": False, "tested": True, "p_value": r.p_value}  # no text
    (count,) = d.evaluate(["flops>0"])
    assert (count.a, count.b, count.beyond, count.tested, count.significant) == (840, 840, False, None, None)
    (unmeasured,) = d.evaluate(["memory>+1%"])
    assert not unmeasured.measured and unmeasured.beyond is None and not unmeasured.passed


def test_gate_message_says_each_outcome(base, wide):
    d = flopsight.diff(base, wide)
    (r,) = d.evaluate(["flops>+1%"])
    assert gate_message(r) == "flops>+1%: FLOPs of the model rose 840 -> 1.67 K (+832, +99%), beyond +1%"
    (r,) = d.evaluate(["memory<-1.5M"])
    assert gate_message(r) == ("memory<-1.5M: cannot compare peak memory of the model: not measured in a "
                               "(memory needs memory=True)")
    a = [8, 9, 10, 11, 12, 8.5, 9.5, 10.5, 11.5, 12.5]
    noisy = flopsight.diff(with_spans(base, a), with_spans(base, [t * 1.12 for t in a]))
    (r,) = noisy.evaluate(["latency>+10%"])
    assert gate_message(r).startswith("latency>+10%: latency of the model rose 10.25 ms -> 11.48 ms per call "
                                      "(median of 10 vs 10 calls, +1.23 ms, +12%), beyond +10%, but not significant "
                                      "(one-sided Mann-Whitney U against a moved by +10%, p=0.")
    (r,) = noisy.evaluate(["latency@encoder<-1ms"])
    assert gate_message(r).endswith(", not below -1 ms; could not be tested for noise: no per-call samples are "
                                    "kept for a module (see docs/diff.md)")


def test_render_diff_is_the_renderers_side_of_render(base, wide):
    d = flopsight.diff(base, wide)
    gates = d.evaluate(["flops>+1%", "latency>+10%"])
    for fmt in DIFF_FORMATS:
        for all_modules in (False, True):
            assert render_diff(d, fmt, all_modules=all_modules, gates=gates) \
                == d.render(fmt, all_modules=all_modules, gates=gates)
    assert render_diff(d).splitlines()[0] == "flopsight diff: a -> b"
    with pytest.raises(ValueError, match="fmt: expected one of text, md, json, got 'html'"):
        render_diff(d, "html")


def test_threshold_written_back():
    assert [format_threshold(parse_gate(g)) for g in ("flops>+1%", "params<-1.5M", "latency>+500us", "memory>0")] \
        == ["+1%", "-1.5 M", "+500 us", "0"]
    assert (format_value("bytes", 2000), format_signed("count", -1500), format_percent(None)) \
        == ("2 KB", "-1.5 K", "n/a")


def test_the_diff_renderer_uses_only_public_names_of_the_analysis():
    import ast

    import flopsight.renderers.diff_renderer as renderer

    tree = ast.parse(open(renderer.__file__).read())
    imported = [a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and "analysis" in (node.module or "") for a in node.names]
    assert imported and [n for n in imported if n.startswith("_")] == []


def test_every_public_name_still_imports_from_the_package():
    import flopsight.analysis.diff as package

    before_the_split = ["diff", "ProfileDiff", "ModuleDiff", "Change", "Side", "Gate", "GateResult", "parse_gate",
                        "parse_gates", "mann_whitney_p", "METRICS", "GATE_METRICS", "DIFF_FORMATS",
                        "DIFF_SCHEMA_VERSION", "DEFAULT_ALPHA", "GATE_GRAMMAR"]
    assert set(before_the_split) <= set(package.__all__)
    assert all(hasattr(package, name) for name in package.__all__)
    assert flopsight.diff is package.diff


def test_the_diffs_dict_holds_data_and_its_json_the_words(base):
    """``to_dict`` is data only (caveats by kind, the verdict's figures, gates' outcomes); the
    JSON format adds what the renderers word: the notes, the gates' messages, the verdict's text
    (an inference profile has no verdict: tests/test_samples.py holds one's text)."""
    import json

    # memory on one side only: a caveat, and a note that words it
    wide_with_memory = inference(Net(hidden=32), memory=True)
    d = flopsight.diff(with_spans(base, A), with_spans(wide_with_memory, [t * 1.3 for t in A]))
    gates = d.evaluate(["flops>+1%"])
    data = d.to_dict(gates=gates)
    assert "notes" not in data and all("message" not in g for g in data["gates"])
    assert data["verdict"] is None
    assert data["caveats"] == [{"kind": "memory", "figures": ["b"], "warning": True}]
    words = json.loads(d.render("json", gates=gates))
    assert d.notes and words["notes"] == d.notes and "caveats" not in words
    assert words["gates"][0]["message"] == gate_message(gates[0])
