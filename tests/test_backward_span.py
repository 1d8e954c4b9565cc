"""The backward span: opened by a pre-hook on the outputs' ``grad_fn`` of each top-level forward,
closed by a callback on the autograd engine, with no function mode (docs/conventions/timing.md)."""

import pytest
import torch
from torch import nn

import flopsight
from flopsight._torch_private import queue_engine_callback

B = 4


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))


#: the ways a backward pass starts from Python, each on the loss of one forward
ENTRY_POINTS = {
    "Tensor.backward": lambda loss, model: loss.backward(),
    "autograd.backward": lambda loss, model: torch.autograd.backward([loss]),
    "autograd.grad": lambda loss, model: torch.autograd.grad(loss, list(model.parameters())),
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_entry_point_opens_one_backward_span_and_counts_the_same(entry, backend):
    model = mlp()
    x = torch.randn(B, 8)
    with flopsight.Profiler(model) as prof:
        ENTRY_POINTS[entry](model(x).sum(), model)
    result = prof.result
    assert len(result.spans["backward"]) == 1 and result.iteration.backward.latency > 0
    # grad_input of the first layer is not needed: 2x for the second layer, 1x the first:
    # fc2 16x2 -> 2 * B * 16 * 2 = 256, fc1 8x16 -> B * 8 * 16 = 512
    assert result.total.backward.macs == 2 * B * 16 * 2 + B * 8 * 16
    assert result.module("2").backward.latency <= result.iteration.backward.latency


def test_the_backward_span_needs_no_function_mode(backend):
    """Nothing routes the backward entry points: the function mode serves the units only."""
    model = mlp()
    with flopsight.Profiler(model) as prof:
        functions = set(prof._session.ctx.events.functions)
        model(torch.randn(B, 8)).sum().backward()
    assert not {torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad} & functions
    assert len(prof.result.spans["backward"]) == 1


def test_callbacks_queued_during_the_pass_are_inside_its_span(backend):
    """What a wrapper queues on the engine while the pass runs (DDP's gradient reduction) runs
    after the last node and belongs to the backward pass: its ops are the root's, in backward."""
    model = mlp()

    def reduce_after_backward(grad):
        queue_engine_callback(lambda: torch.mm(torch.ones(3, 5), torch.ones(5, 7)))  # 3*5*7 = 105 MACs
        return grad

    model[0].weight.register_hook(reduce_after_backward)
    with flopsight.Profiler(model) as prof:
        model(torch.randn(B, 8)).sum().backward()
    result = prof.result
    root_own = result.module("").self.backward
    assert root_own.macs == 105
    assert len(result.spans["backward"]) == 1


def test_retained_graph_run_twice_is_two_spans(backend):
    model = mlp()
    with flopsight.Profiler(model) as prof:
        loss = model(torch.randn(B, 8)).sum()
        loss.backward(retain_graph=True)
        loss.backward()
    result = prof.result
    assert len(result.spans["backward"]) == 2
    # each backward: Linear(16, 2)'s two gradients 2 * B*16*2, Linear(8, 16)'s weight gradient
    # B*8*16 (its input needs none); run twice
    assert result.total.backward.macs == 2 * (2 * B * 16 * 2 + B * 8 * 16)


def test_a_backward_that_raises_ends_its_span_and_the_next_forward_is_forward(backend):
    model = mlp()

    def fail(grad):
        raise RuntimeError("boom")

    x = torch.randn(B, 8)
    with flopsight.Profiler(model) as prof:
        out = model(x)
        handle = out.register_hook(fail)
        with pytest.raises(RuntimeError, match="boom"):
            out.sum().backward()
        handle.remove()
        model(x)  # counted as a forward, not as part of the failed backward
    result = prof.result
    assert result.module("0").forward.calls == 2
    # two forwards, each Linear(8, 16) B*8*16 + Linear(16, 2) B*16*2 MACs
    assert result.total.forward.macs == 2 * (B * 8 * 16 + B * 16 * 2)


def test_a_model_returning_a_dataclass_and_a_dict_opens_the_span(backend):
    from dataclasses import dataclass

    @dataclass
    class Out:
        logits: torch.Tensor

    class Wrapped(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = mlp()

        def forward(self, x):
            return {"out": Out(self.body(x))}

    model = Wrapped()
    with flopsight.Profiler(model) as prof:
        model(torch.randn(B, 8))["out"].logits.sum().backward()
    assert len(prof.result.spans["backward"]) == 1
