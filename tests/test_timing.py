"""Latency: per module, free of the counting overhead, deterministic under a fake clock."""

import time

import pytest
import torch
from torch import nn

import flopsight
from flopsight.capture.timing import CudaEventClock, HostClock, default_clock
from models import LeNet

aten = torch.ops.aten


def test_fake_clock_latencies_are_exact_in_the_separate_timing_pass():
    # The timing pass stamps only at module boundaries: root pre, then each of the 7
    # child calls (conv1, pool, conv2, pool, fc1, fc2, fc3) takes a pre and a post
    # stamp, then root post: the root spans 15 steps, each leaf call 1 step.
    result = flopsight.profile(LeNet(), torch.ones(1, 3, 32, 32), clock=flopsight.FakeClock(step=1e-3))
    assert result.metadata["timing"] == {"method": "separate-pass", "clock": "fake"}
    assert result.module("conv1").forward.latency == pytest.approx(1e-3)
    assert result.module("pool").forward.latency == pytest.approx(2e-3)  # called twice
    assert result.total.forward.latency == pytest.approx(15e-3)
    assert result.total.self.forward.latency == pytest.approx(8e-3)


def slow_registry(seconds):
    """A registry whose addmm formula sleeps: counting that is very expensive."""
    registry = flopsight.REGISTRY.copy()
    _, addmm = registry.lookup(aten.addmm)

    @registry.register(aten.addmm)
    def slow_addmm(out, *args, **kwargs):
        time.sleep(seconds)
        return addmm(out, *args, **kwargs)

    return registry


@pytest.mark.parametrize("timing", ["separate", "subtract"])
def test_latency_excludes_the_counting_overhead(timing):
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    result = flopsight.profile(model, torch.ones(2, 8), warm_up=1, timing=timing, registry=slow_registry(0.1))
    assert result.total.forward.macs == 2 * 2 * 8 * 8
    # two 0.1 s formula calls ran inside the model's span; neither may show up in it
    assert result.total.forward.latency < 0.1
    assert result.metadata["timing"]["method"] == {"separate": "separate-pass", "subtract": "overhead-subtracted"}[timing]


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
