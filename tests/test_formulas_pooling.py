"""Pooling formulas: 1 FLOP per input element (DeepSpeed's convention), 0 MACs.

Expected values are the input's N*C*prod(spatial), written out per case; adaptive average
pools add the output's N*C*prod(out_spatial) (a divide per output, like aten.mean).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import formula_of, measure_cpu_meta, measure_on, ops_on, schema_cost
from torch import nn

from flopsight.formulas import Cost

aten = torch.ops.aten


# (id, module factory, input shape, expected FLOPs = input elements)
POOLS = [
    ("max1d", lambda: nn.MaxPool1d(2), (2, 3, 8), 2 * 3 * 8),
    ("max1d-indices", lambda: nn.MaxPool1d(3, stride=2, padding=1, return_indices=True), (2, 3, 9), 2 * 3 * 9),
    ("max2d", lambda: nn.MaxPool2d(3, stride=2, padding=1), (2, 3, 8, 8), 2 * 3 * 8 * 8),
    ("max2d-dilated-ceil-indices", lambda: nn.MaxPool2d(2, dilation=2, ceil_mode=True, return_indices=True),
     (2, 3, 9, 9), 2 * 3 * 9 * 9),
    ("max2d-unbatched", lambda: nn.MaxPool2d(2), (3, 8, 8), 3 * 8 * 8),
    ("max3d", lambda: nn.MaxPool3d(2), (2, 3, 4, 4, 4), 2 * 3 * 4 * 4 * 4),
    ("avg1d", lambda: nn.AvgPool1d(3, stride=1, padding=1, count_include_pad=False), (2, 3, 8), 2 * 3 * 8),
    ("avg2d", lambda: nn.AvgPool2d(2), (2, 3, 8, 8), 2 * 3 * 8 * 8),
    ("avg2d-divisor", lambda: nn.AvgPool2d(3, stride=2, divisor_override=2), (2, 3, 8, 8), 2 * 3 * 8 * 8),
    ("avg3d-ceil", lambda: nn.AvgPool3d(2, ceil_mode=True), (2, 3, 5, 5, 5), 2 * 3 * 5 * 5 * 5),
    # adaptive average pools: + 1 divide per output element (like aten.mean)
    ("adaptive-avg1d", lambda: nn.AdaptiveAvgPool1d(3), (2, 3, 8), 2 * 3 * 8 + 2 * 3 * 3),
    ("adaptive-avg2d", lambda: nn.AdaptiveAvgPool2d(3), (2, 3, 8, 8), 2 * 3 * 8 * 8 + 2 * 3 * 3 * 3),
    ("adaptive-avg2d-1x2", lambda: nn.AdaptiveAvgPool2d((1, 2)), (2, 3, 8, 8), 2 * 3 * 8 * 8 + 2 * 3 * 1 * 2),
    ("adaptive-avg2d-None", lambda: nn.AdaptiveAvgPool2d((None, 1)), (2, 3, 8, 8), 2 * 3 * 8 * 8 + 2 * 3 * 8 * 1),
    ("adaptive-avg2d-upsampling", lambda: nn.AdaptiveAvgPool2d(5), (2, 3, 3, 3), 2 * 3 * 3 * 3 + 2 * 3 * 5 * 5),
    ("adaptive-avg3d", lambda: nn.AdaptiveAvgPool3d(2), (2, 3, 4, 4, 4), 2 * 3 * 4 * 4 * 4 + 2 * 3 * 2 * 2 * 2),
    ("adaptive-max1d", lambda: nn.AdaptiveMaxPool1d(3), (2, 3, 8), 2 * 3 * 8),
    ("adaptive-max2d-indices", lambda: nn.AdaptiveMaxPool2d(3, return_indices=True), (2, 3, 8, 8), 2 * 3 * 8 * 8),
    ("adaptive-max3d", lambda: nn.AdaptiveMaxPool3d(2), (2, 3, 4, 4, 4), 2 * 3 * 4 * 4 * 4),
    ("fractional-max2d", lambda: nn.FractionalMaxPool2d(2, output_size=3), (2, 3, 8, 8), 2 * 3 * 8 * 8),
    ("fractional-max3d", lambda: nn.FractionalMaxPool3d(2, output_ratio=0.5), (1, 2, 6, 6, 6), 1 * 2 * 6 * 6 * 6),
]  # fmt: skip


@pytest.mark.parametrize("name, make, shape, flops", POOLS, ids=[p[0] for p in POOLS])
def test_pool(name, make, shape, flops):
    assert measure_cpu_meta(make(), torch.randn(shape)) == (0, flops)


@pytest.mark.parametrize(
    "call, flops",
    [
        (lambda x: F.max_pool2d(x, 2), 2 * 3 * 8 * 8),
        (lambda x: F.avg_pool2d(x, 2), 2 * 3 * 8 * 8),
        (lambda x: torch.max_pool2d(x, 2), 2 * 3 * 8 * 8),
        (lambda x: aten.max_pool2d(x, [2, 2]), 2 * 3 * 8 * 8),
        (lambda x: F.adaptive_avg_pool2d(x, 2), 2 * 3 * 8 * 8 + 2 * 3 * 2 * 2),
        (lambda x: aten.adaptive_avg_pool2d(x, [2, 2]), 2 * 3 * 8 * 8 + 2 * 3 * 2 * 2),
        # mode='area' is an adaptive average pool: 8x8 -> 4x4
        (lambda x: F.interpolate(x, size=(4, 4), mode="area"), 2 * 3 * 8 * 8 + 2 * 3 * 4 * 4),
    ],
)
def test_functional_forms(call, flops):
    assert measure_on("cpu", call, torch.randn(2, 3, 8, 8)) == (0, flops)


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8])
def test_integer_input_costs_nothing(dtype):
    x = torch.randint(0, 5, (1, 2, 4, 4), dtype=dtype)
    assert measure_on("cpu", lambda x: F.max_pool2d(x, 2), x) == (0, 0)


@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_global_average_pool_is_a_mean_with_the_same_cost(layout, device):
    """AdaptiveAvgPool2d(1) dispatches aten.mean; it must follow the adaptive rule all the same.

    The rule: an add per input element, a divide per output element.
    """
    x = torch.randn(2, 3, 8, 8).contiguous(memory_format=layout)
    assert "aten.mean" in ops_on(device, nn.AdaptiveAvgPool2d(1), x)
    assert measure_on(device, nn.AdaptiveAvgPool2d(1), x) == (0, 2 * 3 * 8 * 8 + 2 * 3 * 1 * 1)
    assert "aten._adaptive_avg_pool2d" in ops_on(device, nn.AdaptiveAvgPool2d(2), x)
    assert measure_on(device, nn.AdaptiveAvgPool2d(2), x) == (0, 2 * 3 * 8 * 8 + 2 * 3 * 2 * 2)


@pytest.mark.parametrize(
    "make, shape, flops",
    [
        (lambda: nn.AdaptiveAvgPool1d(1), (2, 3, 8), 2 * 3 * 8 + 2 * 3),
        (lambda: nn.AdaptiveAvgPool3d(1), (2, 3, 4, 4, 4), 2 * 3 * 4 * 4 * 4 + 2 * 3),
    ],
)
def test_global_average_pool_1d_3d(make, shape, flops):
    assert measure_cpu_meta(make(), torch.randn(shape)) == (0, flops)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_global_average_pool_dispatches_mean_on_cpu_and_meta(device):
    """Whatever the reduction family counts, both devices take the same path."""
    x = torch.randn(2, 3, 8, 8)
    assert "aten.mean" in ops_on(device, nn.AdaptiveAvgPool2d(1), x)
    assert "aten._adaptive_avg_pool2d" in ops_on(device, nn.AdaptiveAvgPool2d(2), x)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize(
    "make, shape, op, pooled",
    [
        # pow, avg_pool, sign/abs/relu/mul, pow: the avg_pool sees the whole input
        (lambda: nn.LPPool1d(2, 2), (2, 3, 8), "aten.avg_pool2d", 2 * 3 * 8),
        (lambda: nn.LPPool2d(3, 2), (2, 3, 8, 8), "aten.avg_pool2d", 2 * 3 * 8 * 8),
        (lambda: nn.LPPool3d(2, 2), (2, 3, 4, 4, 4), "aten.avg_pool3d", 2 * 3 * 4 * 4 * 4),
    ],
)
def test_lp_pool_is_composite(make, shape, op, pooled, device):
    """LPPool is pow -> avg_pool -> ... : the pooling part is counted here, the rest by its families."""
    x = torch.randn(shape)
    counted = ops_on(device, make(), x)
    assert counted[op] == (1, 0, pooled)
    assert "aten.pow" in counted
    assert measure_on(device, make(), x) == measure_on("cpu", make(), x)


@pytest.mark.parametrize(
    "pool, unpool, shape",
    [
        (nn.MaxPool1d(2, return_indices=True), nn.MaxUnpool1d(2), (2, 3, 8)),
        (nn.MaxPool2d(2, return_indices=True), nn.MaxUnpool2d(2), (2, 3, 8, 8)),
        (nn.MaxPool3d(2, return_indices=True), nn.MaxUnpool3d(2), (2, 3, 4, 4, 4)),
    ],
)
def test_max_unpool_is_free(pool, unpool, shape):
    out, idx = pool(torch.randn(shape))
    assert measure_cpu_meta(unpool, out, idx) == (0, 0)
    assert any(name.startswith("aten.max_unpool") for name in ops_on("cpu", unpool, out, idx))


X = torch.empty(2, 3, 4, 4, 4, device="meta")
N_IN = 2 * 3 * 4 * 4 * 4
OUT = torch.empty(2, 3, 2, 2, 2, device="meta")  # what a 2x pool of X gives


@pytest.mark.parametrize(
    "op, call, flops",
    [
        (aten.max_pool1d, ([2],), N_IN),
        (aten.max_pool1d_with_indices, ([2],), N_IN),
        (aten.max_pool3d, ([2, 2, 2],), N_IN),
        (aten.mkldnn_max_pool2d, ([2, 2],), N_IN),
        (aten.mkldnn_max_pool3d, ([2, 2, 2],), N_IN),
        (aten.adaptive_max_pool1d, ([2],), N_IN),
        (aten.avg_pool1d, ([2],), N_IN),
        # adaptive average: + 1 per output element (2*3*2*2*2)
        (aten.mkldnn_adaptive_avg_pool2d, ([2, 2],), N_IN + 2 * 3 * 2 * 2 * 2),
        (aten.adaptive_avg_pool1d, ([2],), N_IN + 2 * 3 * 2 * 2 * 2),
        (aten.adaptive_avg_pool3d, ([2, 2, 2],), N_IN + 2 * 3 * 2 * 2 * 2),
    ],
)
def test_front_doors_and_backend_kernels(op, call, flops):
    """Ops a mode sees only on some backends or tracing levels, in schema order or by keyword."""
    assert schema_cost(op, OUT, X, *call) == Cost(0, flops)
    assert formula_of(op)(OUT, self=X) == Cost(0, flops)


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")
def test_quantized_max_pool_is_integer_arithmetic():
    q = torch.quantize_per_tensor(torch.randn(1, 2, 4, 4), 0.1, 0, torch.quint8)
    assert schema_cost(aten.quantized_max_pool2d, None, q, [2, 2]) == Cost()
