"""Latency: per module, free of the counting overhead, deterministic under a fake clock."""

import warnings

import pytest
import torch
from models import LeNet
from torch import nn

import flopsight
from flopsight.capture.runtime.timing import CudaEventClock, HostClock, default_clock
from flopsight.result.metadata import Timing

aten = torch.ops.aten


def test_fake_clock_latencies_are_exact_in_the_separate_timing_pass():
    # The timing pass stamps only at module boundaries: root pre, then each of the 7
    # child calls (conv1, pool, conv2, pool, fc1, fc2, fc3) takes a pre and a post
    # stamp, then root post: the root spans 15 steps, each leaf call 1 step.
    result = flopsight.profile(LeNet(), torch.ones(1, 3, 32, 32), clock=flopsight.FakeClock(step=1e-3))
    assert result.metadata.timing == Timing("separate", "fake", ops="counting")  # no recorder stamps on a fake clock
    assert result.module("conv1").forward.latency == pytest.approx(1e-3)
    assert result.module("pool").forward.latency == pytest.approx(2e-3)  # called twice
    assert result.total.forward.latency == pytest.approx(15e-3)
    assert result.total.self.forward.latency == pytest.approx(8e-3)


class ManualClock:
    """Host time that moves only when told: stamps and the profiler's own clock are one."""

    name, subtracts_overhead, scale = "manual", True, 1.0

    def __init__(self):
        self.t = 0.0

    def stamp(self):
        return self.t

    def now(self):
        return self.t

    def finish(self):
        pass

    @staticmethod
    def seconds(start, end):
        return end - start


def expensive_registry(clock, seconds):
    """A registry whose addmm formula takes ``seconds`` of the clock: counting that is very expensive."""
    registry = flopsight.REGISTRY.copy()
    _, addmm = registry.lookup(aten.addmm)

    @registry.register(aten.addmm)
    def slow_addmm(out, self, mat1, mat2, **kwargs):
        clock.t += seconds
        return addmm(out, self, mat1, mat2, **kwargs)

    return registry


def test_latency_excludes_the_counting_overhead():
    clock = ManualClock()
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    result = flopsight.profile(model, torch.ones(2, 8), warm_up=0, timing="subtract", clock=clock,
                               registry=expensive_registry(clock, 100.0))
    assert result.total.forward.macs == 2 * 2 * 8 * 8
    # two formula calls took 100 s each inside the model's span, and nothing else moved the
    # clock: all of it is the profiler's own time, none of it latency
    assert clock.t == 200.0
    assert result.total.forward.latency == 0.0
    assert result.metadata.timing.method == "subtract"


def test_real_clock_latencies_are_positive_and_additive():
    result = flopsight.profile(LeNet(), torch.ones(2, 3, 32, 32), timing="subtract", warm_up=0)
    children = sum(result.module(c).forward.latency for c in result.total.children)
    assert all(result.module(c).forward.latency > 0 for c in result.total.children)
    assert result.total.forward.latency == pytest.approx(result.total.self.forward.latency + children)


def test_default_clock_is_cuda_events_on_cuda_and_perf_counter_elsewhere():
    assert isinstance(default_clock(torch.device("cuda", 0)), CudaEventClock)
    assert not CudaEventClock.subtracts_overhead  # GPU time: host overhead is not on its timeline
    assert isinstance(default_clock(torch.device("cpu")), HostClock)
    assert isinstance(default_clock(torch.device("meta")), HostClock)


def test_fake_clock_rejects_a_non_positive_step():
    with pytest.raises(ValueError, match="step: expected a positive number of seconds"):
        flopsight.FakeClock(step=0)


def test_a_clock_that_cannot_subtract_the_profilers_time_warns_when_it_is_large():
    from flopsight.capture.runtime.timing import HostClock

    class EventLike(HostClock):
        """Like CUDA events, it cannot take the profiler's own time out; its host time advances
        one second per reading, so the profiler's share is the share of readings it made."""

        name = "event-like"
        subtracts_overhead = False

        def __init__(self):
            super().__init__()
            ticks = iter(range(10**9))
            self.now = lambda: float(next(ticks))

    model = torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(20)])
    # counting in the timed pass: the profiler's work is most of a tiny model's span
    with pytest.warns(UserWarning, match=r"the profiler's own work took \d+% .* the event-like clock cannot"):
        with flopsight.Profiler(model, clock=EventLike()):
            model(torch.ones(1, 2))
    # a clock that subtracts it says nothing
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with flopsight.Profiler(model, clock=HostClock()):
            model(torch.ones(1, 2))


def test_a_snapshot_is_built_once_until_something_runs():
    # DeepSpeed's getters read one after another: one synchronize and one build for them all
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    prof = flopsight.Profiler(model).start()
    model(torch.ones(1, 2))
    first = prof.snapshot()
    assert prof.snapshot() is first
    model(torch.ones(1, 2))
    second = prof.snapshot()
    assert second is not first and second.total.forward.calls == 2
    prof.stop()


def test_the_timing_method_takes_the_options_words_and_old_files_load():
    """``metadata.timing.method`` is ``profile(timing=...)``'s word; a file written with the
    old names (``separate-pass``...) reads as the new ones."""
    from flopsight.result.metadata import Metadata

    model = nn.Linear(4, 2)
    for timing in ("separate", "subtract"):
        result = flopsight.profile(model, torch.ones(1, 4), timing=timing, clock=flopsight.FakeClock())
        assert result.metadata.timing.method == timing
    for old, new in (("separate-pass", "separate"), ("overhead-subtracted", "subtract"), ("single-pass", "single")):
        assert Metadata.from_dict({"timing": {"method": old, "clock": "fake"}}).timing.method == new
