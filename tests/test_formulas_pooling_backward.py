"""Pooling backward: ``y = pool(x); y.sum().backward()`` as users run it, hand-derived.

max pools (max, adaptive max, fractional): grad_input[argmax(w)] += grad_output[w], a
    scatter-add: 1 FLOP per grad_output element = N * C * prod(out_spatial)
average pools (avg, adaptive avg): every input receives its window's gradient / |w|:
    1 FLOP per input element = N * C * prod(in_spatial)
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import accumulate_op, layer_backward, measure_on, schema_cost
from torch import nn

from flopsight.formulas import Cost

aten = torch.ops.aten

# (id, module factory, input shape, expected backward FLOPs, the op that runs)
POOLS = [
    # max: grad_output elements. 1-D pools unsqueeze to the 2-D op. L = 8 // 2 = 4
    ("max1d", lambda: nn.MaxPool1d(2), (2, 3, 8), 2 * 3 * 4, "aten.max_pool2d_with_indices_backward"),
    # H = W = (8 + 2 - 3)//2 + 1 = 4: overlapping windows, still one add per output
    ("max2d-overlap", lambda: nn.MaxPool2d(3, stride=2, padding=1), (2, 3, 8, 8), 2 * 3 * 4 * 4,
     "aten.max_pool2d_with_indices_backward"),
    ("max3d", lambda: nn.MaxPool3d(2), (2, 3, 4, 4, 4), 2 * 3 * 2 * 2 * 2, "aten.max_pool3d_with_indices_backward"),
    ("adaptive-max1d", lambda: nn.AdaptiveMaxPool1d(3), (2, 3, 8), 2 * 3 * 3, "aten.adaptive_max_pool2d_backward"),
    ("adaptive-max2d", lambda: nn.AdaptiveMaxPool2d((3, 2)), (2, 3, 8, 8), 2 * 3 * 3 * 2,
     "aten.adaptive_max_pool2d_backward"),
    ("adaptive-max3d", lambda: nn.AdaptiveMaxPool3d(2), (2, 3, 4, 4, 4), 2 * 3 * 2 * 2 * 2,
     "aten.adaptive_max_pool3d_backward"),
    ("fractional-max2d", lambda: nn.FractionalMaxPool2d(2, output_size=3), (2, 3, 8, 8), 2 * 3 * 3 * 3,
     "aten.fractional_max_pool2d_backward"),
    # average: input elements
    ("avg1d", lambda: nn.AvgPool1d(3, stride=1, padding=1), (2, 3, 8), 2 * 3 * 8, "aten.avg_pool2d_backward"),
    ("avg2d", lambda: nn.AvgPool2d(2), (2, 3, 8, 8), 2 * 3 * 8 * 8, "aten.avg_pool2d_backward"),
    ("avg2d-divisor", lambda: nn.AvgPool2d(3, stride=2, divisor_override=2), (2, 3, 8, 8), 2 * 3 * 8 * 8,
     "aten.avg_pool2d_backward"),
    ("avg3d-ceil", lambda: nn.AvgPool3d(2, ceil_mode=True), (2, 3, 5, 5, 5), 2 * 3 * 5 * 5 * 5,
     "aten.avg_pool3d_backward"),
    ("adaptive-avg1d", lambda: nn.AdaptiveAvgPool1d(3), (2, 3, 8), 2 * 3 * 8, "aten._adaptive_avg_pool2d_backward"),
    ("adaptive-avg2d", lambda: nn.AdaptiveAvgPool2d(3), (2, 3, 8, 8), 2 * 3 * 8 * 8,
     "aten._adaptive_avg_pool2d_backward"),
    ("adaptive-avg3d", lambda: nn.AdaptiveAvgPool3d(2), (2, 3, 4, 4, 4), 2 * 3 * 4 * 4 * 4,
     "aten._adaptive_avg_pool3d_backward"),
    # global pooling runs as aten.mean: its backward is expand + a divide per input element,
    # the same count as the adaptive pool's (elementwise family)
    ("adaptive-avg2d-global", lambda: nn.AdaptiveAvgPool2d(1), (2, 3, 8, 8), 2 * 3 * 8 * 8, "aten.div"),
    # F.interpolate(mode='area') is an adaptive average pool
    ("area", lambda: nn.Upsample(size=(4, 4), mode="area"), (2, 3, 8, 8), 2 * 3 * 8 * 8,
     "aten._adaptive_avg_pool2d_backward"),
]  # fmt: skip


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("name, make, shape, flops, op", POOLS, ids=[c[0] for c in POOLS])
def test_pool_backward(name, make, shape, flops, op, device):
    counted, ops = layer_backward(device, make(), torch.randn(shape, requires_grad=True))
    assert counted == (0, flops)
    assert ops[op][1:] == (0, flops)


def test_fractional_max3d_backward_cpu():
    """No meta kernel for fractional_max_pool3d_backward in torch: CPU only."""
    counted, ops = layer_backward("cpu", nn.FractionalMaxPool3d(2, output_size=2), torch.randn(2, 3, 5, 5, 5,
                                                                                               requires_grad=True))
    assert counted == (0, 2 * 3 * 2 * 2 * 2)  # grad_output elements
    assert "aten.fractional_max_pool3d_backward" in ops


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_max_pool_with_indices_and_unpool(device):
    """MaxUnpool's backward is a gather (free); the pool's is one add per pooled element."""
    pool, unpool = nn.MaxPool2d(2, return_indices=True), nn.MaxUnpool2d(2)

    def pool_unpool(x):
        return unpool(*pool(x))

    counted, ops = layer_backward(device, pool_unpool, torch.randn(2, 3, 8, 8, requires_grad=True))
    assert counted == (0, 2 * 3 * 4 * 4)
    assert ops["aten.max_pool2d_with_indices_backward"][1:] == (0, 2 * 3 * 4 * 4)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_functional_pools(device, backend):
    def pools(x):
        return F.max_pool2d(x, 2) + F.avg_pool2d(x, 2)

    counted, ops = layer_backward(device, pools, torch.randn(2, 3, 8, 8, requires_grad=True))
    # max: 2*3*4*4 outputs; avg: 2*3*8*8 inputs; the engine sums x's two gradients: 2*3*8*8 adds
    assert ops["aten.max_pool2d_with_indices_backward"][1:] == (0, 2 * 3 * 4 * 4)
    assert ops["aten.avg_pool2d_backward"][1:] == (0, 2 * 3 * 8 * 8)
    assert ops[accumulate_op(backend, device)][1:] == (0, 2 * 3 * 8 * 8)
    assert counted == (0, 2 * 3 * 4 * 4 + 2 * 2 * 3 * 8 * 8)


# -- kernels reached where a mode sees them -----------------------------------------------
m = "meta"
GO, XM = torch.empty(2, 3, 4, 4, device=m), torch.empty(2, 3, 8, 8, device=m)

SCHEMA_CALLS = [
    ("max_pool2d_backward", aten.max_pool2d_backward, (None, GO, XM, [2, 2]), 2 * 3 * 4 * 4),
    ("mkldnn_max_pool2d_backward", aten.mkldnn_max_pool2d_backward, (None, GO, GO, XM, [2, 2]), 2 * 3 * 4 * 4),
    ("mkldnn_max_pool3d_backward", aten.mkldnn_max_pool3d_backward,
     (None, GO[..., None], GO[..., None], XM[..., None], [2, 2, 1]), 2 * 3 * 4 * 4),
    ("mkldnn_adaptive_avg_pool2d_backward", aten.mkldnn_adaptive_avg_pool2d_backward, (None, GO, XM), 2 * 3 * 8 * 8),
    ("adaptive_avg_pool3d_backward.grad_input", aten.adaptive_avg_pool3d_backward,
     (None, GO[..., None], XM[..., None]), 2 * 3 * 8 * 8),
]  # fmt: skip


@pytest.mark.parametrize("name, op, call, flops", SCHEMA_CALLS, ids=[c[0] for c in SCHEMA_CALLS])
def test_backward_kernel_formulas_follow_their_schema(name, op, call, flops):
    assert schema_cost(op, *call) == Cost(0, flops)


def test_grad_input_overload_runs_on_cpu():
    """The ``.grad_input`` (out=) overload: the same count from the same arguments."""
    x = torch.randn(2, 3, 8, 8)
    g = torch.randn(2, 3, 4, 4)
    buf = torch.empty_like(x)
    call = lambda: aten.avg_pool2d_backward.grad_input(g, x, [2, 2], [2, 2], [0, 0], False, True, None,  # noqa: E731
                                                        grad_input=buf)  # fmt: skip
    assert measure_on("cpu", call) == (0, 2 * 3 * 8 * 8)
