"""Dropout backward: 1 FLOP per element in training with p > 0 (``grad * mask * scale``, every
kind, alpha dropout included: its ``+ b`` has no gradient), nothing in eval or with p == 0.
Identical on CPU and meta (a ``mul`` there), and for the fused ``native_dropout_backward``.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import formula_of, layer_backward, meta
from torch import nn

import flopsight
from flopsight.formulas import Cost

aten = torch.ops.aten

X_SHAPE = (2, 3, 4, 5)  # N, C, H, W
N_ELEM = 2 * 3 * 4 * 5  # 120


def backward_cpu_meta(layer, *inputs):
    """The layer's backward ((macs, flops), ops) on CPU, checked equal on meta."""
    cpu = layer_backward("cpu", layer, *inputs)
    assert layer_backward("meta", layer, *inputs) == cpu
    return cpu


@pytest.mark.parametrize(
    "module, elements",
    [
        (nn.Dropout(0.3), N_ELEM),  # grad * mask * scale: 1 per element
        (nn.Dropout(1.0), N_ELEM),  # still multiplies (by zero)
        (nn.Dropout1d(0.3), N_ELEM // 5),  # run on x[..., 0]: (N, C, L) = 24 elements
        (nn.Dropout2d(0.3), N_ELEM),  # the (N, C, 1, 1) mask broadcasts: 1 per element
        (nn.Dropout3d(0.3), N_ELEM),
        (nn.AlphaDropout(0.3), N_ELEM),  # grad * a: 1 per element (2 in the forward)
        (nn.FeatureAlphaDropout(0.3), N_ELEM),
    ],
    ids=repr,
)
def test_dropout_modules_in_training(module, elements):
    x = torch.randn(X_SHAPE, requires_grad=True)
    if isinstance(module, nn.Dropout1d):
        x = x[..., 0].detach().requires_grad_()
    cost, ops = backward_cpu_meta(module.train(), x)
    assert cost == (0, elements)
    name = "alpha_dropout" if "Alpha" in type(module).__name__ else "dropout"
    if type(module).__name__.startswith(("Dropout1d", "Dropout2d", "Dropout3d", "FeatureAlpha")):
        name = "feature_" + name
    assert ops == {f"{name}.backward": (1, 0, elements)}  # one unit, whatever ops ran


@pytest.mark.parametrize("module", [nn.Dropout(0.3), nn.Dropout2d(0.3), nn.AlphaDropout(0.3)], ids=repr)
def test_dropout_in_eval_has_no_backward(module):
    """In eval dropout returns its input: no autograd node, nothing to count."""
    x = torch.randn(X_SHAPE, requires_grad=True)
    cost, ops = backward_cpu_meta(module.eval(), x)
    assert cost == (0, 0)
    assert ops == {}


def test_dropout_with_p0_has_no_backward():
    cost, ops = backward_cpu_meta(nn.Dropout(0.0).train(), torch.randn(X_SHAPE, requires_grad=True))
    assert (cost, ops) == ((0, 0), {})


FUNCTIONAL_CASES = {
    # name: (call on a non-leaf input, FLOPs of its backward)
    "F.dropout": (lambda x: F.dropout(x, 0.5), N_ELEM),
    "F.dropout_inplace": (lambda x: F.dropout(x, 0.5, True, True), N_ELEM),
    "F.dropout2d": (lambda x: F.dropout2d(x, 0.5), N_ELEM),
    "F.alpha_dropout": (lambda x: F.alpha_dropout(x, 0.5, training=True), N_ELEM),
    "F.alpha_dropout_default_eval": (lambda x: F.alpha_dropout(x, 0.5), 0),
    "F.feature_alpha_dropout": (lambda x: F.feature_alpha_dropout(x, 0.5, True), N_ELEM),
    "torch.dropout": (lambda x: torch.dropout(x, 0.5, True), N_ELEM),
    "torch.dropout_eval": (lambda x: torch.dropout(x, 0.5, train=False), 0),
    "torch.dropout_": (lambda x: torch.dropout_(x, 0.5, True), N_ELEM),
    "torch.feature_dropout": (lambda x: torch.feature_dropout(x, 0.5, True), N_ELEM),
    "torch.alpha_dropout_": (lambda x: torch.alpha_dropout_(x, 0.5, True), N_ELEM),
    "torch.feature_alpha_dropout": (lambda x: torch.feature_alpha_dropout(x, 0.5, True), N_ELEM),
}


@pytest.mark.parametrize("name", list(FUNCTIONAL_CASES))
def test_dropout_functions(name):
    fn, flops = FUNCTIONAL_CASES[name]
    # x * 1 first: a non-leaf input (in-place dropout on a leaf that requires grad is an error);
    # the multiply's own backward is 1 FLOP per element more
    cost, _ = backward_cpu_meta(lambda x: fn(x * 1), torch.randn(X_SHAPE, requires_grad=True))
    assert cost == (0, flops + N_ELEM)


def test_dropout_after_a_layer_whose_input_needs_no_grad():
    """The dropout's input requires grad through the Linear's weight: its backward runs."""
    model = nn.Sequential(nn.Linear(5, 4), nn.Dropout(0.2)).train()
    x = torch.randn(3, 5)  # no grad
    for device in ("cpu", "meta"):
        with flopsight.Profiler(model.to(device)) as prof:
            model(x.to(device)).sum().backward()
        ops = prof.result.module("1").ops["backward"]
        assert {n: (o.calls, o.macs, o.flops) for n, o in ops.items()} == {"dropout.backward": (1, 0, 3 * 4)}


def test_native_dropout_backward_kernel():
    """The fused kernel (what CUDA runs), reached directly: 1 FLOP per element of the gradient."""
    cost, ops = backward_cpu_meta(lambda x: torch.native_dropout(x, 0.3, True)[0],
                                  torch.randn(X_SHAPE, requires_grad=True))
    assert cost == (0, N_ELEM)
    assert ops["aten.native_dropout_backward"] == (1, 0, N_ELEM)
    fn = formula_of(aten.native_dropout_backward)
    mask = meta(4, 8, dtype=torch.bool)
    assert fn(None, grad_output=meta(4, 8), mask=mask, scale=2.0) == Cost(0, 32)
    assert fn(None, grad_output=meta(4, 8, dtype=torch.int64), mask=mask, scale=2.0) == Cost(0, 0)
