"""Convolution backward: ``y = conv(x); y.sum().backward()`` as users run it, hand-derived.

F = the forward MACs (see test_formulas_conv.py):
    forward conv:     F = N * Cout * prod(out_spatial) * (Cin/groups) * prod(kernel)
    transposed conv:  F = N * Cin  * prod(in_spatial)  * (Cout/groups) * prod(kernel)
aten.convolution_backward computes only what is asked for:
    grad_input  F MACs   (x requires grad)
    grad_weight F MACs   (weight trainable)
    grad_bias   numel(out) FLOPs: a sum of grad_output over batch and space
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import layer_backward, measure_on, schema_cost
from torch import nn

from flopsight.formulas import Cost
from flopsight.formulas.conv import convolution_backward

aten = torch.ops.aten

# (id, factory(bias) -> module, input shape, F, numel(out)); out shapes as in test_formulas_conv.py
LAYERS = [
    # L = 14: F = N*Cout*L*Cin*k
    ("conv1d", lambda bias: nn.Conv1d(4, 8, 3, bias=bias), (2, 4, 16), 2 * 8 * 14 * 4 * 3, 2 * 8 * 14),
    # H = W = (10 + 2 - 3)//2 + 1 = 5, groups 2: Cin/groups = 2
    ("conv2d-stride-groups", lambda bias: nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2, bias=bias),
     (2, 4, 10, 10), 2 * 6 * 5 * 5 * 2 * 9, 2 * 6 * 5 * 5),
    # depthwise, dilation 2: out 10 - 4 = 6
    ("conv2d-depthwise-dilated", lambda bias: nn.Conv2d(4, 4, 3, dilation=2, groups=4, bias=bias),
     (1, 4, 10, 10), 4 * 6 * 6 * 1 * 9, 4 * 6 * 6),
    # out 3x4x5
    ("conv3d", lambda bias: nn.Conv3d(2, 4, 3, bias=bias), (1, 2, 5, 6, 7), 4 * 3 * 4 * 5 * 2 * 27, 4 * 3 * 4 * 5),
    # transposed: L = 9 + 2 + 1 = 12; F = N*Cin*Lin*Cout*k
    ("convT1d", lambda bias: nn.ConvTranspose1d(4, 8, 3, bias=bias), (2, 4, 10), 2 * 4 * 10 * 8 * 3, 2 * 8 * 12),
    # H = W = 4*2 - 2 + 2*2 + 1 + 1 = 12; Cout/groups = 3
    ("convT2d-all", lambda bias: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2,
                                                     dilation=2, bias=bias),
     (1, 4, 5, 5), 4 * 5 * 5 * 3 * 9, 6 * 12 * 12),
    # D = 2 + 2 + 1 = 5, H = W = 3*2 + 2 + 1 = 9
    ("convT3d", lambda bias: nn.ConvTranspose3d(2, 4, 3, stride=(1, 2, 2), bias=bias), (1, 2, 3, 4, 4),
     2 * 3 * 4 * 4 * 4 * 27, 4 * 5 * 9 * 9),
]  # fmt: skip

# (id, input requires grad, weight trainable, bias, bias trainable) ->
#   MACs  = F * (input grad + weight grad)
#   FLOPs = 2 * MACs + numel(out) * (bias grad)
SCENARIOS = [
    ("all", True, True, True, True),
    ("first-layer", False, True, True, True),  # input from data: no grad_input
    ("no-bias", True, True, False, False),
    ("frozen", True, False, True, False),  # fine-tuning above a frozen layer: grad_input only
    ("only-bias-trains", False, False, True, True),  # BitFit-style: the bias sum alone
]


def _expected(fwd: int, out: int, x_grad: bool, w_grad: bool, bias: bool, b_grad: bool) -> tuple[int, int]:
    macs = fwd * (int(x_grad) + int(w_grad))
    return macs, 2 * macs + (out if bias and b_grad else 0)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s[0] for s in SCENARIOS])
@pytest.mark.parametrize("name, make, shape, fwd, out", LAYERS, ids=[c[0] for c in LAYERS])
def test_conv_backward(name, make, shape, fwd, out, scenario, device):
    _, x_grad, w_grad, bias, b_grad = scenario
    layer = make(bias)
    layer.weight.requires_grad_(w_grad)
    if bias:
        layer.bias.requires_grad_(b_grad)
    x = torch.randn(shape, requires_grad=x_grad)
    counted, ops = layer_backward(device, layer, x)
    assert counted == _expected(fwd, out, x_grad, w_grad, bias, b_grad)
    assert ops["aten.convolution_backward"][1:] == counted  # the one op with a cost


def test_first_layer_is_one_forward_later_layers_two():
    """The brief's rule of thumb, on a two-conv stack: backward MACs 1x forward for the first
    layer (no grad_input), 2x for the second."""
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Conv2d(8, 8, 3))
    import flopsight

    with flopsight.Profiler(model) as prof:
        model(torch.randn(2, 3, 12, 12)).sum().backward()
    first, second = prof.result.module("0"), prof.result.module("1")
    # first: out 10x10, F = 2*8*10*10*3*9; second: out 8x8, F = 2*8*8*8*8*9
    assert first.forward.macs == 2 * 8 * 10 * 10 * 3 * 9 == first.backward.macs
    assert second.forward.macs == 2 * 8 * 8 * 8 * 8 * 9
    assert second.backward.macs == 2 * second.forward.macs


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_functional_conv_backward(device):
    """F.conv2d with a weight tensor the caller owns: the same op, the same count."""
    w = torch.randn(6, 3, 3, 3, requires_grad=True)
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    # out (2, 6, 3, 3) at stride 2: F = 2*6*3*3*3*9; grad_input + grad_weight, no bias
    counted, _ = layer_backward(device, lambda x, w: F.conv2d(x, w, stride=2), x, w)
    assert counted == (2 * (2 * 6 * 3 * 3 * 3 * 9), 4 * (2 * 6 * 3 * 3 * 3 * 9))


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")  # expected
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_even_kernel_same_padding(device):
    """padding='same' with an even kernel pads with constant_pad_nd (its backward is a free
    slice) and convolves with padding 0 on the padded 7x7 input: out 6x6."""
    conv = nn.Conv2d(3, 4, 4, padding="same")
    fwd = 1 * 4 * 6 * 6 * 3 * 16
    counted, _ = layer_backward(device, conv, torch.randn(1, 3, 6, 6, requires_grad=True))
    assert counted == (2 * fwd, 4 * fwd + 4 * 6 * 6)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_padding_modes_conv_part(mode, device):
    """The conv of a padded input: F counted on the padded input's valid positions (out 6x6).
    The padding op's own backward (folding the border's gradient back: reflection_pad*_backward,
    replication_pad*_backward, slices and adds for 'circular') is counted by its families."""
    conv = nn.Conv2d(3, 4, 3, padding=1, padding_mode=mode)
    fwd = 1 * 4 * 6 * 6 * 3 * 9
    _, ops = layer_backward(device, conv, torch.randn(1, 3, 6, 6, requires_grad=True))
    assert ops["aten.convolution_backward"][1:] == (2 * fwd, 4 * fwd + 4 * 6 * 6)


def test_double_backward_is_counted_op_by_op():
    """A gradient penalty differentiates convolution_backward: _convolution_double_backward is
    CompositeImplicitAutograd, so the counting mode sees the convolutions it runs."""
    import flopsight

    conv = nn.Conv2d(3, 4, 3, bias=False)
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    with flopsight.Profiler(nn.Sequential(conv)) as prof:
        y = conv(x)
        (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
        (g * g).sum().backward()
    names = {name for name, o in prof.result.ops("backward").items()}
    assert {"aten.convolution_backward", "aten.convolution"} <= names
    assert "aten._convolution_double_backward" not in names


# -- kernels reached where a mode sees them: formulas called in schema order ---------------
m = "meta"
X, W = torch.empty(2, 4, 6, 6, device=m), torch.empty(8, 2, 3, 3, device=m)  # groups 2
GO = torch.empty(2, 8, 4, 4, device=m)  # forward out 4x4
FWD = 2 * 8 * 4 * 4 * 2 * 9  # N*Cout*H*W*(Cin/groups)*k*k
XT, WT = torch.empty(2, 8, 4, 4, device=m), torch.empty(8, 2, 3, 3, device=m)  # transposed, groups 4
GOT = torch.empty(2, 8, 6, 6, device=m)
FWDT = 2 * 8 * 4 * 4 * 2 * 9  # N*Cin*H*W*(Cout/groups)*k*k
S, P, D = [1, 1], [0, 0], [1, 1]
ALL, IN_ONLY, WB = [True, True, True], [True, False, False], [False, True, True]

SCHEMA_CALLS = [
    ("convolution_backward", aten.convolution_backward, (None, GO, X, W, [8], S, P, D, False, [0, 0], 2, ALL),
     (2 * FWD, 4 * FWD + GO.numel())),
    ("convolution_backward-T", aten.convolution_backward,
     (None, GOT, XT, WT, None, S, P, D, True, [0, 0], 4, [True, True, False]), (2 * FWDT, 4 * FWDT)),
    ("convolution_backward-weight+bias", aten.convolution_backward,
     (None, GO, X, W, [8], S, P, D, False, [0, 0], 2, WB), (FWD, 2 * FWD + GO.numel())),
    ("convolution_backward_overrideable", aten.convolution_backward_overrideable,
     (None, GOT, XT, WT, S, P, D, True, [0, 0], 4, IN_ONLY), (FWDT, 2 * FWDT)),
    ("_slow_conv2d_backward.output_mask", aten._slow_conv2d_backward,
     (None, GO[:, :4], X, torch.empty(4, 4, 3, 3, device=m), [3, 3], S, P, WB),
     # groups 1, Cout 4: F = 2*4*4*4*4*9
     (2 * 4 * 4 * 4 * 4 * 9, 2 * (2 * 4 * 4 * 4 * 4 * 9) + 2 * 4 * 4 * 4)),
    ("mps_convolution_backward", aten.mps_convolution_backward, (None, X, GO, W, P, S, D, 2, IN_ONLY), (FWD, 2 * FWD)),
    ("mps_convolution_transpose_backward", aten.mps_convolution_transpose_backward,
     (None, XT, GOT, WT, P, [0, 0], S, D, 4, [True, True]), (2 * FWDT, 4 * FWDT)),
    # ggO = conv(ggI, W) + conv(x, ggW) + ggb: 2F and 2 adds per output element; gI and gW: F each
    ("_convolution_double_backward", aten._convolution_double_backward,
     (None, X, W, torch.empty(8, device=m), GO, W, X, S, P, D, False, [0, 0], 2, ALL),
     (4 * FWD, 8 * FWD + 2 * GO.numel())),
    # only ggI given, only ggO wanted: conv(ggI, W), nothing to add
    ("_convolution_double_backward-ggI", aten._convolution_double_backward,
     (None, X, None, None, GO, W, X, S, P, D, False, [0, 0], 2, IN_ONLY), (FWD, 2 * FWD)),
    # conv_tbc: input (T=10, N=2, Cin=3), weight (k=3, Cin=3, Cout=5): F = T*N*Cout*k*Cin; bias T*N*Cout
    ("conv_tbc_backward", aten.conv_tbc_backward,
     (None, torch.empty(10, 2, 5), torch.empty(10, 2, 3), torch.empty(3, 3, 5), torch.empty(5), 1),
     (2 * 10 * 2 * 5 * 3 * 3, 4 * 10 * 2 * 5 * 3 * 3 + 10 * 2 * 5)),
]  # fmt: skip


@pytest.mark.parametrize("name, op, call, expected", SCHEMA_CALLS, ids=[c[0] for c in SCHEMA_CALLS])
def test_backward_kernel_formulas_follow_their_schema(name, op, call, expected):
    assert schema_cost(op, *call) == Cost(*expected)


def test_output_mask_by_keyword():
    counted = schema_cost(aten.convolution_backward, None, GO, X, W, [8], S, P, D, transposed=False,
                          output_padding=[0, 0], groups=2, output_mask=[False, True, False])  # fmt: skip
    assert counted == Cost(FWD, 2 * FWD)
    assert convolution_backward(None, GO, X, W, transposed=False, output_mask=[False, True, False]) == counted


def test_slow_conv2d_backward_runs_on_cpu():
    """The CPU fallback kernel called directly (as a mode at another level would see it)."""
    x, w, g = torch.randn(1, 3, 6, 6), torch.randn(4, 3, 3, 3), torch.randn(1, 4, 4, 4)
    call = lambda: aten._slow_conv2d_backward(g, x, w, [3, 3], [1, 1], [0, 0], [True, True, True])  # noqa: E731
    fwd = 4 * 4 * 4 * 3 * 9  # out 4x4, Cout 4, Cin 3, 3x3
    assert measure_on("cpu", call) == (2 * fwd, 4 * fwd + 4 * 4 * 4)
