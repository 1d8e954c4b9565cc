"""The native backend charges later than the ops run: at a phase change or a span's end it sets
its records aside under the state they ran in, a claimed op (a collective) is placed in order
with them, and what is left is charged when the capture is collected, perhaps on the thread that
finishes a detached profile. The numbers must be those of charging at once (the Python backend's)."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

import flopsight
from flopsight.capture.backends.native.recorder import RECORDER

needs_native = pytest.mark.skipif(RECORDER.load(quiet=True) is None, reason="the native backend cannot be built here")

B = 4
PARAMS = (8 * 16 + 16 + 16 * 4 + 4) * 4  # 848 B: the MLP's fp32 parameters


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


@needs_native
@pytest.mark.parametrize("backend", ["python", "native"])
def test_a_release_at_the_end_of_the_span_does_not_lower_the_peak_before_it(backend):
    """The gradients live at the start are released by zero_grad at the end of the step, after
    the peak: the peak is everything live at the start, the parameters (848 B), the gradients
    (848 B) and AdamW's state (2 * 848 + 4 * 4 = 1712 B), 3408 B, plus the most the span
    allocated. The native backend charges the forward, backward and step records after the span,
    where the release has happened: it still counts it where it happened, after them."""
    model = mlp()
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(B, 8)
    model(x).pow(2).mean().backward()
    opt.step()  # the state exists, and the gradients are left in place
    with flopsight.Profiler(model, optimizer=opt, memory=True, backend=backend) as prof:
        model(x).pow(2).mean().backward()  # accumulated into the gradients in place
        opt.step()
        opt.zero_grad()  # set_to_none: the gradients of before are released last
    m = prof.result.memory
    assert prof.result.metadata.backend == backend
    assert m.live_at_start == PARAMS + PARAMS + 2 * PARAMS + 4 * 4 == 3408
    assert m.peak == 3408 + m.peak_allocated and m.peak_allocated > 0


def training_step(model, opt, x, **options):
    prof = flopsight.Profiler(model, optimizer=opt, backend="native", **options).start()
    model(x).pow(2).mean().backward()
    opt.step()
    return prof


def per_module(result) -> dict:
    return {(path, phase): (s.macs, s.flops, s.calls) for path, m in result.modules.items()
            for phase, s in m.phases.items()}


@needs_native
def test_a_detached_profile_is_charged_on_its_thread_while_the_next_profile_runs():
    """A profile stopped detached leaves its records to the thread that finishes it; a profile
    started meanwhile with another registry makes the recorder forget its operator and
    signature ids: the stopped one is charged first, under the ids it was recorded with. Both
    count what they count alone."""
    # two registries that configure the recorder differently (each reads another operator's
    # values), whatever the default one reads
    first_registry, other = flopsight.REGISTRY.copy(), flopsight.REGISTRY.copy()
    flopsight.register_formula("aten::tanh", registry=first_registry, reads_values=True)(
        lambda out, self, **_: flopsight.Cost.of_flops(self.numel()))
    flopsight.register_formula("aten::relu", registry=other, reads_values=True)(
        lambda out, self, **_: flopsight.Cost.of_flops(self.numel()))
    x = torch.randn(B, 8)
    alone = []
    for _ in range(2):  # each alone: the reference
        model = mlp()
        prof = training_step(model, torch.optim.AdamW(model.parameters()), x, registry=first_registry)
        prof.stop()
        alone.append(per_module(prof.result))
    assert alone[0] == alone[1]

    model = mlp()
    first = training_step(model, torch.optim.AdamW(model.parameters()), x, registry=first_registry)
    finished = threading.Event()
    with RECORDER.charging:  # its thread waits to charge: the next profile's start charges it first
        first.stop_detached(lambda result: finished.set())
        assert RECORDER.uncharged  # its records wait
        second_model = mlp()
        second = training_step(second_model, torch.optim.AdamW(second_model.parameters()), x, registry=other)
        assert not RECORDER.uncharged
    second.stop()
    assert finished.wait(60)
    assert per_module(first.result) == alone[0]
    assert first.result.total.forward.macs == (8 * 16 + 16 * 4) * B > 0
    # the second's own registry: ReLU costs one FLOP an element, 4 x 16
    assert second.result.module("1").phases["forward"].flops == B * 16
