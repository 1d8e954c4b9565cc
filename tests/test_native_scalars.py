"""A signature's float scalars: a cost learnt once holds for every value its formula compares
alike (an optimizer's step size changes every step); a formula that uses the value gets each
signature costed on its own. Both give what the Python backend counts."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import flopsight
from flopsight.capture.backends.native import ops as native_ops
from flopsight.capture.backends.native.recorder import RECORDER
from flopsight.capture.backends.native.scalars import ScalarCosts, split_doubles

needs_native = pytest.mark.skipif(RECORDER.load(quiet=True) is None, reason="the native backend cannot be built here")


@pytest.fixture(autouse=True)
def _checked():
    """The native recorder's self-check (its first use after an edit) done before a test spies
    on what the backend costs: its own profiles are not the test's."""
    if RECORDER.load(quiet=True) is not None:
        flopsight.profile(nn.Linear(2, 2), torch.ones(1, 2), backend="native")


def test_a_cost_that_only_compares_a_float_holds_for_every_value_that_compares_alike():
    costs = ScalarCosts()
    formula = lambda values: 3 if values[0] != 1 else 2  # noqa: E731  (addcdiv: value != 1 is one more multiply)
    costs.learn(b"k", (-0.001,), 3, formula)
    assert costs.find(b"k", (-0.002,)) == 3
    assert costs.find(b"k", (1.0,)) is None  # compares otherwise: costed on its own
    assert costs.find(b"other", (-0.002,)) is None


def test_a_cost_that_uses_a_float_or_reads_it_unseen_is_not_learnt():
    costs = ScalarCosts()
    costs.learn(b"k", (0.25,), 250, lambda values: int(abs(values[0]) * 1000))  # arithmetic on it
    # math.isclose reads the float in C, unseen by the probe: the nudged run differs
    costs.learn(b"j", (0.5,), 3, lambda values: 3 if math.isclose(values[0], 0.5) else 2)
    assert costs.find(b"k", (0.25,)) is None and costs.find(b"j", (0.5,)) is None


@needs_native
def test_split_doubles_zeroes_exactly_the_float_scalars(monkeypatch):
    # aten.add.Tensor(x, 2.5 as a wrapped number, alpha=0.5): two floats, the tensors' shapes kept
    x = torch.ones(2, 3)
    keys = []
    spy = native_ops.NativeCountingSource._by_signature

    def keep(self, op, key):
        keys.append((op.entry.name, key))
        return spy(self, op, key)

    monkeypatch.setattr(native_ops.NativeCountingSource, "_by_signature", keep)
    with flopsight.Profiler(nn.Identity(), backend="native", registry=flopsight.REGISTRY.copy()):
        torch.add(x, 2.5, alpha=0.5)
    (key,) = [k for name, k in keys if name == "aten.add"]
    masked, floats = split_doubles(key)
    assert floats == (2.5, 0.5)
    assert len(masked) == len(key) and masked != key
    assert split_doubles(masked) == (masked, (0.0, 0.0))


def _evaluations(monkeypatch) -> list[str]:
    """The ops the native backend runs a formula for, in turn (a spy on its evaluation)."""
    seen: list[str] = []
    evaluate = native_ops.NativeCountingSource._evaluate

    def spy(self, op, inputs, outputs, warn):
        seen.append(op.entry.name)
        return evaluate(self, op, inputs, outputs, warn)

    monkeypatch.setattr(native_ops.NativeCountingSource, "_evaluate", spy)
    return seen


def _adam_steps(backend: str, steps: int, registry, after=lambda: None) -> list:
    """Each step's result: a small MLP trained by Adam with a decaying learning rate, each
    step profiled on its own; ``after()`` called after each."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (step + 1))
    x = torch.randn(3, 4)
    results = []
    for _ in range(steps):
        with flopsight.Profiler(model, optimizer=optimizer, backend=backend, registry=registry) as prof:
            model(x).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
        schedule.step()
        results.append(prof.result)
        after()
    return results


def _figures(result) -> tuple:
    total = result.total
    return total.forward.macs, total.backward.macs, total.step.flops, total.step.calls


@needs_native
def test_adam_with_a_schedule_counts_as_python_does_and_costs_each_signature_once(monkeypatch):
    # every step's learning rate and bias corrections are new floats in Adam's addcdiv_ and div
    registry = flopsight.REGISTRY.copy()
    python = _adam_steps("python", 4, registry)
    seen = _evaluations(monkeypatch)
    runs: list[int] = []
    native = _adam_steps("native", 4, registry, after=lambda: runs.append(len(seen)))
    assert runs[0] > 0 and runs[1:] == [runs[0]] * 3  # later steps: every cost learnt or cached
    assert all(n.metadata.backend == "native" for n in native)
    assert [_figures(n) for n in native] == [_figures(p) for p in python]
    assert python[0].total.step.flops > 0


class _Scaled(nn.Module):
    def forward(self, x):
        for alpha in (0.1, 0.2, 0.3):
            torch.add(x, x, alpha=alpha)
        for alpha in (0.2, 0.4, 0.7):
            torch.sub(x, x, alpha=alpha)
        return x


@needs_native
def test_a_formula_that_uses_a_float_is_run_for_each_value(monkeypatch):
    registry = flopsight.REGISTRY.copy()

    @flopsight.register_formula("aten::add.Tensor", registry=registry)
    def scaled(out, self, other, alpha=1, **_):  # alpha * 10 FLOPs per element: uses the value
        return flopsight.Cost.of_flops(int(alpha * 10) * out.numel())

    @flopsight.register_formula("aten::sub.Tensor", registry=registry)
    def compared(out, self, other, alpha=1, **_):  # 3 per element above 0.5, else 1: compares it
        return flopsight.Cost.of_flops((3 if alpha > 0.5 else 1) * out.numel())

    seen = _evaluations(monkeypatch)
    for backend in ("python", "native"):
        result = flopsight.profile(_Scaled(), torch.ones(4), backend=backend, registry=registry)
        # add: 4 elements x (1 + 2 + 3) = 24 (0.3 * 10 is 3.0000000000000004: 3);
        # sub: 4 x 1 (0.2), 4 x 1 (0.4), 4 x 3 (0.7) = 20
        assert result.total.forward.flops == 24 + 20, backend
    # natively, add: run for each alpha, and once more on probes (it multiplies: not learnt), 6;
    # sub: for 0.2, on probes and nudged (learnt), 3; 0.4 compares as 0.2 does, none; 0.7
    # compares otherwise, 3 more
    assert (seen.count("aten.add"), seen.count("aten.sub")) == (6, 6)
