"""Issue 29 item 5 and issue 37 item 1: one verdict that the ranking, the prose and the JSON
share; every change (the step's, each part's, each module's) one statistic, the
Hodges-Lehmann shift with its 95% interval; a part named a cause only when its interval
leaves out zero; the modules under compute adding up to its change with what they leave;
the plain warning on an interval as wide as the step; the profiler's own time on the CPU path.

The verdict's inputs are real results (a tiny MLP's step, profiled on a FakeClock) given
samples with chosen numbers: multiples of T = 2**-7 s, so that sums are exact in binary and
nothing depends on the machine's clock. Intervals: with 5 steps a side, 25 differences, the
95% interval runs from the 3rd smallest to the 3rd largest (P(U <= 2) = 4/252 <= 0.025 <
P(U <= 3) = 7/252); with 4 a side, from the smallest to the largest (P(U = 0) = 1/70).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

import flopsight
from flopsight.capture.assembly.build import UNMEASURED_COST
from flopsight.capture.runtime.timing import HostClock
from flopsight.renderers.diff_renderer import verdict_text
from flopsight.result.samples import StepSamples
from flopsight.result.steps import combine_steps

T = 2.0**-7  # 7.8125 ms: every figure below is a whole number of T, exact in binary
PARTS = ("forward", "backward", "step", "framework", "communication", "other", "profiler")


def _mlp(hidden: int = 16) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 4))


def _one_step(model: torch.nn.Module, clock=None, backend: str | None = None) -> flopsight.ProfileResult:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with flopsight.Profiler(model, optimizer=opt, clock=clock or flopsight.FakeClock(), backend=backend) as prof:
        model(torch.ones(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
    return prof.result


_BASE = _one_step(_mlp())


def _result(compute: dict[str, list[int]] | None = None, **parts: list[int]) -> flopsight.ProfileResult:
    """A real step's result whose samples hold ``parts`` (anatomy part -> per-step counts of
    T; compute given as ``backward``) and ``compute`` (module path -> its own ops' time per
    step, in T); its wall time per step is the parts' sum."""
    n = len(next(iter(parts.values())))
    per_part = {p: tuple(k * T for k in parts.get(p, [0] * n)) for p in PARTS}
    walls = tuple(math.fsum(per_part[p][i] for p in PARTS) for i in range(n))
    figures = {"wall": walls, **{f"anatomy.{p}": v for p, v in per_part.items()}}
    modules = {path: tuple(k * T for k in ks) for path, ks in (compute or {}).items()}
    return dataclasses.replace(_BASE, samples=StepSamples("step", figures, compute=modules))


# -- each change is its own shift, with its interval -----------------------------------------------
def test_each_change_is_its_shift_with_its_interval():
    a = _result(backward=[40, 41, 42, 43, 44], framework=[10] * 5, other=[4, 6, 4, 5, 4], profiler=[1] * 5)
    b = _result(backward=[60, 61, 62, 63, 64], framework=[12, 14, 16, 18, 20], communication=[0, 0, 5, 0, 0],
                other=[4, 4, 6, 5, 4], profiler=[2] * 5)
    v = flopsight.diff(a, b).verdict
    # walls: a 55 58 57 59 59 T, b 78 81 91 88 90 T. The 25 differences b - a, sorted:
    # 19 19 20 21 22 22 23 23 24 26 29 29 [30] 31 31 31 32 32 32 33 33 33 34 35 36: the
    # median (13th) +30 T, the interval from the 3rd (20) to the 23rd (34); a and b are
    # each side's median wall, 58 and 88 T; every b above every a (a's two 59 T tie: the
    # test's normal approximation, p = 0.012)
    assert (v.step.a, v.step.b, v.step.delta, v.step.low, v.step.high) == (58 * T, 88 * T, 30 * T, 20 * T, 34 * T)
    assert v.step.significant and v.step.p_value < 0.05
    # compute: b - a = 20 + (j - i) for i, j in 0..4: 16 (once) .. 20 (5 times) .. 24 (once),
    # median 20, 3rd 17, 23rd 23; framework: 2, 4, 6, 8, 10 T, each five times: median 6,
    # 3rd 2, 23rd 10 (+ 10 T); profiler +1 T every time: [1, 1]; communication: 0 twenty
    # times and 5 five times: median 0 in [0, 5], unchanged; other: the same values on both
    # sides, the differences -2 (3), -1 (4), 0 (11), +1 (4), +2 (3): 0 in [-2, 2], unchanged
    got = {p: (d.delta, d.low, d.high) for p, d in v.parts.items()}
    assert got == {"compute": (20 * T, 17 * T, 23 * T), "framework": (6 * T, 2 * T, 10 * T),
                   "communication": (0.0, 0.0, 5 * T), "other": (0.0, -2 * T, 2 * T), "profiler": (T, T, T)}
    # the profiler's +1 T is beyond its own noise but under a tenth of the step's +30 T (3 T):
    # minor, told but not a cause; framework's +6 T is a fifth of it: a cause
    assert [c.part for c in v.causes] == ["compute", "framework"]
    assert [c.part for c in v.minor] == ["profiler"]
    assert set(v.unchanged) == {"communication", "other"} and v.largest_cause == "compute"
    # each part its own estimate: 20 + 6 + 1 = 27 T, the step's is 30 T
    assert math.fsum(d.delta for d in v.parts.values()) != v.step.delta
    # the JSON holds the same figures, the text says the step's interval
    data = v.to_dict()
    assert data["parts"]["compute"]["low"] == 17 * T and data["step"]["delta"] == 30 * T
    text = verdict_text(v, "a", "b")
    assert text.startswith("b's step is 234.38 ms slower than a's (95% interval +156.25 ms to +265.62 ms, "
                           "5 vs 5 steps): +156.25 ms compute")
    assert "; beyond their own noise but under a tenth of the step's change (not causes): +7.81 ms profiler " \
        "(flopsight's own time left in the phases, not the model's); communication and other unchanged" in text
    assert [c["part"] for c in data["minor"]] == ["profiler"] and data["minor"][0]["delta"] == T


def test_the_modules_under_compute_add_up_to_its_change():
    a = _result(backward=[40, 41, 42, 43, 44], compute={"0": [20, 21, 22, 23, 24], "2": [20] * 5, "1": [0] * 5})
    b = _result(backward=[60, 61, 62, 63, 64], compute={"0": [30, 31, 32, 33, 34], "2": [25, 26, 27, 28, 29],
                                                       "1": [0, 0, 0, 0, 1]})
    v = flopsight.diff(a, b).verdict
    (compute,) = v.causes
    # compute +20 T (as above); module 0: +10 T (10 + (j - i)); module 2: 5..9 T against a
    # constant 20 T, each five times, median +7 T; module 1 (the ReLU) moved by 0 (20 of its
    # 25 differences are 0): not listed. What the two leave: 20 - 10 - 7 = +3 T
    assert [(m.path, m.type_name, m.delta) for m in compute.modules] == [("0", "Linear", 10 * T),
                                                                        ("2", "Linear", 7 * T)]
    assert compute.rest == 3 * T
    assert math.fsum([*(m.delta for m in compute.modules), compute.rest]) == compute.difference.delta
    assert "+156.25 ms compute (most in 0 (Linear) +78.12 ms, 2 (Linear) +54.69 ms; the rest +23.44 ms)" in \
        verdict_text(v, "a", "b")
    assert v.to_dict()["causes"][0]["rest"] == 3 * T


def test_an_even_count_of_steps_splits_the_median_that_the_report_prints():
    a = _result(backward=[40, 44, 36, 42], framework=[20, 16, 26, 21])
    b = _result(backward=[100, 60, 90, 80], framework=[30, 50, 20, 40])
    # a's walls 60 60 62 63 T: the two middle steps are the 2nd and 3rd, median 61 T, compute
    # (44 + 36) / 2 = 40 T, framework (16 + 26) / 2 = 21 T; b's walls 130 110 110 120 T: the
    # 3rd and 4th, median 115 T, compute (90 + 80) / 2 = 85 T, framework (20 + 40) / 2 = 30 T
    for r, wall, compute, framework in ((a, 61, 40, 21), (b, 115, 85, 30)):
        it = r.iteration  # what the report and the example's table print
        assert (it.latency, it.anatomy.backward, it.anatomy.framework) == (wall * T, compute * T, framework * T)
        assert it.anatomy.total == it.latency
    v = flopsight.diff(a, b).verdict
    # 16 differences a side of 4: the step's 47 47 48 48 50 50 50 [50 57] 58 60 60 67 68 70 70,
    # median +53.5 T, the interval from the smallest to the largest; compute's 16 .. 64, the
    # middle two 44 and 46: +45 T; framework's -6 .. 34, the middle two 14 and 14: +14 T
    assert (v.step.delta, v.step.low, v.step.high) == (53.5 * T, 47 * T, 70 * T)
    assert {p: d.delta for p, d in v.parts.items()} == {"compute": 45 * T, "framework": 14 * T,
                                                         "communication": 0.0, "other": 0.0}
    assert not v.parts["framework"].significant  # -6 .. 34 T holds zero


def test_real_steps_compute_samples_add_up_to_the_anatomys_compute():
    # two models, five real steps each on the host's clock: whatever the times, each step's
    # modules' own compute adds up to that step's compute in the anatomy
    steps = [_one_step(_mlp(16), HostClock()) for _ in range(5)]
    a = combine_steps(steps)
    for i, r in enumerate(steps):
        an = r.iteration.anatomy
        own = math.fsum(seconds[i] for seconds in a.samples.compute.values())
        assert own == pytest.approx(an.forward + an.backward + an.step, rel=1e-9, abs=1e-12)
    b = combine_steps([_one_step(_mlp(256), HostClock()) for _ in range(5)])
    v = flopsight.diff(a, b).verdict
    assert "profiler" in v.parts  # the CPU path's profiler time is a part of its own
    # the step's a and b are each side's median wall (for 5 steps, the median step's: the report's)
    assert (v.step.a, v.step.b) == (a.iteration.latency, b.iteration.latency)
    assert flopsight.ProfileResult.from_dict(b.to_dict()).samples.compute == b.samples.compute


# -- the cause named moved beyond its own noise ------------------------------------------------------
def _within_noise_mover():
    a = _result(backward=[40] * 5, framework=[4, 6, 5, 5, 5], other=[40] * 5)
    # b's compute swings widely (0..80 T) and "other" swings against it; at b's median step
    # (walls 113 117 115 114 116 T: the third, 115 T) compute is 70 T
    compute = [0, 10, 70, 60, 80]
    b = _result(backward=compute, framework=[13, 17, 15, 14, 16], communication=[20] * 5,
                other=[80 - c for c in compute])
    return a, b


def test_a_part_within_its_noise_is_never_named_the_cause():
    a, b = _within_noise_mover()
    v = flopsight.diff(a, b).verdict
    # walls 84 86 85 85 85 and 113 117 115 114 116 T: the differences 27 (1), 28 (4), 29 (5),
    # 30 (5), 31 (5), 32 (4), 33 (1): +30 T, from 28 to 32; every b above every a: significant
    assert (v.step.delta, v.step.low, v.step.high) == (30 * T, 28 * T, 32 * T) and v.step.significant
    # compute: b - 40 = -40, -30, 20, 30, 40 T, five times each: +20 T, from -40 to 40: within;
    # other: 40, 30, -30, -20, -40: -20 T, within; framework +10 T (8..12), communication +20 T
    assert v.parts["compute"].delta == 20 * T and not v.parts["compute"].significant
    assert [c.part for c in v.causes] == ["communication", "framework"]
    assert set(v.unchanged) == {"compute", "other"}
    # the largest cause is the largest part beyond its noise, not compute, which moved more
    assert v.largest_cause == "communication"
    text = verdict_text(v, "a", "b")
    assert text.index("exposed communication") < text.index("within their own noise: ") < text.index("compute")
    assert "compute unchanged" not in text  # it moved, within its noise: said with its change


def test_a_part_too_small_to_explain_the_step_is_minor_not_a_cause():
    # ZeRO-3 against ZeRO-0 in small: communication grows by about the step's change, the
    # framework's own code a little, and compute by a sliver (the engine's own copies)
    a = _result(backward=[40] * 5, framework=[10] * 5, communication=[0, 1, 2, 3, 4])
    b = _result(backward=[42] * 5, framework=[14] * 5, communication=[24, 25, 26, 27, 28])
    v = flopsight.diff(a, b).verdict
    # walls 50..54 and 80..84 T: the differences 30 + (j - i), 26 (1), 27 (2), 28 (3) .. 34 (1):
    # +30 T, from the 3rd (27) to the 23rd (33). Communication +24 T (21 .. 27), framework
    # +4 T and compute +2 T in every step (intervals [4, 4] and [2, 2]): all beyond their
    # noise; a tenth of the step's change is 3 T: framework (4 T) is a cause, compute (2 T) minor
    assert (v.step.delta, v.step.low, v.step.high) == (30 * T, 27 * T, 33 * T)
    assert [(c.part, c.difference.delta) for c in v.causes] == [("communication", 24 * T), ("framework", 4 * T)]
    assert [(c.part, c.difference.delta) for c in v.minor] == [("compute", 2 * T)]
    assert v.largest_cause == "communication" and v.unchanged == ("other",)
    text = verdict_text(v, "a", "b")
    causes, minor = text.split("; beyond their own noise but under a tenth of the step's change (not causes): ")
    assert "exposed communication" in causes and "framework and hooks" in causes and "compute" not in causes
    assert minor.startswith("+15.62 ms compute")  # 2 T
    assert [c["part"] for c in v.to_dict()["minor"]] == ["compute"]


def test_no_part_beyond_its_noise_names_no_cause():
    # every part of b's swings by more than it moved; the step as a whole moved beyond its noise
    a = _result(backward=[40] * 5, other=[40] * 5)
    b = _result(backward=[10, 30, 60, 80, 100], other=[90, 72, 42, 23, 3])
    v = flopsight.diff(a, b).verdict
    # a's walls 80 T, b's 100 102 102 103 103 T: the differences 20 (5), 22 (10), 23 (10): +22 T,
    # from 20 to 23; compute: -30, -10, 20, 40, 60 T (five times each): +20 T, from -30 to 60;
    # other: 50, 32, 2, -17, -37 T: +2 T, from -37 to 50: both hold zero
    assert v.step.significant and v.step.delta == 22 * T
    assert v.causes == () and v.largest_cause is None
    text = verdict_text(v, "a", "b")
    assert "no part moved beyond its own noise the step's way (slower)" in text


def test_a_step_within_its_noise_still_tells_every_parts_change():
    # compute -30 T and framework +30 T, each every time, cancel out; other +5 T every step
    a = _result(backward=[40] * 5, framework=[40] * 5, other=[0, 10, 20, 30, 40])
    b = _result(backward=[10] * 5, framework=[70] * 5, other=[5, 15, 25, 35, 45])
    v = flopsight.diff(a, b).verdict
    # walls 80 .. 120 and 85 .. 125 T by 10: the differences are 5 T plus those of 0, 10, 20,
    # 30, 40 T among themselves (-40 .. 40, the 3rd -30, the 23rd 30): +5 T, from -25 to 35
    assert (v.step.delta, v.step.low, v.step.high) == (5 * T, -25 * T, 35 * T)
    assert not v.step.significant and v.largest_cause is None
    text = verdict_text(v, "a", "b")
    assert "within the noise, not significant; beyond their own noise, though: -234.38 ms compute" in text
    assert text.endswith("; within their own noise: +39.06 ms other; communication unchanged")  # 5 T = 39.0625 ms


# -- one verdict for the ranking, the prose and the JSON ----------------------------------------------
def _stages() -> dict[int, flopsight.ProfileResult]:
    """ZeRO-0 with a wide spread (median 100 T, IQR 50..170 T), ZeRO-1 and ZeRO-2 quiet at 90
    and 95 T, ZeRO-3 quiet at 150 T: 150 T is significantly slower than ZeRO-1's 90 T, but
    ZeRO-0's spread (+-60 T) covers its 50 T."""
    return {0: _result(backward=[40, 50, 100, 170, 180]), 1: _result(backward=[89, 90, 90, 90, 91]),
            2: _result(backward=[94, 95, 95, 95, 96]), 3: _result(backward=[148, 150, 150, 150, 152])}


def _load_example():
    path = Path(__file__).parents[1] / "examples" / "zero_stages.py"
    spec = importlib.util.spec_from_file_location("zero_stages_example", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_the_ranking_and_the_prose_use_one_test():
    from flopsight.analysis.diff.ranking import rank
    from flopsight.renderers.verdict_words import ranking_text

    stages = {f"ZeRO-{s}": r for s, r in _stages().items()}
    r = rank(stages)
    # any two stages in different tiers differ significantly, by the verdict the prose words
    for x in stages:
        for y in stages:
            if x != y and r.tier(x) != r.tier(y):
                assert r.verdict(x, y).step.significant, (x, y)
    v = r.verdict("ZeRO-0", "ZeRO-3")
    # 148 150 150 150 152 against 40 50 100 170 180 T: the differences -32 -30 -30 -30 -28 -22
    # -20 -20 -20 -18 48 50 [50] 50 52 98 ..: +50 T, from -30 to 110 T: not significant
    assert (v.step.delta, v.step.low, v.step.high) == (50 * T, -30 * T, 110 * T) and not v.step.significant
    assert r.tier("ZeRO-0") == r.tier("ZeRO-3")
    assert v is r.verdict("ZeRO-0", "ZeRO-3")  # computed once, kept
    assert "within the noise, not significant" in verdict_text(v, "ZeRO-0", "ZeRO-3")
    # ZeRO-0 (told apart from none) links all four in one tier; the pairs told apart on their
    # own are named, so that "≈" never hides a difference the test found
    assert r.tiers == (("ZeRO-1", "ZeRO-2", "ZeRO-0", "ZeRO-3"),)
    assert r.apart == (("ZeRO-1", "ZeRO-2"), ("ZeRO-1", "ZeRO-3"), ("ZeRO-2", "ZeRO-3"))
    assert ranking_text(r) == ("ZeRO-1 ≈ ZeRO-2 ≈ ZeRO-0 ≈ ZeRO-3 (of these, told apart on their own: "
                               "ZeRO-1 < ZeRO-2, ZeRO-1 < ZeRO-3, ZeRO-2 < ZeRO-3)")


def test_a_quiet_slower_stage_starts_its_own_tier_and_the_prose_agrees():
    from flopsight.analysis.diff.ranking import rank
    from flopsight.renderers.verdict_words import ranking_text

    stages = _stages()
    stages[0] = _result(backward=[99, 100, 100, 100, 101])  # ZeRO-0 quiet: 100 +- 0 T
    r = rank({f"ZeRO-{s}": x for s, x in stages.items()})
    # 90, 95, 100, 150 T, each +-0 T and every sample of one above every sample of the one before
    assert r.tiers == (("ZeRO-1",), ("ZeRO-2",), ("ZeRO-0",), ("ZeRO-3",)) and r.apart == ()
    assert ranking_text(r) == "ZeRO-1 < ZeRO-2 < ZeRO-0 < ZeRO-3"
    assert r.verdict("ZeRO-0", "ZeRO-3").step.significant


def test_the_examples_answers_are_one_verdict():
    answers = _load_example().answers(_stages())
    # the example's old ranking said "ZeRO-0 ≈ ZeRO-1 ≈ ZeRO-2 < ZeRO-3" (ZeRO-3 against ZeRO-1,
    # 1.67x) while its prose found ZeRO-3 against ZeRO-0 within the noise
    assert "not significant" in answers["why"]
    assert " < " not in answers["ranking"].split(" (")[0]
    assert answers["verdict"]["step"]["significant"] is False and answers["largest_cause"] is None
    assert answers["tiers"] == [["ZeRO-1", "ZeRO-2", "ZeRO-0", "ZeRO-3"]]


def test_ranking_needs_several_steps_per_profile():
    from flopsight.analysis.diff.ranking import rank

    one = dataclasses.replace(_BASE, samples=StepSamples("step", {"wall": (T,)}))
    with pytest.raises(ValueError, match="'b' holds fewer than 2 steps"):
        rank({"a": _stages()[1], "b": one})


# -- an interval as wide as the step is said plainly ------------------------------------------------------
def test_an_interval_as_wide_as_the_step_gives_the_plain_warning():
    # the issue's: an ~84 ms step with +-116 ms; here a 11 T step whose IQR is 2..30 T (+-14 T)
    a = _result(backward=[1, 2, 11, 30, 40])
    b = _result(backward=[2, 3, 12, 31, 41])
    v = flopsight.diff(a, b).verdict
    # b = a + 1 T: the differences are 1 T plus a's among themselves (-39 .. 39, the 3rd -29,
    # the 23rd 29): +1 T, from -28 to 30 T, 58 T wide against the faster step's 11 T: as wide
    assert (v.step.low, v.step.high) == (-28 * T, 30 * T)
    assert v.wide_noise and v.to_dict()["wide_noise"]
    text = verdict_text(v, "a", "b")
    assert "Too noisy to tell much" in text and "as wide as a's whole step" in text
    assert "profile more steps or on a quieter machine" in text
    # a quiet pair: no warning
    quiet = flopsight.diff(_stages()[1], _stages()[2]).verdict
    assert not quiet.wide_noise and "Too noisy" not in verdict_text(quiet)


# -- the profiler's own time on the CPU path -------------------------------------------------------------
def test_the_python_paths_profiler_time_is_its_own_part_not_framework():
    model = _mlp()
    r = _one_step(model, HostClock(), backend="python")
    it, spans = r.iteration, r.spans
    # estimated per counted op and module call on the host's clock (UNMEASURED_COST), per phase
    per_op, per_call = UNMEASURED_COST[False]
    ops = {p: sum(s.calls for m in r.modules.values() for s in m.ops.get(p, {}).values())
           for p in ("forward", "backward", "step")}
    calls = sum(m.phases["forward"].calls for m in r.modules.values() if "forward" in m.phases)
    expected = {"forward": per_op * ops["forward"] + per_call * calls, "backward": per_op * ops["backward"],
                "step": per_op * ops["step"]}
    for phase, seconds in expected.items():
        if seconds:
            assert spans[f"profiler.{phase}"] == [pytest.approx(seconds)], phase
    assert it.anatomy.profiler > 0
    # framework is the phases' time less compute, waiting and the profiler's: never holds it
    phases = math.fsum(math.fsum(spans[p]) for p in ("forward", "backward", "step"))
    a = it.anatomy
    assert a.framework == pytest.approx(phases - a.forward - a.backward - a.step - a.profiler, abs=1e-12)


def test_the_native_recorder_times_its_own_callbacks_in_every_step():
    # issue 37 item 2: no constant, a measurement of each run: every phase's part is the
    # recorder's own time in that phase, within the phase, and it varies from step to step
    steps = [_one_step(_mlp(), HostClock(), backend="native") for _ in range(5)]
    for r in steps:
        for phase in ("forward", "backward", "step"):
            (own,) = r.spans[f"profiler.{phase}"]
            assert 0 < own < math.fsum(r.spans[phase]), phase
        # the anatomy's part: at most what the phases leave beside compute and waiting
        measured = math.fsum(r.spans[f"profiler.{p}"][0] for p in ("forward", "backward", "step"))
        assert 0 < r.iteration.anatomy.profiler <= measured
    figures = combine_steps(steps).samples.figures["anatomy.profiler"]
    assert len(set(figures)) > 1  # a spread, like every other part


def test_the_reports_noise_line_says_a_spread_as_wide_as_the_step_plainly():
    # walls 1 2 11 30 40 T: median 11 T, IQR 2..30 T, +-14 T: twice that is over the 11 T step
    report = _result(backward=[1, 2, 11, 30, 40]).render()
    assert "the spread is as wide as the step itself: too noisy to tell much, profile more steps" in report
    # 89..91 T: +-0 T (IQR 90..90): no noise line at all
    assert "too noisy" not in _result(backward=[89, 90, 90, 90, 91]).render()


# -- one step, one time ----------------------------------------------------------------------------------
def test_with_several_steps_every_headline_is_the_median_steps():
    # issue 37 item 3: walls 50, 51, 52, 53, 54 T: the median step's 52 T = 406.25 ms is the
    # measured iter wall time, the anatomy's whole and the step time over the steps
    text = _result(backward=[40, 41, 42, 43, 44], framework=[10] * 5).render()
    lines = {line.split(":  ")[0].strip(): line.split(":  ", 1)[1].strip() for line in text.splitlines()
             if ":  " in line}
    assert lines["measured iter wall time (the median of 5 steps)"] == "406.25 ms"
    assert lines["step anatomy, of the median step's wall time (5 steps)"].startswith("406.25 ms ")
    assert lines["step time over 5 steps (median, IQR)"].startswith("406.25 ms ")
    assert "whole profiled span" not in text and "of the profiled step's wall time" not in text


# -- how busy the device was --------------------------------------------------------------------------
def test_how_busy_the_cpu_was_is_one_line_in_words():
    # issue 37 item 5: on the CPU, the compute share of the step. The median step: compute 40 T,
    # framework 10 T, communication 30 T, other 20 T of 100 T: 40%, 10%, 30% and 20%
    text = _result(backward=[40] * 5, framework=[10] * 5, communication=[30] * 5, other=[20] * 5).render()
    (line,) = [" ".join(line.split()) for line in text.splitlines() if line.startswith("device busy:")]
    assert line == ("device busy: CPU: computing 40% of the step (the ops' own time; framework and hooks 10%, "
                    "waiting for communication 30%, other 20%)")
