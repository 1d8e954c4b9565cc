"""Convolution formulas: nn.Conv1d/2d/3d and nn.ConvTranspose1d/2d/3d, hand-derived.

Forward:     MACs = N * Cout * prod(out_spatial) * (Cin/groups) * prod(kernel)
Transposed:  MACs = N * Cin  * prod(in_spatial)  * (Cout/groups) * prod(kernel)
FLOPs = 2 * MACs + (N * Cout * prod(out_spatial) if bias else 0)

out = (in + 2p - d(k-1) - 1) // s + 1                  (forward)
out = (in - 1) s - 2p + d(k-1) + output_padding + 1    (transposed)
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import measure_cpu_meta, measure_on, ops_on, schema_cost
from torch import nn

from flopsight.formulas import Cost

aten = torch.ops.aten

# torch warns that an even-kernel padding='same' conv copies its input: expected here.
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")


# (id, module factory, input shape, MACs, bias elements): expected FLOPs = 2*MACs + bias.
FORWARD = [
    # N*Cout*L*Cin*k = 2*8*14*4*3, bias N*Cout*L = 2*8*14
    ("1d", lambda: nn.Conv1d(4, 8, 3), (2, 4, 16), 2 * 8 * 14 * 4 * 3, 2 * 8 * 14),
    # L = (16 + 4 - 4 - 1)//2 + 1 = 8
    ("1d-stride-pad-nobias", lambda: nn.Conv1d(4, 8, 5, stride=2, padding=2, bias=False), (2, 4, 16),
     2 * 8 * 8 * 4 * 5, 0),
    # 'same' keeps L = 16 whatever the dilation
    ("1d-same-dilated", lambda: nn.Conv1d(4, 8, 3, dilation=2, padding="same"), (2, 4, 16),
     2 * 8 * 16 * 4 * 3, 2 * 8 * 16),
    # unbatched: torch unsqueezes to N = 1
    ("1d-unbatched", lambda: nn.Conv1d(4, 8, 3), (4, 16), 8 * 14 * 4 * 3, 8 * 14),
    # 30x30 out
    ("2d", lambda: nn.Conv2d(3, 16, 3), (2, 3, 32, 32), 2 * 16 * 30 * 30 * 3 * 3 * 3, 2 * 16 * 30 * 30),
    # H = (32 + 2 - 3)//2 + 1 = 16, W = (32 + 4 - 5)//1 + 1 = 32, kernel 3*5
    ("2d-rect", lambda: nn.Conv2d(3, 16, (3, 5), stride=(2, 1), padding=(1, 2)), (2, 3, 32, 32),
     2 * 16 * 16 * 32 * 3 * 3 * 5, 2 * 16 * 16 * 32),
    # groups=4: Cin/groups = 2
    ("2d-groups", lambda: nn.Conv2d(8, 16, 3, padding=1, groups=4), (2, 8, 10, 10),
     2 * 16 * 10 * 10 * 2 * 9, 2 * 16 * 10 * 10),
    # depthwise: Cin/groups = 1
    ("2d-depthwise", lambda: nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False), (2, 8, 10, 10),
     2 * 8 * 10 * 10 * 1 * 9, 0),
    # depthwise with channel multiplier 2: out 4x4
    ("2d-depthwise-x2", lambda: nn.Conv2d(4, 8, 3, groups=4), (1, 4, 6, 6), 1 * 8 * 4 * 4 * 1 * 9, 8 * 4 * 4),
    # dilation 2: out = 9 - 2*2 = 5
    ("2d-dilated", lambda: nn.Conv2d(3, 4, 3, dilation=2), (1, 3, 9, 9), 4 * 5 * 5 * 3 * 9, 4 * 5 * 5),
    ("2d-valid", lambda: nn.Conv2d(3, 4, 3, padding="valid"), (1, 3, 6, 6), 4 * 4 * 4 * 3 * 9, 4 * 4 * 4),
    # even kernel 'same': torch pads asymmetrically with a separate constant_pad_nd; out 6x6
    ("2d-same-even", lambda: nn.Conv2d(3, 4, 4, padding="same"), (1, 3, 6, 6), 4 * 6 * 6 * 3 * 16, 4 * 6 * 6),
    # out 3x4x5
    ("3d", lambda: nn.Conv3d(2, 4, 3), (1, 2, 5, 6, 7), 4 * 3 * 4 * 5 * 2 * 27, 4 * 3 * 4 * 5),
    # D = 3, H = W = (8 + 2 - 3)//2 + 1 = 4; Cin/groups = 2, kernel 1*3*3
    ("3d-groups-stride", lambda: nn.Conv3d(4, 8, (1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1), groups=2),
     (2, 4, 3, 8, 8), 2 * 8 * 3 * 4 * 4 * 2 * 9, 2 * 8 * 3 * 4 * 4),
]

TRANSPOSED = [
    # L = 9 + 2 + 1 = 12; MACs N*Cin*Lin*Cout*k = 2*4*10*8*3
    ("1d", lambda: nn.ConvTranspose1d(4, 8, 3), (2, 4, 10), 2 * 4 * 10 * 8 * 3, 2 * 8 * 12),
    # L = 9*2 - 2 + 3 + 1 + 1 = 21; Cout/groups = 3
    ("1d-stride-pad-outpad-groups",
     lambda: nn.ConvTranspose1d(4, 6, 4, stride=2, padding=1, output_padding=1, groups=2), (2, 4, 10),
     2 * 4 * 10 * 3 * 4, 2 * 6 * 21),
    # H = W = 6*2 + 2 + 1 = 15
    ("2d-stride", lambda: nn.ConvTranspose2d(3, 8, 3, stride=2), (2, 3, 7, 7), 2 * 3 * 7 * 7 * 8 * 9, 2 * 8 * 15 * 15),
    # H = W = 4*2 - 2 + 2*2 + 1 + 1 = 12; Cout/groups = 3
    ("2d-all",
     lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2, dilation=2),
     (1, 4, 5, 5), 4 * 5 * 5 * 3 * 9, 6 * 12 * 12),
    # depthwise, H = W = 5 - 2 + 2 + 1 = 6
    ("2d-depthwise", lambda: nn.ConvTranspose2d(8, 8, 3, padding=1, groups=8, bias=False), (2, 8, 6, 6),
     2 * 8 * 6 * 6 * 1 * 9, 0),
    # D = 2 + 2 + 1 = 5, H = W = 3*2 + 2 + 1 = 9
    ("3d", lambda: nn.ConvTranspose3d(2, 4, 3, stride=(1, 2, 2)), (1, 2, 3, 4, 4), 2 * 3 * 4 * 4 * 4 * 27,
     4 * 5 * 9 * 9),
]  # fmt: skip


@pytest.mark.parametrize("name, make, shape, macs, bias", FORWARD, ids=[c[0] for c in FORWARD])
def test_conv(name, make, shape, macs, bias):
    assert measure_cpu_meta(make(), torch.randn(shape)) == (macs, 2 * macs + bias)


@pytest.mark.parametrize("name, make, shape, macs, bias", TRANSPOSED, ids=[c[0] for c in TRANSPOSED])
def test_conv_transpose(name, make, shape, macs, bias):
    assert measure_cpu_meta(make(), torch.randn(shape)) == (macs, 2 * macs + bias)


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_padding_modes(mode, device):
    """Non-zero padding modes pad first (a free op), then convolve with padding 0: same count."""
    conv = nn.Conv2d(3, 4, 3, padding=1, padding_mode=mode)
    # out 6x6: N*Cout*H*W*Cin*k*k = 1*4*6*6*3*3*3, bias 4*6*6
    macs = 4 * 6 * 6 * 3 * 3 * 3
    assert measure_on(device, conv, torch.randn(1, 3, 6, 6)) == (macs, 2 * macs + 4 * 6 * 6)
    assert "aten.convolution" in ops_on(device, conv, torch.randn(1, 3, 6, 6))


def test_conv_transpose_output_size():
    """``output_size=`` at call time sets output_padding: products unchanged, bias follows the output."""
    conv = nn.ConvTranspose2d(3, 4, 3, stride=2)
    # default out 11x11; output_size 12x12 -> output_padding 1; MACs N*Cin*Hin*Win*Cout*k*k
    macs = 1 * 3 * 5 * 5 * 4 * 3 * 3
    counted = measure_on("cpu", lambda x: conv(x, output_size=[12, 12]), torch.randn(1, 3, 5, 5))
    assert counted == (macs, 2 * macs + 4 * 12 * 12)


def test_functional_calls():
    x = torch.randn(2, 3, 8, 8)
    w, b = torch.randn(6, 3, 3, 3), torch.randn(6)
    # out 3x3 at stride 2: (8 - 3)//2 + 1 = 3
    macs = 2 * 6 * 3 * 3 * 3 * 9
    assert measure_on("cpu", lambda x: F.conv2d(x, w, b, stride=2), x) == (macs, 2 * macs + 2 * 6 * 3 * 3)
    # conv_transpose2d with the weight read as (Cin=6, Cout/groups=3, 3, 3), input (2, 6, 3, 3)
    macs = 2 * 6 * 3 * 3 * 3 * 9
    assert measure_on("cpu", lambda y: F.conv_transpose2d(y, w), torch.randn(2, 6, 3, 3)) == (macs, 2 * macs)


@pytest.mark.parametrize(
    "stride, padding, dilation, groups",
    [(1, 0, 1, 1), (2, 1, 1, 1), (2, 1, 2, 2), (3, 2, 1, 4)],
)
def test_transposed_equals_the_conv_it_is_the_gradient_of(stride, padding, dilation, groups):
    """conv_transpose(y, W) is the input-gradient of conv(x, W): the same products, so the same MACs.

    An independent check of the transposed formula: the forward formula (out-side
    counting) on the conv, the transposed one (in-side counting) on its adjoint.
    """
    w = torch.randn(8, 8 // groups, 3, 3)
    x = torch.randn(2, 8, 13, 13)
    conv = lambda x: F.conv2d(x, w, None, stride, padding, dilation, groups)  # noqa: E731
    y = conv(x)
    out_padding = [x.shape[-1] - ((y.shape[-1] - 1) * stride - 2 * padding + dilation * 2 + 1)] * 2
    back = lambda y: F.conv_transpose2d(y, w, None, stride, padding, out_padding, groups, dilation)  # noqa: E731
    assert back(y).shape == x.shape
    assert measure_on("cpu", back, y)[0] == measure_on("cpu", conv, x)[0]


def test_deepspeed_grouped_transpose_bug_is_not_reproduced():
    """DeepSpeed takes Cout from weight.shape[1] (already Cout/groups) and divides by groups again.

    For ConvTranspose1d(4, 6, 4, groups=2) on (2, 4, 10) it reports
    N*Cin*L*(3 // 2)*k = 2*4*10*1*4 = 320 MACs; the products are 2*4*10*3*4 = 960.
    """
    macs, _ = measure_on("cpu", nn.ConvTranspose1d(4, 6, 4, groups=2), torch.randn(2, 4, 10))
    assert macs == 2 * 4 * 10 * 3 * 4 != 2 * 4 * 10 * (3 // 2) * 4


# -- kernels that aten.convolution picks internally, reached where a mode sees them -------
x6, w6, b4 = torch.randn(1, 3, 6, 6), torch.randn(4, 3, 3, 3), torch.randn(4)
CONV_MACS = 4 * 4 * 4 * 3 * 9  # 3x3 on 6x6 -> 4x4, Cin 3, Cout 4
CONV = (CONV_MACS, 2 * CONV_MACS + 4 * 4 * 4)
CONV_NOBIAS = (CONV_MACS, 2 * CONV_MACS)

RUNNABLE_KERNELS = [
    ("_convolution", lambda: aten._convolution(x6, w6, b4, [1, 1], [0, 0], [1, 1], False, [0, 0], 1,
                                               False, False, True, True), CONV),
    ("_slow_conv2d_forward", lambda: aten._slow_conv2d_forward(x6, w6, [3, 3], b4, [1, 1], [0, 0]), CONV),
    ("thnn_conv2d", lambda: aten.thnn_conv2d(x6, w6, [3, 3], b4), CONV),
    ("slow_conv_dilated2d", lambda: aten.slow_conv_dilated2d(x6, w6, [3, 3], None), CONV_NOBIAS),
    ("slow_conv3d", lambda: aten.slow_conv3d(x6[:, :, None], w6[:, :, None], [1, 3, 3], b4), CONV),
    ("mkldnn_convolution", lambda: aten.mkldnn_convolution(x6, w6, b4, [0, 0], [1, 1], [1, 1], 1), CONV),
    ("_nnpack_spatial_convolution", lambda: aten._nnpack_spatial_convolution(x6, w6, b4, [0, 0]), CONV),
    # transposed, weight (Cin=3, Cout=4, 3, 3): out 8x8, MACs N*Cin*6*6*Cout*9
    ("slow_conv_transpose2d", lambda: aten.slow_conv_transpose2d(x6, torch.randn(3, 4, 3, 3), [3, 3], b4),
     (3 * 6 * 6 * 4 * 9, 2 * 3 * 6 * 6 * 4 * 9 + 4 * 8 * 8)),
    # conv_tbc: input (T=10, N=2, Cin=3), weight (k=3, Cin=3, Cout=5), pad 1 -> T 10:
    # MACs T*N*Cout*k*Cin, bias T*N*Cout
    ("conv_tbc", lambda: aten.conv_tbc(torch.randn(10, 2, 3), torch.randn(3, 3, 5), torch.randn(5), 1),
     (10 * 2 * 5 * 3 * 3, 2 * 10 * 2 * 5 * 3 * 3 + 10 * 2 * 5)),
]  # fmt: skip


@pytest.mark.parametrize("name, call, expected", RUNNABLE_KERNELS, ids=[k[0] for k in RUNNABLE_KERNELS])
def test_backend_kernels_called_directly(name, call, expected):
    if name == "mkldnn_convolution" and not torch.backends.mkldnn.is_available():
        pytest.skip("no mkldnn in this build")
    if name == "_nnpack_spatial_convolution" and not torch.backends.nnpack.is_available():
        pytest.skip("no nnpack in this build")
    assert measure_on("cpu", call) == expected


# Kernels that only run on GPUs/MPS: call their formula with meta tensors in schema order.
m = "meta"
X, W, B = torch.empty(2, 4, 6, 6, device=m), torch.empty(8, 2, 3, 3, device=m), torch.empty(8, device=m)
OUT = torch.empty(2, 8, 4, 4, device=m)  # groups=2: Cin/groups = 2, out 4x4
G_MACS = 2 * 8 * 4 * 4 * 2 * 9  # N*Cout*H*W*(Cin/groups)*k*k
XT, WT = torch.empty(2, 8, 4, 4, device=m), torch.empty(8, 2, 3, 3, device=m)  # transposed: Cin 8, Cout/g 2
OUTT = torch.empty(2, 4, 6, 6, device=m)
GT_MACS = 2 * 8 * 4 * 4 * 2 * 9  # N*Cin*H*W*(Cout/groups)*k*k
P, S, D = [0, 0], [1, 1], [1, 1]

SCHEMA_CALLS = [
    ("convolution", aten.convolution, (OUT, X, W, B, S, P, D, False, [0, 0], 2), (G_MACS, 2 * G_MACS + OUT.numel())),
    ("convolution-T", aten.convolution, (OUTT, XT, WT, None, S, P, D, True, [0, 0], 4), (GT_MACS, 2 * GT_MACS)),
    ("convolution_overrideable", aten.convolution_overrideable, (OUTT, XT, WT, B[:4], S, P, D, True, [0, 0], 4),
     (GT_MACS, 2 * GT_MACS + OUTT.numel())),
    ("cudnn_convolution", aten.cudnn_convolution, (OUT, X, W, P, S, D, 2, False, False, True), (G_MACS, 2 * G_MACS)),
    ("cudnn_convolution_transpose", aten.cudnn_convolution_transpose,
     (OUTT, XT, WT, P, [0, 0], S, D, 4, False, False, True), (GT_MACS, 2 * GT_MACS)),
    # + bias + ReLU: 2 extra FLOPs per output element
    ("cudnn_convolution_relu", aten.cudnn_convolution_relu, (OUT, X, W, B, S, P, D, 2),
     (G_MACS, 2 * G_MACS + 2 * OUT.numel())),
    # + z, + bias, ReLU (alpha None): 3 per output element
    ("cudnn_convolution_add_relu", aten.cudnn_convolution_add_relu, (OUT, X, W, OUT, None, B, S, P, D, 2),
     (G_MACS, 2 * G_MACS + 3 * OUT.numel())),
    ("miopen_convolution", aten.miopen_convolution, (OUT, X, W, B, P, S, D, 2, False, False),
     (G_MACS, 2 * G_MACS + OUT.numel())),
    ("miopen_depthwise_convolution", aten.miopen_depthwise_convolution, (OUT, X, W, None, P, S, D, 2, False, False),
     (G_MACS, 2 * G_MACS)),
    ("miopen_convolution_transpose", aten.miopen_convolution_transpose,
     (OUTT, XT, WT, None, P, [0, 0], S, D, 4, False, False), (GT_MACS, 2 * GT_MACS)),
    ("_conv_depthwise2d", aten._conv_depthwise2d, (OUT, X, W, [3, 3], B, S, P, D), (G_MACS, 2 * G_MACS + OUT.numel())),
    ("_mps_convolution", aten._mps_convolution, (OUT, X, W, None, P, S, D, 2), (G_MACS, 2 * G_MACS)),
    ("_mps_convolution_transpose", aten._mps_convolution_transpose, (OUTT, XT, WT, P, [0, 0], S, D, 4),
     (GT_MACS, 2 * GT_MACS)),
    ("conv2d", aten.conv2d, (OUT, X, W, B, S, P, D, 2), (G_MACS, 2 * G_MACS + OUT.numel())),
    ("conv_transpose2d", aten.conv_transpose2d, (OUTT, XT, WT, None, S, P, [0, 0], 4), (GT_MACS, 2 * GT_MACS)),
]  # fmt: skip


@pytest.mark.parametrize("name, op, call, expected", SCHEMA_CALLS, ids=[c[0] for c in SCHEMA_CALLS])
def test_kernel_formulas_follow_their_schema(name, op, call, expected):
    if not hasattr(aten, op.__name__):
        pytest.skip(f"{name} not in this torch build")
    assert schema_cost(op, *call) == Cost(*expected)


def test_transposed_flag_by_keyword():
    assert schema_cost(aten.convolution, OUTT, XT, WT, None, S, P, D, transposed=True, output_padding=[0, 0],
                       groups=4) == Cost(GT_MACS, 2 * GT_MACS)  # fmt: skip
