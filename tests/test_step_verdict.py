"""Issue 29 item 5: one verdict that the ranking, the prose and the JSON share; parts whose
changes add up to the step's; a named cause that moved beyond its own noise; the plain
warning on a spread as wide as the step; the profiler's own time on the CPU path.

The verdict's inputs are real results (a tiny MLP's step, profiled on a FakeClock) given
samples with chosen numbers: multiples of T = 2**-7 s, so that sums are exact in binary and
nothing depends on the machine's clock.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import statistics
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


def _one_step(model: torch.nn.Module, clock=None) -> flopsight.ProfileResult:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with flopsight.Profiler(model, optimizer=opt, clock=clock or flopsight.FakeClock()) as prof:
        model(torch.ones(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
    return prof.result


_BASE = _one_step(_mlp())


def _result(**parts: list[int]) -> flopsight.ProfileResult:
    """A real step's result whose samples hold ``parts`` (anatomy part -> per-step counts of
    T; compute given as ``backward``); its wall time per step is the parts' sum."""
    n = len(next(iter(parts.values())))
    per_part = {p: tuple(k * T for k in parts.get(p, [0] * n)) for p in PARTS}
    walls = tuple(math.fsum(per_part[p][i] for p in PARTS) for i in range(n))
    figures = {"wall": walls, **{f"anatomy.{p}": v for p, v in per_part.items()}}
    return dataclasses.replace(_BASE, samples=StepSamples("step", figures))


# -- the parts add up to the step's change ----------------------------------------------------------
def test_the_parts_changes_add_up_exactly_to_the_steps_change():
    a = _result(backward=[40, 44, 36, 42, 48], framework=[20, 16, 26, 21, 20], other=[4] * 5, profiler=[1] * 5)
    b = _result(backward=[100, 60, 90, 80, 70], framework=[30, 50, 20, 40, 35], communication=[10, 30, 5, 8, 20],
                other=[4, 6, 4, 5, 4], profiler=[2, 3, 2, 2, 2])
    v = flopsight.diff(a, b).verdict
    # a's walls 65 65 67 68 73 T: the median step (the middle of the sorted walls) is the
    # third, 67 T; b's walls 146 149 121 135 131 T: sorted 121 131 135 146 149, the median is
    # the fourth step, 135 T: the step's change is +68 T
    assert (v.step.a, v.step.b, v.step.delta) == (67 * T, 135 * T, 68 * T)
    # its parts: compute 80 - 36 = +44, framework 40 - 26 = +14, communication 8 - 0 = +8,
    # other 5 - 4 = +1, profiler 2 - 1 = +1: 44 + 14 + 8 + 1 + 1 = 68 T, exactly
    deltas = {p: d.delta for p, d in v.parts.items()}
    assert deltas == {"compute": 44 * T, "framework": 14 * T, "communication": 8 * T, "other": 1 * T,
                      "profiler": 1 * T}
    assert math.fsum(deltas.values()) == v.step.delta
    # each part's median would not: compute 80 - 42, framework 35 - 20, communication 10 - 0,
    # other 4 - 4, profiler 2 - 1: 38 + 15 + 10 + 0 + 1 = 64 T against the step's 68 T
    medians = sum(statistics.median(b.samples.figures[f"anatomy.{p}"]) - statistics.median(a.samples.figures[
        f"anatomy.{p}"]) for p in PARTS)
    assert medians != v.step.delta
    # the JSON holds every part, and the text tells each part's change (causes and the rest)
    data = v.to_dict()
    assert math.fsum(p["delta"] for p in data["parts"].values()) == data["step"]["delta"]
    text = verdict_text(v, "a", "b")
    for part in ("compute", "framework and hooks", "exposed communication", "other", "profiler"):
        assert part in text, part


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
    # +54 T: compute +45 T, framework +9 T, the same figures as the tables'
    assert v.step.delta == 54 * T and {p: d.delta for p, d in v.parts.items()} == {
        "compute": 45 * T, "framework": 9 * T, "communication": 0.0, "other": 0.0}


def test_real_steps_parts_add_up_to_the_step_difference():
    # two models, five real steps each on the host's clock: whatever the times, the verdict's
    # parts add up to its step difference (to the floats' last bits)
    a = combine_steps([_one_step(_mlp(16), HostClock()) for _ in range(5)])
    b = combine_steps([_one_step(_mlp(256), HostClock()) for _ in range(5)])
    v = flopsight.diff(a, b).verdict
    assert "profiler" in v.parts  # the CPU path's profiler time is a part of its own
    assert math.fsum(d.delta for d in v.parts.values()) == pytest.approx(v.step.delta, rel=1e-9, abs=1e-12)
    # the verdict's figures are the median steps', the ones the report prints
    assert (v.step.a, v.step.b) == (a.iteration.latency, b.iteration.latency)


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
    # a's median step: walls 84 86 85 85 85 T, the lower middle is the 4th (85 T): compute 40,
    # framework 5, other 40. Step: 85 -> 115 T, +30 T; spreads (IQR) +-0 and 114..116 T = +-1 T;
    # every b above every a: p = 2 / C(10, 5) = 2/252 < 0.05: significant
    assert v.step.delta == 30 * T and v.step.significant
    # compute +30 T (40 -> 70) within its +-30 T (b's IQR 10..70 T), other -30 T (40 -> 10)
    # within its +-30 T; framework +10 T beyond its +-1 T, communication +20 T beyond +-0
    assert v.parts["compute"].delta == 30 * T and not v.parts["compute"].significant
    assert [c.part for c in v.causes] == ["communication", "framework"]
    assert set(v.unchanged) == {"compute", "other"}
    # the largest cause is the largest part beyond its noise, not compute, which moved more
    assert v.largest_cause == "communication"
    text = verdict_text(v, "a", "b")
    assert text.index("exposed communication") < text.index("within their own noise: ") < text.index("compute")
    assert "compute unchanged" not in text  # it moved, within its noise: said with its change


def test_no_part_beyond_its_noise_names_no_cause():
    # every part of b's swings by more than it moved; the step as a whole moved beyond its noise
    a = _result(backward=[40] * 5, other=[40] * 5)
    b = _result(backward=[10, 30, 60, 80, 100], other=[90, 72, 42, 23, 3])
    v = flopsight.diff(a, b).verdict
    # b's walls 100 102 102 103 103 T, the median step the 3rd: 102 T, +22 T beyond its +-0.5 T
    # (IQR 102..103 T); compute +20 T (40 -> 60) within its +-25 T (IQR 30..80 T), other +2 T
    # (40 -> 42) within its +-24.5 T (IQR 23..72 T)
    assert v.step.significant and v.step.delta == 22 * T
    assert v.causes == () and v.largest_cause is None
    text = verdict_text(v, "a", "b")
    assert "no part moved beyond its own noise the step's way (slower)" in text


def test_a_step_within_its_noise_still_tells_every_parts_change():
    # compute -30 T and framework +30 T, each beyond its +-0 T, cancel out; other +5 T
    a = _result(backward=[40] * 5, framework=[40] * 5, other=[0, 10, 20, 30, 40])
    b = _result(backward=[10] * 5, framework=[70] * 5, other=[0, 10, 25, 30, 40])
    v = flopsight.diff(a, b).verdict
    # walls 80 90 100 110 120 and 80 90 105 110 120 T: +5 T within +-hypot(10, 10) = +-14.1 T
    assert v.step.delta == 5 * T and not v.step.significant and v.largest_cause is None
    assert math.fsum(d.delta for d in v.parts.values()) == v.step.delta  # -30 + 30 + 5 T
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
    # 100 -> 150 T: +50 T within the combined +-60 T (hypot of 60 and 0 T): not significant
    assert v.step.delta == 50 * T and not v.step.significant
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


# -- a spread as wide as the step is said plainly ------------------------------------------------------
def test_a_spread_as_wide_as_the_step_gives_the_plain_warning():
    # the issue's: an ~84 ms step with +-116 ms; here a 11 T step whose IQR is 2..30 T (+-14 T)
    a = _result(backward=[1, 2, 11, 30, 40])
    b = _result(backward=[2, 3, 12, 31, 41])
    v = flopsight.diff(a, b).verdict
    # combined +-hypot(14, 14) = 19.8 T, twice that against the faster step's 11 T: as wide
    assert v.wide_noise and v.to_dict()["wide_noise"]
    text = verdict_text(v, "a", "b")
    assert "Too noisy to tell much" in text and "as wide as a's whole step" in text
    assert "profile more steps or on a quieter machine" in text
    # a quiet pair: no warning
    quiet = flopsight.diff(_stages()[1], _stages()[2]).verdict
    assert not quiet.wide_noise and "Too noisy" not in verdict_text(quiet)


# -- the profiler's own time on the CPU path -------------------------------------------------------------
def test_the_cpu_paths_profiler_time_is_its_own_part_not_framework():
    model = _mlp()
    r = _one_step(model, HostClock())
    it, spans = r.iteration, r.spans
    # estimated per counted op and module call on the host's clock (UNMEASURED_COST), per phase
    per_op, per_call = UNMEASURED_COST[(r.metadata.backend, False)]
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


def test_the_reports_noise_line_says_a_spread_as_wide_as_the_step_plainly():
    # walls 1 2 11 30 40 T: median 11 T, IQR 2..30 T, +-14 T: twice that is over the 11 T step
    report = _result(backward=[1, 2, 11, 30, 40]).render()
    assert "the spread is as wide as the step itself: too noisy to tell much, profile more steps" in report
    # 89..91 T: +-0 T (IQR 90..90): no noise line at all
    assert "too noisy" not in _result(backward=[89, 90, 90, 90, 91]).render()
