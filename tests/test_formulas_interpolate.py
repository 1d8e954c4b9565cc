"""Interpolation formulas: 1 FLOP per output element, batch and channels included.

Every expected value is the output's N * C * prod(out_spatial), written out per case.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import measure_cpu_meta, measure_on, ops_on, require, torch_op
from torch import nn


def interp(**kw):
    return lambda x: F.interpolate(x, **kw)


X1, X2, X3 = (2, 3, 8), (2, 3, 8, 8), (2, 3, 4, 4, 4)

# (id, call, input shape, expected FLOPs = output elements, op that runs)
CASES = [
    ("nearest1d-size", interp(size=12), X1, 2 * 3 * 12, "aten.upsample_nearest1d"),
    ("nearest1d-scale", interp(scale_factor=2), X1, 2 * 3 * 16, "aten.upsample_nearest1d"),
    ("nearest2d-size", interp(size=(12, 10)), X2, 2 * 3 * 12 * 10, "aten.upsample_nearest2d"),
    ("nearest2d-scale", interp(scale_factor=2), X2, 2 * 3 * 16 * 16, "aten.upsample_nearest2d"),
    ("nearest2d-downscale", interp(scale_factor=0.5), X2, 2 * 3 * 4 * 4, "aten.upsample_nearest2d"),
    ("nearest3d-size", interp(size=6), X3, 2 * 3 * 6 * 6 * 6, "aten.upsample_nearest3d"),
    ("nearest3d-scale", interp(scale_factor=2), X3, 2 * 3 * 8 * 8 * 8, "aten.upsample_nearest3d"),
    ("nearest-exact1d", interp(size=12, mode="nearest-exact"), X1, 2 * 3 * 12, "aten._upsample_nearest_exact1d"),
    ("nearest-exact2d", interp(scale_factor=2, mode="nearest-exact"), X2, 2 * 3 * 16 * 16,
     "aten._upsample_nearest_exact2d"),
    ("nearest-exact3d", interp(size=(5, 6, 7), mode="nearest-exact"), X3, 2 * 3 * 5 * 6 * 7,
     "aten._upsample_nearest_exact3d"),
    ("linear-size", interp(size=12, mode="linear"), X1, 2 * 3 * 12, "aten.upsample_linear1d"),
    ("linear-scale-corners", interp(scale_factor=2, mode="linear", align_corners=True), X1, 2 * 3 * 16,
     "aten.upsample_linear1d"),
    ("bilinear-size", interp(size=(12, 10), mode="bilinear"), X2, 2 * 3 * 12 * 10, "aten.upsample_bilinear2d"),
    ("bilinear-scale-corners", interp(scale_factor=2, mode="bilinear", align_corners=True), X2, 2 * 3 * 16 * 16,
     "aten.upsample_bilinear2d"),
    # floor(8 * 1.5) = 12
    ("bilinear-scale-1.5", interp(scale_factor=1.5, mode="bilinear"), X2, 2 * 3 * 12 * 12,
     "aten.upsample_bilinear2d"),
    ("bilinear-recompute", interp(scale_factor=1.5, mode="bilinear", recompute_scale_factor=True), X2,
     2 * 3 * 12 * 12, "aten.upsample_bilinear2d"),
    # per-dim factors: 8*2 x 8*0.5
    ("bilinear-scale-tuple", interp(scale_factor=(2, 0.5), mode="bilinear"), X2, 2 * 3 * 16 * 4,
     "aten.upsample_bilinear2d"),
    ("bilinear-antialias", interp(size=(5, 5), mode="bilinear", antialias=True), X2, 2 * 3 * 5 * 5,
     "aten._upsample_bilinear2d_aa"),
    ("bicubic-size", interp(size=(12, 10), mode="bicubic"), X2, 2 * 3 * 12 * 10, "aten.upsample_bicubic2d"),
    ("bicubic-scale", interp(scale_factor=2, mode="bicubic", align_corners=False), X2, 2 * 3 * 16 * 16,
     "aten.upsample_bicubic2d"),
    ("bicubic-antialias", interp(scale_factor=0.5, mode="bicubic", antialias=True), X2, 2 * 3 * 4 * 4,
     "aten._upsample_bicubic2d_aa"),
    ("lanczos-antialias", interp(size=(5, 6), mode="lanczos", antialias=True), X2, 2 * 3 * 5 * 6,
     "aten._upsample_lanczos2d_aa"),
    ("trilinear-size", interp(size=(6, 5, 3), mode="trilinear"), X3, 2 * 3 * 6 * 5 * 3,
     "aten.upsample_trilinear3d"),
    ("trilinear-scale", interp(scale_factor=2, mode="trilinear", align_corners=True), X3, 2 * 3 * 8 * 8 * 8,
     "aten.upsample_trilinear3d"),
    ("Upsample-nearest", nn.Upsample(scale_factor=2), X2, 2 * 3 * 16 * 16, "aten.upsample_nearest2d"),
    ("Upsample-bilinear-size", nn.Upsample(size=(16, 12), mode="bilinear"), X2, 2 * 3 * 16 * 12,
     "aten.upsample_bilinear2d"),
    ("Upsample-trilinear", nn.Upsample(scale_factor=(2, 1, 3), mode="trilinear"), X3, 2 * 3 * 8 * 4 * 12,
     "aten.upsample_trilinear3d"),
    ("UpsamplingNearest2d", nn.UpsamplingNearest2d(size=12), X2, 2 * 3 * 12 * 12, "aten.upsample_nearest2d"),
    ("UpsamplingBilinear2d", nn.UpsamplingBilinear2d(scale_factor=2), X2, 2 * 3 * 16 * 16,
     "aten.upsample_bilinear2d"),
]  # fmt: skip


@pytest.mark.parametrize("name, call, shape, flops, op", CASES, ids=[c[0] for c in CASES])
def test_interpolate(name, call, shape, flops, op):
    require(torch_op(op))  # 2.9 and 2.11 have no lanczos (antialias is bilinear and bicubic only)
    x = torch.randn(shape)
    assert measure_cpu_meta(call, x) == (0, flops)
    assert ops_on("cpu", call, x)[op] == (1, 0, flops)


def test_size_counts_batch_and_channels_unlike_deepspeed():
    """DeepSpeed counts ``prod(size)`` for ``size=``: 16*16 = 256 here, for 8*64*16*16 outputs."""
    x = torch.randn(8, 64, 8, 8)
    by_size = measure_on("cpu", interp(size=(16, 16)), x)
    assert by_size == (0, 8 * 64 * 16 * 16)
    assert by_size == measure_on("cpu", interp(scale_factor=2), x)  # same output, same count


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "bilinear", "bicubic"])
def test_integer_images_cost_nothing(mode):
    x = torch.randint(0, 255, (1, 3, 4, 4), dtype=torch.uint8)
    assert measure_cpu_meta(interp(size=(8, 8), mode=mode), x) == (0, 0)


# grid_sample: 1 FLOP per output element N*C*prod(grid spatial)
GRID = [
    ("2d-bilinear", (2, 3, 8, 8), (2, 5, 7, 2), {}, 2 * 3 * 5 * 7),
    ("2d-nearest", (2, 3, 8, 8), (2, 5, 7, 2), {"mode": "nearest"}, 2 * 3 * 5 * 7),
    ("2d-bicubic-border", (2, 3, 8, 8), (2, 5, 7, 2), {"mode": "bicubic", "padding_mode": "border"}, 2 * 3 * 5 * 7),
    ("3d-bilinear", (1, 2, 4, 4, 4), (1, 3, 3, 3, 3), {}, 1 * 2 * 3 * 3 * 3),
    ("3d-nearest-reflection", (1, 2, 4, 4, 4), (1, 2, 3, 4, 3), {"mode": "nearest", "padding_mode": "reflection"},
     1 * 2 * 2 * 3 * 4),
]  # fmt: skip


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("name, shape, grid, kw, flops", GRID, ids=[g[0] for g in GRID])
def test_grid_sample(name, shape, grid, kw, flops, device):
    call = lambda x, g: F.grid_sample(x, g, align_corners=False, **kw)  # noqa: E731
    assert measure_on(device, call, torch.randn(shape), torch.rand(grid) * 2 - 1) == (0, flops)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize(
    "theta, size, macs",
    [
        # grid (2, 8, 8, 2): each coordinate is a row of theta (3 entries) times (x, y, 1)
        ((2, 2, 3), [2, 3, 8, 8], 2 * 8 * 8 * 2 * 3),
        # grid (1, 2, 3, 4, 3): rows of 4 entries times (x, y, z, 1)
        ((1, 3, 4), [1, 1, 2, 3, 4], 1 * 2 * 3 * 4 * 3 * 4),
    ],
)
def test_affine_grid(theta, size, macs, device):
    affine_grid = lambda t: F.affine_grid(t, size, align_corners=False)  # noqa: E731
    assert measure_on(device, affine_grid, torch.randn(theta)) == (macs, 2 * macs)
