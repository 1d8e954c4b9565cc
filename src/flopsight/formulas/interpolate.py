"""Interpolation: ``F.interpolate``/``nn.Upsample`` in every mode, ``grid_sample``, ``affine_grid``.

Convention: **1 FLOP per output element, batch and channels included**, 0 MACs, for every
resampling mode (nearest, nearest-exact, linear, bilinear, bicubic, trilinear, lanczos,
with or without ``antialias``/``align_corners``). It is DeepSpeed's per-element constant, applied
to the tensor that is really produced: ``numel(out) = N * C * prod(out_spatial)``, so
``size=`` and ``scale_factor=`` give the same count for the same output. DeepSpeed gets
this wrong for ``size=``: it counts ``prod(size)``, dropping batch and channels (a
``(8, 64, 32, 32) -> size=(64, 64)`` upsample is 4096 FLOPs there, 2,097,152 here); with
``scale_factor=`` it does count ``numel(input) * scale**d``, which is the output size.
Integer images (``uint8`` nearest/bilinear) cost 0 FLOPs like any integer op.

``F.interpolate`` dispatches one ``upsample_*`` op (``_upsample_*_aa`` with antialias,
``_upsample_nearest_exact*`` for 'nearest-exact') on CPU, CUDA and meta alike; only
``mode='area'`` is different: it *is* ``adaptive_avg_pool``, and is counted as that pool
(1 FLOP per input element, see :mod:`flopsight.formulas.pooling`).

``grid_sample`` is interpolation at arbitrary points: same convention, 1 FLOP per output
element (DeepSpeed does not count it). ``affine_grid``'s generator is a batched product of
each output point's homogeneous coordinates with ``theta``: ``numel(grid) * theta.shape[-1]``
MACs. ``pixel_shuffle``, ``pixel_unshuffle`` and ``channel_shuffle`` only move data: they
are zero-cost ops, registered in :mod:`flopsight.formulas.zero`.

>>> import torch
>>> from flopsight.formulas.interpolate import resample
>>> x = torch.ones(2, 3, 4, 4)
>>> out = torch.nn.functional.interpolate(x, size=(8, 8))  # (2, 3, 8, 8)
>>> resample(out, x, [8, 8])  # 2*3*8*8: batch and channels count
Cost(macs=0, flops=384)
"""

from __future__ import annotations

from .registry import REGISTRY, Cost
from .shapes import is_float, numel

__all__ = ["resample", "affine_grid_generator"]

# Private kernels (``_upsample_*_aa``, ``_grid_sampler_2d_cpu_fallback``...) vary across torch
# versions: registrations below name their ops with ``missing_ok=True``.


@REGISTRY.register(
    "aten::upsample_nearest1d",
    "aten::upsample_nearest2d",
    "aten::upsample_nearest3d",
    "aten::_upsample_nearest_exact1d",
    "aten::_upsample_nearest_exact2d",
    "aten::_upsample_nearest_exact3d",
    "aten::upsample_linear1d",
    "aten::upsample_bilinear2d",
    "aten::upsample_bicubic2d",
    "aten::upsample_trilinear3d",
    "aten::_upsample_bilinear2d_aa",
    "aten::_upsample_bicubic2d_aa",
    "aten::_upsample_lanczos2d_aa",
    # grid_sample: grid_sampler is the composite front door that picks one of the others
    "aten::grid_sampler",
    "aten::grid_sampler_2d",
    "aten::grid_sampler_3d",
    "aten::_grid_sampler_2d_cpu_fallback",
    "aten::cudnn_grid_sampler",
    missing_ok=True,
)
def resample(out, x=None, *args, **kwargs) -> Cost:
    """1 FLOP per output element (all of N, C and the spatial dims); 0 for integer data.

    Every overload (``.default`` with ``output_size``/``scales``, ``.vec`` with
    ``output_size`` or ``scale_factors``) is counted from the output it produced.
    """
    if x is None:
        x = kwargs.get("self", kwargs.get("input"))
    return Cost.of_flops(numel(out) if is_float(x) else 0)


@REGISTRY.register("aten::affine_grid_generator", missing_ok=True)
def affine_grid_generator(out, theta, *args, **kwargs) -> Cost:
    """Each grid point is ``theta @ (x, y[, z], 1)``: ``theta.shape[-1]`` MACs per coordinate."""
    return Cost.of_product(numel(out) * theta.shape[-1])
