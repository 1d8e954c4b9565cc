"""Several steps or passes in one profile: every sample kept, times as medians with their
spread, counts from one step, and the report's noise line (docs/conventions/timing.md)."""

import json

import pytest
import torch

import flopsight
from flopsight.result.samples import spread
from flopsight.result.steps import combine_steps


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _pass_with(latency: float, fc_latency: float) -> flopsight.ProfileResult:
    """A one-pass result of the MLP whose call took ``latency`` s and its first Linear ``fc_latency`` s."""
    data = flopsight.profile(_mlp(), torch.ones(2, 8), clock=flopsight.FakeClock()).to_dict()
    data["samples"] = None
    data["spans"]["forward"] = [latency]
    for call in data["calls"]:
        call["stats"]["latency"] = latency
    for m in data["modules"]:
        if m["name"] == "":
            m["phases"]["forward"]["latency"] = latency
        if m["name"] == "0":
            m["phases"]["forward"]["latency"] = fc_latency
    return flopsight.ProfileResult.from_dict(data)


# -- the spread -------------------------------------------------------------------------------
def test_spread_is_the_interquartile_range_from_five_samples_and_the_range_below():
    # 1..5: inclusive quartiles are the 2nd and 4th values, 2 and 4: median 3 +- 1
    s = spread([5.0, 1.0, 4.0, 2.0, 3.0])
    assert (s.median, s.low, s.high, s.kind, s.plus_minus) == (3.0, 2.0, 4.0, "IQR", 1.0)
    # 4 samples: min to max, 10 to 14, median (11 + 13) / 2 = 12 +- 2 (1/6 of it: noisy, > 10%)
    s = spread([10.0, 11.0, 13.0, 14.0])
    assert (s.median, s.low, s.high, s.kind, s.plus_minus) == (12.0, 10.0, 14.0, "min-max", 2.0)
    assert s.noisy and abs(s.relative - 2 / 12) < 1e-12
    # 100 +- 5: 5% of the median, not noisy; one sample always is (its noise is unknown)
    assert not spread([95.0, 100.0, 105.0]).noisy and spread([1.0]).noisy
    with pytest.raises(ValueError, match="values"):
        spread([])


def test_combining_passes_keeps_the_median_pass_its_samples_and_median_module_latencies():
    passes = [_pass_with(t, fc) for t, fc in [(0.5, 0.1), (0.1, 0.3), (0.3, 0.2), (0.9, 0.4), (0.2, 0.5)]]
    r = combine_steps(passes, "pass")
    assert r.samples.count == 5 and r.samples.figures["wall"] == (0.5, 0.1, 0.3, 0.9, 0.2)
    # the pass of median wall time (0.3 s) is the result: its calls and spans
    assert [c.stats.latency for c in r.calls] == [0.3]
    # each module's latency is its own median: fc 0.1..0.5 -> 0.3; the root's 0.1..0.9 -> 0.3
    assert r.module("0").forward.latency == 0.3 and r.samples.module("0", "forward") == (0.1, 0.3, 0.2, 0.4, 0.5)
    # counts are one pass's: 2 rows * (8*16 + 16*4) MACs
    assert r.total.forward.macs == 2 * (8 * 16 + 16 * 4)
    assert flopsight.ProfileResult.from_dict(json.loads(json.dumps(r.to_dict()))) == r
    with pytest.raises(ValueError, match="results"):
        combine_steps([])


def test_an_even_number_of_steps_keeps_the_lower_median_step():
    passes = [_pass_with(t, 0.1) for t in (0.4, 0.1, 0.3, 0.2)]
    # walls sorted 0.1 0.2 0.3 0.4: the lower median is 0.2, a pass that ran
    assert [c.stats.latency for c in combine_steps(passes, "pass").calls] == [0.2]


# -- profile(repeat=) and get_model_profile(repeat=) ------------------------------------------
def test_profile_repeat_times_several_calls_and_counts_one():
    model = _mlp()
    one = flopsight.profile(model, torch.ones(2, 8))
    many = flopsight.profile(model, torch.ones(2, 8), repeat=6)
    assert one.samples.count == 1 and many.samples.count == 6 and many.samples.unit == "pass"
    assert many.total.forward.macs == one.total.forward.macs and many.total.forward.calls == 1
    fc = many.samples.module("0", "forward")
    assert len(fc) == 6 and many.module("0").forward.latency == sorted(fc)[2:4][0] / 2 + sorted(fc)[2:4][1] / 2
    report = many.render()
    assert "fwd latency over 6 passes (median, IQR):" in report


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
def test_repeat_and_steps_must_be_positive_ints_checked_before_the_model_runs(bad):
    calls = []
    model = _mlp()
    model.register_forward_pre_hook(lambda *a: calls.append(1))
    with pytest.raises(ValueError, match="repeat: expected a positive int"):
        flopsight.profile(model, torch.ones(2, 8), repeat=bad)
    with pytest.raises(ValueError, match="repeat: expected a positive int"):
        flopsight.get_model_profile(model, (2, 8), repeat=bad, print_profile=False)
    with pytest.raises(ValueError, match="steps: expected a positive int"):
        flopsight.Profiler(model, steps=bad)
    assert calls == []


def test_get_model_profile_keeps_deepspeeds_lines_and_adds_the_spread_after_them(capsys):
    flopsight.get_model_profile(_mlp(), (2, 8), repeat=5)
    lines = capsys.readouterr().out.splitlines()
    labels = [line.split(":")[0] for line in lines]
    assert labels.index("fwd latency over 5 passes (median, IQR)") > labels.index("fwd latency")
    assert (labels.index("fwd latency over 5 passes (median, IQR)")
            > labels.index("op coverage (ops with a formula / ops seen)"))


def test_one_pass_says_its_noise_is_unknown_and_no_warm_up_is_named():
    report = flopsight.profile(_mlp(), torch.ones(2, 8), warm_up=0).render()
    assert "fwd latency is one sample (1 pass): its noise is unknown; profile several (repeat=N)" in report
    assert "no warm-up call ran before the timed ones (warm_up=0)" in report
    assert "no warm-up call" not in flopsight.profile(_mlp(), torch.ones(2, 8)).render()


def test_the_noise_line_gives_the_spread_when_it_is_above_ten_percent():
    passes = [_pass_with(t, 0.1) for t in (0.10, 0.20, 0.30)]  # median 0.2, min-max +-0.1: 50%
    report = combine_steps(passes, "pass").render()
    assert "fwd latency varies ±50.0% over 3 passes; differences smaller than this are not significant" in report
    quiet = combine_steps([_pass_with(t, 0.1) for t in (0.199, 0.2, 0.201)], "pass").render()
    assert "noise:" not in quiet and "fwd latency over 3 passes (median, min-max):" in quiet


# -- Profiler(steps=) and step() --------------------------------------------------------------
def _train(model, opt, steps, prof=None):
    for _ in range(steps):
        model(torch.ones(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
        if prof is not None:
            prof.step()


def test_profiler_steps_measures_each_step_and_stops_after_the_last():
    model = _mlp()
    opt = torch.optim.Adam(model.parameters())
    _train(model, opt, 1)  # a warm-up step
    prof = flopsight.Profiler(model, optimizer=opt, steps=3).start()
    _train(model, opt, 5, prof)  # steps 4 and 5 run after it stopped itself
    r = prof.result
    assert not prof.running and r.samples.count == 3 and r.samples.unit == "step"
    # counts and optimizer steps are one step's, not the sum of three
    assert r.iteration.step.calls == 1 and r.total.forward.macs == 4 * (8 * 16 + 16 * 4)
    assert set(r.samples.figures) >= {"wall", "forward", "backward", "step", "anatomy.framework"}
    assert not r.samples.first_step
    assert prof.stop() is r  # stopping again returns the same result


def test_profiler_without_step_calls_is_one_step_and_a_fresh_optimizer_is_named_first():
    model = _mlp()
    opt = torch.optim.Adam(model.parameters())
    with flopsight.Profiler(model, optimizer=opt) as prof:
        _train(model, opt, 1)
    r = prof.result
    assert r.samples.count == 1 and r.samples.first_step
    report = r.render()
    assert "step time is one sample (1 step)" in report and "(steps=N)" in report
    assert "the first profiled step was the first the process ran" in report


def test_stop_after_step_drops_the_empty_remainder_and_keeps_an_unfinished_step():
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    prof = flopsight.Profiler(model, optimizer=opt).start()
    _train(model, opt, 2, prof)
    assert prof.stop().samples.count == 2  # nothing ran after the second step()
    prof = flopsight.Profiler(model, optimizer=opt).start()
    _train(model, opt, 2, prof)
    _train(model, opt, 1)  # a third step, not ended with step(): still a step
    assert prof.stop().samples.count == 3


# -- the diff's latency gates -----------------------------------------------------------------
def test_diff_gates_test_the_steps_samples_of_the_model_and_of_a_module():
    slow = [_pass_with(t, fc) for t, fc in [(0.30, 0.20), (0.31, 0.21), (0.32, 0.22), (0.33, 0.23), (0.34, 0.24)]]
    fast = [_pass_with(t, fc) for t, fc in [(0.10, 0.05), (0.11, 0.06), (0.12, 0.07), (0.13, 0.08), (0.14, 0.09)]]
    d = flopsight.diff(combine_steps(fast, "pass"), combine_steps(slow, "pass"))
    # 5 passes a side, every b above every a: the exact one-sided p is 1 / C(10, 5) = 1/252
    (model,) = d.evaluate(["fwd_latency>+50%"])
    assert model.tested and model.samples == (5, 5) and not model.passed
    assert abs(model.p_value - 1 / 252) < 1e-12 and (model.a, model.b) == (0.12, 0.32)
    (fc,) = d.evaluate(["fwd_latency@0>+100%"])  # the first Linear: medians 0.07 -> 0.22
    assert fc.tested and fc.samples == (5, 5) and not fc.passed and (fc.a, fc.b) == (0.07, 0.22)
    (within,) = d.evaluate(["fwd_latency@0>+300%"])  # 0.22 is not 4x 0.07: passes
    assert within.passed


# -- the verdict: why is b slower than a? -----------------------------------------------------
def _steps(**figures) -> "flopsight.result.samples.StepSamples":
    from flopsight.result.samples import StepSamples

    return StepSamples("step", {k.replace("_", "."): tuple(v) for k, v in figures.items()})


def _training_result(samples, collectives=()):
    import dataclasses

    from flopsight.result.communication import Collective

    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with flopsight.Profiler(model, optimizer=opt, clock=flopsight.FakeClock()) as prof:
        _train(model, opt, 1)
    comms = tuple(Collective(kind, "", "step", n, nbytes, t, 2, t, 0.0) for kind, n, nbytes, t in collectives)
    return dataclasses.replace(prof.result, samples=samples, comms=comms)


def test_the_verdict_names_the_parts_that_moved_beyond_their_noise_largest_first():
    quiet = [0.0] * 5
    base = dict(anatomy_forward=[0.10] * 5, anatomy_backward=[0.20] * 5, anatomy_step=[0.05] * 5, anatomy_other=quiet)
    # a: 0.4 s steps, 0.05 s framework, 0 communication
    a = _training_result(_steps(wall=[0.40, 0.41, 0.39, 0.40, 0.40], anatomy_framework=[0.05, 0.06, 0.04, 0.05, 0.05],
                                anatomy_communication=quiet, **base),
                         [("all_reduce", 1, 2704, 0.0)])
    # b: +0.16 s: +0.125 s exposed all_gather (10 calls vs none), +0.035 s framework, compute as it was
    b = _training_result(_steps(wall=[0.56, 0.57, 0.55, 0.56, 0.56],
                                anatomy_framework=[0.085, 0.095, 0.075, 0.085, 0.085],
                                anatomy_communication=[0.125] * 5, **base),
                         [("all_reduce", 1, 2704, 0.0), ("all_gather", 10, 1240, 0.125)])
    v = flopsight.diff(a, b).verdict
    # b's walls are a's plus 0.16 s: the 25 differences are 0.16 s plus those of -0.01, 0, 0, 0,
    # 0.01 s among themselves (the 3rd -0.01, the median 0, the 23rd 0.01): +0.16 s, 0.15 .. 0.17 s
    assert abs(v.step.delta - 0.16) < 1e-9 and v.step.significant
    assert abs(v.step.low - 0.15) < 1e-9 and abs(v.step.high - 0.17) < 1e-9
    assert [c.part for c in v.causes] == ["communication", "framework"] and v.largest_cause == "communication"
    assert set(v.unchanged) == {"compute", "other"}
    (gather, reduce) = v.causes[0].collectives
    assert (gather.kind, gather.calls, gather.bytes_per_call) == ("all_gather", (0, 10), (0, 124))
    text = flopsight.diff(a, b).render()
    assert ("Verdict: b's step is 160 ms slower than a's (95% interval +150 ms to +170 ms, 5 vs 5 steps): +125 ms "
            "exposed communication (all_gather: 0 calls vs 10, 124 B each)") in text
    assert "compute and other unchanged" in text


def test_a_difference_within_the_noise_is_not_a_verdict():
    same = dict(anatomy_forward=[0.1] * 5, anatomy_backward=[0.1] * 5, anatomy_step=[0.1] * 5,
                anatomy_framework=[0.1] * 5, anatomy_communication=[0.0] * 5, anatomy_other=[0.0] * 5)
    a = _training_result(_steps(wall=[0.3, 0.5, 0.4, 0.6, 0.2], **same))
    b = _training_result(_steps(wall=[0.35, 0.55, 0.45, 0.65, 0.25], **same))  # +50 ms, IQR +-100 ms a side
    v = flopsight.diff(a, b).verdict
    assert not v.step.significant and v.largest_cause is None and v.causes == ()
    assert "within the noise, not significant" in flopsight.diff(a, b).render()
    assert json.loads(flopsight.diff(a, b).render("json"))["verdict"]["text"].startswith(
        "b's step is 50 ms slower than a's")
    assert "text" not in flopsight.diff(a, b).to_dict()["verdict"]  # the dict holds data; the JSON words it
    # one sample on a side: its noise is unknown, no verdict
    one = flopsight.diff(_training_result(_steps(wall=[0.3], **{k: v[:1] for k, v in same.items()})), b)
    assert one.verdict is None and "Verdict" not in one.render() and one.to_dict()["verdict"] is None
