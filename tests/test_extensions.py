"""Counting what no aten formula knows: per-module-class rules and Python autograd Functions,
registered through the public API on a copy of the registry."""

import pytest
import torch
from torch import nn

import flopsight
from flopsight import Cost


class FusedMLP(nn.Module):
    """Two products that pretend to be one opaque fused kernel."""

    def __init__(self, d=8, hidden=16):
        super().__init__()
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)
        self.hidden = hidden

    def forward(self, x, scale: float = 1.0):
        return self.down(torch.relu(self.up(x))) * scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = FusedMLP()
        self.head = nn.Linear(8, 2, bias=False)

    def forward(self, x):
        return self.head(self.mlp(x, scale=2.0))


def with_rule(backward=None):
    registry = flopsight.REGISTRY.copy()
    seen = {}

    @flopsight.register_module(FusedMLP, registry=registry, backward=backward)
    def fused(out, module, x, scale):
        seen["scale"] = scale  # the forward's arguments arrive by name, keywords included
        # the vendor's figure: up and down, 2 * rows * d * hidden MACs, no elementwise work
        return Cost.of_product(2 * x.shape[0] * x.shape[1] * module.hidden)

    return registry, seen


def test_a_module_rule_replaces_the_count_of_its_whole_subtree():
    registry, seen = with_rule()
    x = torch.ones(4, 8)
    result = flopsight.profile(Net(), x, warm_up=0, registry=registry)
    # rule: 2 * 4 * 8 * 16 = 1024 MACs, 2048 FLOPs, charged to "mlp" itself; the Linears and
    # the ReLU and the scaling inside it are not counted again
    own = result.module("mlp").self.forward
    assert (own.macs, own.flops, own.calls) == (1024, 2048, 1)
    assert result.module("mlp").forward.macs == 1024
    assert result.module("mlp.up").forward.macs == 0 and result.module("mlp.up").calls == 1  # still timed
    assert seen["scale"] == 2.0
    assert result.module("head").forward.macs == 4 * 8 * 2  # the rest is counted as usual
    assert result.total.forward.macs == 1024 + 64


def test_a_module_rule_with_a_backward_formula_charges_it_once():
    backward = lambda out, module, x, scale: Cost.of_product(3 * x.shape[0] * x.shape[1] * module.hidden)
    registry, _ = with_rule(backward)
    model = Net()
    with flopsight.Profiler(model, registry=registry) as prof:
        model(torch.ones(4, 8)).sum().backward()
    mlp = prof.result.module("mlp")
    # backward rule: 3 * 4 * 8 * 16 = 1536 MACs, whichever kernels the backward ran
    assert mlp.backward.macs == 1536
    assert mlp.ops["backward"]["FusedMLP.backward"].calls == 1
    # head: grad_input (4x2 @ 2x8) and grad_weight (2x4 @ 4x8): 64 MACs each
    assert prof.result.module("head").backward.macs == 128


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, power=3):
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x * x * g, None


class UsesCube(nn.Module):
    def forward(self, x):
        return Cube.apply(x)


def test_an_autograd_function_is_counted_as_one_call_forward_and_backward():
    registry = flopsight.REGISTRY.copy()
    # forward: x*x*x, 2 multiplies per element; backward: 3*x*x*g, 3 per element
    flopsight.register_function(Cube, registry=registry,
                                backward=lambda out, x, power: Cost.of_flops(3 * x.numel()))(
        lambda out, x, power: Cost.of_flops(2 * x.numel()))
    x = torch.ones(5, requires_grad=True)
    model = UsesCube()
    with flopsight.Profiler(model, registry=registry) as prof:
        model(x).sum().backward()
    result = prof.result
    assert result.total.forward.flops == 10
    assert result.total.ops["forward"]["Cube"].calls == 1
    assert result.total.backward.flops == 15
    assert "apply" not in Cube.__dict__  # the class is left exactly as it was


def test_without_a_rule_the_same_function_is_counted_op_by_op():
    x = torch.ones(5, requires_grad=True)
    model = UsesCube()
    with flopsight.Profiler(model) as prof:
        model(x).sum().backward()
    assert prof.result.total.forward.flops == 10  # two aten.mul, 5 each


@pytest.mark.parametrize("register, bad", [
    (flopsight.register_module, torch.autograd.Function),
    (flopsight.register_function, nn.Linear),
])
def test_registration_names_what_was_expected(register, bad):
    with pytest.raises(TypeError, match="expected"):
        register(bad, registry=flopsight.REGISTRY.copy())
