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
are zero-cost ops, registered in :mod:`flopsight.formulas.zero_cost`.

**Backward.** Resampling is a linear map of the input, ``out = W x`` (``W`` holds the
interpolation weights), so its input-gradient is the transposed map,
``grad_input = W^T grad_output``: every ``grad_output`` element is scattered back, weighted,
to the inputs it was read from -- the same products as the forward, so the same count,
**1 FLOP per ``grad_output`` element**, for every ``upsample_*_backward`` and for
``grid_sampler_*_backward``'s ``grad_input``. ``grid_sample``'s gradient with respect to the
grid (``grad_grid``, when the grid requires grad) is the derivative of each sampled value
with respect to its sampling point, times the incoming gradient, summed over channels:
**2 FLOPs per ``grad_output`` element** (derivative + chain-rule multiply,
:func:`flopsight.formulas.activation.activation_backward_flops`). Only the gradients the
kernel is asked for (``output_mask``) are counted. ``affine_grid``'s backward is
``grad_theta = sum over points of grad_grid (x) base``: the forward's MACs,
``numel(grad_grid) * theta.shape[-1]``; it is CompositeImplicitAutograd on CPU and meta
(its ``bmm`` is counted by the matmul family), registered for the modes that see it.

>>> import torch
>>> from flopsight.formulas.interpolate import resample
>>> x = torch.ones(2, 3, 4, 4)
>>> out = torch.nn.functional.interpolate(x, size=(8, 8))  # (2, 3, 8, 8)
>>> resample(out, x, output_size=[8, 8])  # 2*3*8*8: batch and channels count
Stats(macs=0, flops=384)
>>> from flopsight.formulas.interpolate import resample_backward
>>> resample_backward(None, torch.ones(out.shape), output_size=[8, 8], input_size=[2, 3, 4, 4])  # 2*3*8*8 again
Stats(macs=0, flops=384)
"""

from __future__ import annotations

from .activation import activation_backward_flops
from .registry import REGISTRY, Cost
from .shapes import is_float, numel

__all__ = ["resample", "affine_grid_generator", "resample_backward", "grid_sampler_backward"]

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
def resample(out, self=None, input=None, **_) -> Cost:
    """1 FLOP per output element (all of N, C and the spatial dims); 0 for integer data.

    Every overload (``.default`` with ``output_size``/``scales``, ``.vec`` with
    ``output_size`` or ``scale_factors``) is counted from the output it produced. The image
    is ``self`` in the ``.default`` overloads and ``cudnn_grid_sampler``, ``input`` in the
    ``.vec`` ones and the other grid samplers.
    """
    x = self if self is not None else input
    return Cost.of_flops(numel(out) if is_float(x) else 0)


@REGISTRY.register("aten::affine_grid_generator", missing_ok=True)
def affine_grid_generator(out, theta, **_) -> Cost:
    """Each grid point is ``theta @ (x, y[, z], 1)``: ``theta.shape[-1]`` MACs per coordinate."""
    return Cost.of_product(numel(out) * theta.shape[-1])


# -- backward -------------------------------------------------------------------------------
@REGISTRY.register(
    "aten::upsample_nearest1d_backward",
    "aten::upsample_nearest2d_backward",
    "aten::upsample_nearest3d_backward",
    "aten::_upsample_nearest_exact1d_backward",
    "aten::_upsample_nearest_exact2d_backward",
    "aten::_upsample_nearest_exact3d_backward",
    "aten::upsample_linear1d_backward",
    "aten::upsample_bilinear2d_backward",
    "aten::upsample_bicubic2d_backward",
    "aten::upsample_trilinear3d_backward",
    "aten::_upsample_bilinear2d_aa_backward",
    "aten::_upsample_bicubic2d_aa_backward",
    "aten::_upsample_lanczos2d_aa_backward",
    missing_ok=True,
)
def resample_backward(out, grad_output, **_) -> Cost:
    """The transposed resampling, 1 FLOP per ``grad_output`` element (the forward's count:
    the same products)."""
    return Cost.of_flops(numel(grad_output) if is_float(grad_output) else 0)


def grid_sampler_backward_cost(grad_output, want_input: bool, want_grid: bool) -> Cost:
    """``grad_input``: 1 FLOP per ``grad_output`` element (the transposed sampling);
    ``grad_grid``: 2 per ``grad_output`` element (derivative with respect to the sampling point,
    times the incoming gradient, accumulated over channels)."""
    if not is_float(grad_output):
        return Cost()
    n = numel(grad_output)
    return Cost.of_flops((n if want_input else 0) + (activation_backward_flops(n) if want_grid else 0))


@REGISTRY.register("aten::grid_sampler_2d_backward", "aten::grid_sampler_3d_backward", missing_ok=True)
def grid_sampler_backward(out, grad_output, output_mask=None, **_) -> Cost:
    """-> (grad_input, grad_grid), as ``output_mask`` asks."""
    want_input, want_grid = (True, True) if output_mask is None else (bool(output_mask[0]), bool(output_mask[1]))
    return grid_sampler_backward_cost(grad_output, want_input, want_grid)


@REGISTRY.register("aten::_grid_sampler_2d_cpu_fallback_backward", missing_ok=True)
def grid_sampler_fallback_backward(out, grad_output, **_) -> Cost:
    """The CPU fallback (no output_mask): both gradients."""
    return grid_sampler_backward_cost(grad_output, True, True)


@REGISTRY.register("aten::cudnn_grid_sampler_backward", missing_ok=True)
def cudnn_grid_sampler_backward(out, grad_output, **_) -> Cost:
    """-> (grad_self, grad_grid): both gradients."""
    return grid_sampler_backward_cost(grad_output, True, True)


@REGISTRY.register("aten::affine_grid_generator_backward", missing_ok=True)
def affine_grid_generator_backward(out, grad, size, **_) -> Cost:
    """``grad_theta = sum_p grad_grid[p] (x) base[p]``, the base point in homogeneous
    coordinates (``len(size) - 1`` of them: x, y[, z], 1)."""
    return Cost.of_product(numel(grad) * (len(size) - 1))


@REGISTRY.register("aten::cudnn_affine_grid_generator_backward", missing_ok=True)
def cudnn_affine_grid_generator_backward(out, grad, **_) -> Cost:
    """The 2-D case (sizes ``N, C, H, W``): 3 homogeneous coordinates per point."""
    return Cost.of_product(numel(grad) * 3)
