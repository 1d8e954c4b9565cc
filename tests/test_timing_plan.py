"""The timing plan of a profiled call: one pure function of the options and what the model and
the clock are (flopsight/timing_plan.py), and profile() running exactly its passes."""

from __future__ import annotations

import pytest
import torch

import flopsight
from flopsight.timing_plan import PASSES, TimingPlan, timing_plan


@pytest.mark.parametrize("args, kwargs, plan", [
    # auto with a warm-up: counted (the first warm-up too), then the timed calls
    (("auto", 1, 3), {}, TimingPlan("separate", ("count", "timed", "timed", "timed"))),
    (("auto", 3, 1), {}, TimingPlan("separate", ("count", "warm", "warm", "timed"))),
    # auto without a warm-up: counted and timed in the same pass, the profiler's time taken out
    (("auto", 0, 2), {}, TimingPlan("subtract", ("counted and timed", "counted and timed"))),
    (("subtract", 2, 1), {}, TimingPlan("subtract", ("warm", "warm", "counted and timed"))),
    (("separate", 0, 1), {}, TimingPlan("separate", ("count", "timed"))),  # no warm-up left to take
    # the timed passes cannot time the ops (no native recorder): the same passes, the operators
    # timed in the counting pass (the same call is counted, whichever backend counts)
    (("auto", 1, 1), {"ops_timed": False}, TimingPlan("separate", ("count", "timed"), ops="counting")),
    # a clock that cannot take the profiler's time out (CUDA events, a span not on the device plan)
    (("subtract", 0, 1), {"on_device": True, "subtracts": False}, TimingPlan("single", ("counted and timed",))),
    # on CUDA: counted, warmed up, kernels recorded in a pass of their own, then uninstrumented calls
    (("auto", 2, 2), {"on_device": True, "subtracts": False},
     TimingPlan("device", ("count", "warm", "kernels", "events", "events"), ops="counting")),
    # ... not for generate(), nor with compiled regions, nor inside a running torch.profiler
    (("auto", 1, 1), {"on_device": True, "subtracts": False, "forward": False},
     TimingPlan("separate", ("count", "timed"))),
    (("auto", 1, 1), {"on_device": True, "subtracts": False, "profiler_running": True},
     TimingPlan("separate", ("count", "timed"))),
    # a compiled model: separate, at least two warm-ups after the (eager) counting pass, timed whole
    # (its operators timed in the counting pass, on the eager modules)
    (("subtract", 1, 1), {"compiled": True},
     TimingPlan("separate", ("count", "warm", "warm", "timed"), True, ops="counting")),
    (("auto", 0, 1), {"compiled": True}, TimingPlan("separate", ("count", "timed"), True, ops="counting")),
    # compiled regions inside an eager model: the counting pass is no warm-up of theirs
    (("auto", 1, 1), {"regions": True}, TimingPlan("separate", ("count", "warm", "warm", "timed"), ops="counting")),
])
def test_the_plan_of_each_case(args, kwargs, plan):
    assert timing_plan(*args, **kwargs) == plan
    assert set(plan.passes) <= set(PASSES)
    assert plan.timed == args[2]  # one sample per timed call


def test_profile_runs_the_plans_passes(monkeypatch):
    """The model runs once per pass of the plan: (count, warm, timed, timed) is four calls."""
    calls = []
    model = torch.nn.Linear(2, 2)
    model.register_forward_pre_hook(lambda module, args: calls.append(1))
    result = flopsight.profile(model, torch.ones(1, 2), warm_up=2, repeat=2, timing="separate")
    assert len(calls) == len(timing_plan("separate", 2, 2).passes) == 4
    assert result.metadata.timing.method == "separate" and result.samples.count == 2
