"""Activation and softmax backward: ``y = act(x); y.sum().backward()`` as users run it.

Convention (``activation.activation_backward_flops``): an activation's backward kernel costs
2 FLOPs per element of each gradient it returns (the derivative, 1 as in the forward, and
the chain-rule multiply, 1); a softmax / log-softmax backward 4 per element
(``softmax_backward_flops``). Composite activations cost the backward ops autograd runs.
Every case runs on CPU and on meta, with the same counts.
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

SHAPE = (2, 3, 4)
N = 2 * 3 * 4  # elements of the input (and of its gradient)
SHAPE4 = (2, 3, 4, 5)  # (batch, channels, h, w) for PReLU
N4 = 2 * 3 * 4 * 5


def case(name, layer, flops, op, shape=SHAPE):
    return pytest.param(layer, shape, flops, op, id=name)


KERNELS = [
    # (layer, backward FLOPs = the kernel's, the kernel that runs)
    case("nn.ReLU", nn.ReLU, 2 * N, "aten.threshold_backward"),  # threshold_backward(g, y, 0)
    case("nn.Threshold", lambda: nn.Threshold(0.1, 2.0), 2 * N, "aten.threshold_backward"),
    case("nn.ReLU6", nn.ReLU6, 2 * N, "aten.hardtanh_backward"),
    case("nn.Hardtanh", lambda: nn.Hardtanh(-2, 2), 2 * N, "aten.hardtanh_backward"),
    case("nn.LeakyReLU", lambda: nn.LeakyReLU(0.2), 2 * N, "aten.leaky_relu_backward"),
    case("nn.ELU", nn.ELU, 2 * N, "aten.elu_backward"),
    case("nn.SELU", nn.SELU, 2 * N, "aten.elu_backward"),
    case("nn.CELU", lambda: nn.CELU(2.0), 2 * N, "aten.elu_backward"),
    case("nn.GELU", nn.GELU, 2 * N, "aten.gelu_backward"),
    case("nn.GELU tanh", lambda: nn.GELU(approximate="tanh"), 2 * N, "aten.gelu_backward"),
    case("nn.SiLU", nn.SiLU, 2 * N, "aten.silu_backward"),
    case("nn.Softplus", lambda: nn.Softplus(beta=2, threshold=10), 2 * N, "aten.softplus_backward"),
    case("nn.Sigmoid", nn.Sigmoid, 2 * N, "aten.sigmoid_backward"),
    case("nn.Tanh", nn.Tanh, 2 * N, "aten.tanh_backward"),
    case("nn.Hardsigmoid", nn.Hardsigmoid, 2 * N, "aten.hardsigmoid_backward"),
    case("nn.Hardswish", nn.Hardswish, 2 * N, "aten.hardswish_backward"),
    case("nn.Hardshrink", nn.Hardshrink, 2 * N, "aten.hardshrink_backward"),
    case("nn.Softshrink", nn.Softshrink, 2 * N, "aten.softshrink_backward"),
    case("nn.LogSigmoid", nn.LogSigmoid, 2 * N, "aten.log_sigmoid_backward"),
    case("nn.RReLU train", nn.RReLU, 2 * N, "aten.rrelu_with_noise_backward"),
    case("nn.RReLU eval", lambda: nn.RReLU().eval(), 2 * N, "aten.rrelu_with_noise_backward"),
    # GLU halves its input in forward; its backward returns the gradient of the whole input
    case("nn.GLU", nn.GLU, 2 * N, "aten.glu_backward"),
    case("nn.GLU dim=1", lambda: nn.GLU(dim=1), 2 * 2 * 6 * 5, "aten.glu_backward", shape=(2, 6, 5)),
    # mish is a unit: its backward is one entry, 2 per element, whatever the device runs
    case("nn.Mish", nn.Mish, 2 * N, "mish.backward"),
    # softmax family: 4 per element
    case("nn.Softmax", lambda: nn.Softmax(dim=-1), 4 * N, "aten._softmax_backward_data"),
    case("nn.Softmax dim=0", lambda: nn.Softmax(dim=0), 4 * N, "aten._softmax_backward_data"),
    case("nn.LogSoftmax", lambda: nn.LogSoftmax(dim=1), 4 * N, "aten._log_softmax_backward_data"),
    case("nn.Softmax2d", nn.Softmax2d, 4 * N4, "aten._softmax_backward_data", shape=SHAPE4),
]


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("layer, shape, flops, op", KERNELS)
def test_activation_backward_kernel(device, layer, shape, flops, op):
    total, ops = layer_backward(device, layer(), torch.randn(shape, requires_grad=True))
    assert total == (0, flops)
    assert ops[op] == (1, 0, flops)


@pytest.mark.parametrize("layer", [nn.ReLU(), nn.GELU(), nn.Softmax(-1), nn.Mish()], ids=str)
def test_activation_of_an_input_that_needs_no_gradient_has_no_backward(layer):
    """The activation is the first layer (its input needs no grad): autograd records
    nothing for it, so its backward costs nothing; the linear after it still has one."""
    model = nn.Sequential(layer, nn.Linear(4, 3))
    total, ops = layer_backward("cpu", model, torch.randn(SHAPE))
    assert not any(name.startswith(("aten.threshold", "aten.gelu", "aten._softmax", "mish")) for name in ops)
    # the Linear(4, 3)'s weight gradient only: g^T @ x (6 rows: 3*6*4 MACs) + bias (6*3 adds)
    assert total == (3 * 6 * 4, 2 * 3 * 6 * 4 + 6 * 3)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize(
    "x_grad, w_grad, flops",
    [
        # _prelu_kernel_backward always returns two input-sized gradients (2 + 2 per element);
        # autograd then sums the weight's (broadcast) gradient down to its (1, C, 1, 1) view: N4
        pytest.param(True, True, 4 * N4 + N4, id="all"),
        pytest.param(False, True, 4 * N4 + N4, id="first-layer"),  # the kernel still returns both
        pytest.param(True, False, 4 * N4, id="frozen"),  # the weight's gradient is not reduced
    ],
)
def test_prelu_backward(device, x_grad, w_grad, flops):
    layer = nn.PReLU(3)
    layer.requires_grad_(w_grad)
    total, ops = layer_backward(device, layer, torch.randn(SHAPE4, requires_grad=x_grad))
    assert total == (0, flops)
    assert ops["aten._prelu_kernel_backward"] == (1, 0, 4 * N4)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_inplace_activation_backward(device):
    """An in-place ReLU after a Linear: the same kernel, 2 per element."""
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True))
    _, ops = layer_backward(device, model, torch.randn(SHAPE, requires_grad=True))
    assert ops["aten.threshold_backward"] == (1, 0, 2 * N)


COMPOSITES = [
    # nn.Softmin = softmax(-x): softmax backward 4 + neg's backward (a neg) 1
    ("nn.Softmin", lambda: nn.Softmin(dim=-1), 5 * N),
    # nn.Tanhshrink = x - tanh(x): sub's backward negates (1), tanh_backward (2), and the
    # two gradients of x are added (1)
    ("nn.Tanhshrink", nn.Tanhshrink, 4 * N),
    # nn.Softsign = x / (1 + |x|): div's backward: g / b (1) and -g * (a / b) / b (div, div,
    # neg, mul: 4); abs's: g * sgn(x) (2); the two gradients of x added (1)
    ("nn.Softsign", nn.Softsign, 8 * N),
    # softmax in float64: the cast back is free, the softmax backward 4
    ("F.softmax dtype", lambda: (lambda a: F.softmax(a, -1, dtype=torch.float64)), 4 * N),
]


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("name, layer, flops", COMPOSITES, ids=[c[0] for c in COMPOSITES])
def test_composite_activation_backward(device, name, layer, flops):
    total, _ = layer_backward(device, layer(), torch.randn(SHAPE, requires_grad=True))
    assert total == (0, flops)


transformers_activations = pytest.importorskip("transformers.activations")


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize(
    "name, flops",
    [
        ("gelu", 2 * N),  # GELUActivation binds F.gelu: gelu_backward
        ("silu", 2 * N),
        ("mish", 2 * N),  # the mish unit
        # quick_gelu = x * sigmoid(1.702 x): mul's backward g * s (1) and g * x (1),
        # sigmoid_backward (2), the 1.702 scale's backward (1), the two gradients added (1)
        ("quick_gelu", 6 * N),
    ],
)
def test_hf_activation_backward(device, name, flops):
    total, _ = layer_backward(device, transformers_activations.ACT2FN[name], torch.randn(SHAPE, requires_grad=True))
    assert total == (0, flops)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_mish_is_one_unit_forward_and_backward(device):
    """On meta, torch has no mish_backward kernel and autograd runs a 9-op composite: the
    unit hides it, so every device counts the 1-per-element kernel forward and 2 per element
    backward, as one entry each."""
    model = nn.Sequential(nn.Mish())
    x = torch.randn(SHAPE, device=device, requires_grad=True)
    with flopsight.Profiler(model) as prof:
        model(x).sum().backward()
    ops = prof.result.module("0").ops
    assert {name: (o.calls, o.flops) for name, o in ops["forward"].items()} == {"mish": (1, N)}
    assert {name: (o.calls, o.flops) for name, o in ops["backward"].items()} == {"mish.backward": (1, 2 * N)}


def test_backward_formulas_called_directly():
    """The kernels as GPUs reach them (meta shapes): grad_input-sized counts."""
    g, x = meta(4, 6), meta(4, 6)
    mask = meta(4, 6, dtype=torch.bool)
    assert formula_of(aten.gelu_backward)(meta(4, 6), grad_output=g, self=x, approximate="tanh") == Cost(0, 2 * 24)
    assert formula_of(aten.mish_backward)(meta(4, 6), grad_output=g, self=x) == Cost(0, 2 * 24)
    assert formula_of(aten.glu_backward)(meta(4, 6), grad_output=meta(4, 3), self=x, dim=-1) == Cost(0, 2 * 24)
    assert formula_of(aten._prelu_kernel_backward)((meta(4, 6), meta(4, 6)), grad_output=g, self=x,
                                                   weight=meta(1, 6)) == Cost(0, 4 * 24)
    assert formula_of(aten._softmax_backward_data)(meta(4, 6), g, x, dim=-1, input_dtype=torch.float32) == Cost(0, 96)
    assert formula_of(aten._masked_softmax_backward)(meta(4, 6), g, x, mask=mask, dim=-1) == Cost(0, 96)
    assert formula_of(aten._masked_softmax)(meta(4, 6), x, mask=mask, dim=-1) == Cost(0, 24)
    # integer tensors: no floating-point work
    i = meta(4, 6, dtype=torch.int64)
    assert formula_of(aten.threshold_backward)(i, grad_output=i, self=i, threshold=0) == Cost(0, 0)
