"""Interpolation backward: ``y = F.interpolate(x, ...); y.sum().backward()``, hand-derived.

Resampling is linear, out = W x, so grad_input = W^T grad_output: the same products as
the forward, 1 FLOP per grad_output element = N * C * prod(out_spatial), every mode.
grid_sample: grad_input the same (1 per grad_output element); grad_grid 2 per grad_output
element (derivative of the sample with respect to its point, times the gradient).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import has_kernel, layer_backward, measure_on, require, schema_cost, torch_op
from torch import nn

from flopsight.formulas import Cost

aten = torch.ops.aten


def interp(**kw):
    return lambda x: F.interpolate(x, **kw)


X1, X2, X3 = (2, 3, 8), (2, 3, 8, 8), (2, 3, 4, 4, 4)

# (id, call, input shape, expected backward FLOPs = grad_output elements, op that runs)
CASES = [
    ("nearest1d", interp(size=12), X1, 2 * 3 * 12, "aten.upsample_nearest1d_backward"),
    ("nearest2d-downscale", interp(scale_factor=0.5), X2, 2 * 3 * 4 * 4, "aten.upsample_nearest2d_backward"),
    ("nearest3d", interp(scale_factor=2), X3, 2 * 3 * 8 * 8 * 8, "aten.upsample_nearest3d_backward"),
    ("nearest-exact1d", interp(size=12, mode="nearest-exact"), X1, 2 * 3 * 12,
     "aten._upsample_nearest_exact1d_backward"),
    ("nearest-exact2d", interp(scale_factor=2, mode="nearest-exact"), X2, 2 * 3 * 16 * 16,
     "aten._upsample_nearest_exact2d_backward"),
    ("nearest-exact3d", interp(size=(5, 6, 7), mode="nearest-exact"), X3, 2 * 3 * 5 * 6 * 7,
     "aten._upsample_nearest_exact3d_backward"),
    ("linear-corners", interp(scale_factor=2, mode="linear", align_corners=True), X1, 2 * 3 * 16,
     "aten.upsample_linear1d_backward"),
    ("bilinear-size", interp(size=(12, 10), mode="bilinear"), X2, 2 * 3 * 12 * 10,
     "aten.upsample_bilinear2d_backward"),
    ("bilinear-antialias", interp(size=(5, 5), mode="bilinear", antialias=True), X2, 2 * 3 * 5 * 5,
     "aten._upsample_bilinear2d_aa_backward"),
    ("bicubic", interp(scale_factor=2, mode="bicubic"), X2, 2 * 3 * 16 * 16, "aten.upsample_bicubic2d_backward"),
    ("bicubic-antialias", interp(scale_factor=0.5, mode="bicubic", antialias=True), X2, 2 * 3 * 4 * 4,
     "aten._upsample_bicubic2d_aa_backward"),
    ("lanczos-antialias", interp(size=(5, 6), mode="lanczos", antialias=True), X2, 2 * 3 * 5 * 6,
     "aten._upsample_lanczos2d_aa_backward"),
    ("trilinear", interp(size=(6, 5, 3), mode="trilinear"), X3, 2 * 3 * 6 * 5 * 3,
     "aten.upsample_trilinear3d_backward"),
    ("Upsample-nearest", nn.Upsample(scale_factor=2), X2, 2 * 3 * 16 * 16, "aten.upsample_nearest2d_backward"),
    ("Upsample-bilinear-size", nn.Upsample(size=(16, 12), mode="bilinear"), X2, 2 * 3 * 16 * 12,
     "aten.upsample_bilinear2d_backward"),
    ("UpsamplingBilinear2d", nn.UpsamplingBilinear2d(scale_factor=2), X2, 2 * 3 * 16 * 16,
     "aten.upsample_bilinear2d_backward"),
]  # fmt: skip


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("name, call, shape, flops, op", CASES, ids=[c[0] for c in CASES])
def test_interpolate_backward(name, call, shape, flops, op, device):
    require(torch_op(op))  # 2.9 and 2.11 have no lanczos (antialias is bilinear and bicubic only)
    counted, ops = layer_backward(device, call, torch.randn(shape, requires_grad=True))
    assert counted == (0, flops)
    assert ops[op] == (1, 0, flops)


# grid_sample: out (N, C, *grid spatial); grad_input 1 and grad_grid 2 per grad_output element
GRID = [
    ("2d-bilinear", (2, 3, 8, 8), (2, 5, 7, 2), {}, 2 * 3 * 5 * 7, "aten.grid_sampler_2d_backward"),
    ("2d-nearest", (2, 3, 8, 8), (2, 5, 7, 2), {"mode": "nearest"}, 2 * 3 * 5 * 7, "aten.grid_sampler_2d_backward"),
    ("2d-bicubic-border", (2, 3, 8, 8), (2, 5, 7, 2), {"mode": "bicubic", "padding_mode": "border"}, 2 * 3 * 5 * 7,
     "aten.grid_sampler_2d_backward"),
    ("3d-bilinear", (1, 2, 4, 4, 4), (1, 3, 3, 3, 3), {}, 1 * 2 * 3 * 3 * 3, "aten.grid_sampler_3d_backward"),
]  # fmt: skip


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("x_grad, grid_grad", [(True, True), (True, False), (False, True)],
                         ids=["both", "input-only", "grid-only"])  # fmt: skip
@pytest.mark.parametrize("name, shape, grid, kw, n, op", GRID, ids=[g[0] for g in GRID])
def test_grid_sample_backward(name, shape, grid, kw, n, op, x_grad, grid_grad, device):
    call = lambda x, g: F.grid_sample(x, g, align_corners=False, **kw)  # noqa: E731
    x = torch.randn(shape, requires_grad=x_grad)
    g = (torch.rand(grid) * 2 - 1).requires_grad_(grid_grad)
    counted, ops = layer_backward(device, call, x, g)
    flops = n * int(x_grad) + 2 * n * int(grid_grad)
    assert counted == (0, flops)
    assert ops[op] == (1, 0, flops)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_affine_grid_backward_is_counted_op_by_op(device):
    """affine_grid_generator_backward is CompositeImplicitAutograd: its decomposition rebuilds
    the base grid (linspace, scaled: a mul and a div per linspace element) and takes
    grad_theta = base^T @ grad_grid with a bmm, N*(H*W)*3*2 MACs -- the forward's count."""
    affine_grid = lambda t: F.affine_grid(t, [2, 3, 5, 4], align_corners=False)  # noqa: E731
    counted, ops = layer_backward(device, affine_grid, torch.randn(2, 2, 3, requires_grad=True))
    macs = 2 * 5 * 4 * 3 * 2
    assert ops["aten.bmm"][1:] == (macs, 2 * macs)
    assert counted == (macs, 2 * macs + 2 * (4 + 5))  # linspace of W=4 and of H=5: mul + div each


# -- kernels reached where a mode sees them -----------------------------------------------
m = "meta"
GO = torch.empty(2, 3, 5, 7, device=m)  # grad_output of a grid_sample on a (2, 5, 7, 2) grid
XM, GRIDM = torch.empty(2, 3, 8, 8, device=m), torch.empty(2, 5, 7, 2, device=m)
N = 2 * 3 * 5 * 7

SCHEMA_CALLS = [
    ("grid_sampler_2d_backward-input", aten.grid_sampler_2d_backward, (None, GO, XM, GRIDM, 0, 0, False, [True, False]),
     (0, N)),
    ("grid_sampler_2d_backward-grid", aten.grid_sampler_2d_backward, (None, GO, XM, GRIDM, 0, 0, False, [False, True]),
     (0, 2 * N)),
    ("_grid_sampler_2d_cpu_fallback_backward", aten._grid_sampler_2d_cpu_fallback_backward,
     (None, GO, XM, GRIDM, 0, 0, False), (0, 3 * N)),
    ("cudnn_grid_sampler_backward", aten.cudnn_grid_sampler_backward, (None, XM, GRIDM, GO), (0, 3 * N)),
    # grad_theta: grid (2, 5, 7, 2), 3 homogeneous coordinates: 2*5*7*2*3 MACs
    ("affine_grid_generator_backward", aten.affine_grid_generator_backward,
     (None, torch.empty(2, 5, 7, 2, device=m), [2, 3, 5, 7], False), (2 * 5 * 7 * 2 * 3, 4 * 5 * 7 * 2 * 3)),
    ("affine_grid_generator_backward-3d", aten.affine_grid_generator_backward,
     (None, torch.empty(1, 2, 3, 4, 3, device=m), [1, 1, 2, 3, 4], False), (2 * 3 * 4 * 3 * 4, 2 * 2 * 3 * 4 * 3 * 4)),
    ("cudnn_affine_grid_generator_backward", aten.cudnn_affine_grid_generator_backward,
     (None, torch.empty(2, 5, 7, 2, device=m), 2, 3, 5, 7), (2 * 5 * 7 * 2 * 3, 4 * 5 * 7 * 2 * 3)),
    ("upsample_bilinear2d_backward-keywords", aten.upsample_bilinear2d_backward,
     (None, torch.empty(2, 3, 16, 16, device=m), [16, 16], [2, 3, 8, 8], False), (0, 2 * 3 * 16 * 16)),
]  # fmt: skip


@pytest.mark.parametrize("name, op, call, expected", SCHEMA_CALLS, ids=[c[0] for c in SCHEMA_CALLS])
def test_backward_kernel_formulas_follow_their_schema(name, op, call, expected):
    assert schema_cost(op, *call) == Cost(*expected)


def test_cpu_fallback_grid_sampler_backward_runs(backend):
    name = "aten::_grid_sampler_2d_cpu_fallback_backward"
    if backend != "native" and has_kernel(name, "CompositeImplicitAutograd"):
        # the dispatch mode sees only its parts (zeros_like, empty_like); the native backend records it whole
        pytest.skip(f"torch {torch.__version__}'s {name} is CompositeImplicitAutograd: "
                    "a dispatch mode (the Python backend) sees only its parts, which cost 0")
    x, g = torch.randn(1, 2, 6, 6), torch.rand(1, 3, 4, 2) * 2 - 1
    go = torch.randn(1, 2, 3, 4)
    call = lambda: aten._grid_sampler_2d_cpu_fallback_backward(go, x, g, 0, 0, False)  # noqa: E731
    assert measure_on("cpu", call) == (0, 3 * 1 * 2 * 3 * 4)  # both gradients: 1 + 2 per grad_output element
