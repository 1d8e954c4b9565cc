"""Pooling: max, average, adaptive, fractional, unpooling.

Convention (DeepSpeed's, kept so totals match it): **1 FLOP per input element**, 0 MACs,
for every max, average, adaptive-max and fractional pool of any dimensionality -- the
comparisons or additions that fold the input into the output. It is an estimate:
overlapping windows (``kernel > stride``) touch some inputs more than once and are not
charged for it, as in DeepSpeed. Integer inputs (and quantized ones) cost 0 FLOPs, like
every elementwise op on integers.

One exception, for consistency with torch's own dispatch: **adaptive average pools cost
``numel(input) + numel(out)``** (an add per input element, a divide per output element).
Torch runs ``adaptive_avg_pool*`` with an all-ones output size (global average pooling,
ResNet's ``avgpool``) as ``aten.mean`` -- on CPU, CUDA and meta alike, in either memory
format -- and the reduction family counts a mean exactly so. The adaptive formula matches
it, so ``AdaptiveAvgPool2d(1)`` and ``AdaptiveAvgPool2d(k)`` follow one rule whichever op
torch picked. DeepSpeed counts only ``numel(input)``: the difference is one FLOP per output
element (``N*C`` for global pooling).

What dispatches (torch 2.13, identical on CPU and meta):

* ``max_pool1d``/``avg_pool1d``/``adaptive_*_pool1d`` unsqueeze to the 2-D op
  (``max_pool2d_with_indices``, ``avg_pool2d``, ``_adaptive_avg_pool2d``,
  ``adaptive_max_pool2d``); ``max_pool2d/3d`` arrive as ``max_pool{2,3}d_with_indices``
  whether or not indices are returned or gradients needed.
* ``F.interpolate(mode='area')`` is an adaptive average pool and is counted as one.
* ``LPPool*`` and ``LocalResponseNorm`` are composite: ``pow``, ``avg_pool``, ``sign``,
  ``abs``, ``relu``, ``mul``...; each op is counted by its own family.
* The composite front doors (``max_pool2d``, ``adaptive_avg_pool2d``, ...) and the backend
  kernels (``mkldnn_*``, ``quantized_max_pool*``) are registered with the same formulas for
  modes that see them (other backends, tracing levels).

**Backward** (derivatives, counted at the same one-FLOP-per-element granularity):

* **max pools** (max, adaptive max, fractional; ``*_backward`` of each): the gradient of a
  window goes to its argmax, ``grad_input[argmax(w)] += grad_output[w]``: a scatter-add
  with **1 FLOP per ``grad_output`` element** (overlapping windows can pick the same input,
  hence an accumulate, counted like the reduction family's ``scatter_add``). The zero-fill
  of ``grad_input`` is not arithmetic.
* **average pools** (avg, adaptive avg): every input receives the mean of its window's
  gradient, ``grad_input[i] = sum over windows w containing i of grad_output[w] / |w|``:
  **1 FLOP per input element**, the forward's estimate mirrored (exact for
  non-overlapping windows, overlap not charged). It is also what the global pool costs:
  the backward of the ``aten.mean`` that ``AdaptiveAvgPool2d(1)`` runs is an ``expand`` and
  a divide per input element (elementwise family).

``max_unpool2d/3d`` scatter values to the positions recorded by a max pool: no arithmetic,
an indexing op, so 0 FLOPs (DeepSpeed does not count it either).

>>> import torch
>>> from flopsight.formulas.pooling import pool, adaptive_avg_pool
>>> x = torch.ones(2, 3, 8, 8)
>>> pool(torch.ones(2, 3, 4, 4), x, kernel_size=[2, 2])  # max/avg pool: 2*3*8*8 input elements
Stats(macs=0, flops=384)
>>> adaptive_avg_pool(torch.ones(2, 3, 2, 2), x, output_size=[2, 2])  # 2*3*8*8 adds + 2*3*2*2 divides
Stats(macs=0, flops=408)
>>> from flopsight.formulas.pooling import max_pool_backward, avg_pool_backward
>>> g = torch.ones(2, 3, 4, 4)  # the gradient of a 2x2 pool's output
>>> max_pool_backward(None, g, self=x), avg_pool_backward(None, g, self=x)  # 2*3*4*4 and 2*3*8*8
(Stats(macs=0, flops=96), Stats(macs=0, flops=384))
"""

from __future__ import annotations

from .reduction import mean_flops
from .registry import REGISTRY, Cost
from .shapes import is_float, numel

__all__ = ["pool", "adaptive_avg_pool", "max_pool_backward", "avg_pool_backward"]

# Backend kernels (mkldnn, quantized) vary across torch versions and builds: registrations
# below name their ops with ``missing_ok=True``.


@REGISTRY.register(
    # max pooling: dispatched kernels, then composite front doors and backend variants
    "aten::max_pool2d_with_indices",
    "aten::max_pool3d_with_indices",
    "aten::max_pool1d_with_indices",
    "aten::max_pool1d",
    "aten::max_pool2d",
    "aten::max_pool3d",
    "aten::mkldnn_max_pool2d",
    "aten::mkldnn_max_pool3d",
    "aten::quantized_max_pool1d",
    "aten::quantized_max_pool2d",
    "aten::quantized_max_pool3d",
    # average pooling
    "aten::avg_pool1d",
    "aten::avg_pool2d",
    "aten::avg_pool3d",
    # adaptive max pooling (adaptive *average* pooling is below)
    "aten::adaptive_max_pool1d",
    "aten::adaptive_max_pool2d",
    "aten::adaptive_max_pool3d",
    # fractional max pooling (its random_samples come from a separate aten.rand)
    "aten::fractional_max_pool2d",
    "aten::fractional_max_pool3d",
    missing_ok=True,
)
def pool(out, self, **_) -> Cost:
    """1 FLOP per input element (0 for integer or quantized inputs)."""
    return Cost.of_flops(numel(self) if is_float(self) else 0)


@REGISTRY.register(
    "aten::_adaptive_avg_pool2d",
    "aten::_adaptive_avg_pool3d",
    "aten::adaptive_avg_pool1d",
    "aten::adaptive_avg_pool2d",
    "aten::adaptive_avg_pool3d",
    "aten::mkldnn_adaptive_avg_pool2d",
    missing_ok=True,
)
def adaptive_avg_pool(out, self, **_) -> Cost:
    """An add per input element and a divide per output element: ``aten.mean``'s count.

    Torch turns the all-ones output size (global average pooling) into ``aten.mean``,
    which the reduction family counts as ``numel(input) + numel(out)``; counting every
    adaptive average pool the same way keeps ``AdaptiveAvgPool2d(1)`` and
    ``AdaptiveAvgPool2d(k)`` on one rule whichever op torch picked.
    """
    return Cost.of_flops(mean_flops(numel(self), numel(out)) if is_float(self) else 0)


# -- backward -------------------------------------------------------------------------------
@REGISTRY.register(
    "aten::max_pool2d_with_indices_backward",
    "aten::max_pool3d_with_indices_backward",
    "aten::adaptive_max_pool2d_backward",
    "aten::adaptive_max_pool3d_backward",
    "aten::fractional_max_pool2d_backward",
    "aten::fractional_max_pool3d_backward",
    "aten::max_pool2d_backward",  # (grad_output, self, ...): the mkldnn path
    "aten::mkldnn_max_pool2d_backward",  # (grad_output, output, input, ...)
    "aten::mkldnn_max_pool3d_backward",
    missing_ok=True,
)
def max_pool_backward(out, grad_output, **_) -> Cost:
    """Scatter-add each window's gradient to its argmax: 1 FLOP per ``grad_output`` element."""
    return Cost.of_flops(numel(grad_output) if is_float(grad_output) else 0)


@REGISTRY.register(
    "aten::avg_pool2d_backward",
    "aten::avg_pool3d_backward",
    "aten::_adaptive_avg_pool2d_backward",
    "aten::_adaptive_avg_pool3d_backward",
    "aten::adaptive_avg_pool3d_backward",
    "aten::mkldnn_adaptive_avg_pool2d_backward",
    missing_ok=True,
)
def avg_pool_backward(out, grad_output, self, **_) -> Cost:
    """Each input element (``self``) gets its window's scaled gradient, 1 FLOP per input
    element (``grad_input`` has the input's shape)."""
    return Cost.of_flops(numel(self) if is_float(grad_output) else 0)


# Scatter by indices: no arithmetic (see the module docstring).
REGISTRY.zero_cost("aten::max_unpool2d", "aten::max_unpool3d", missing_ok=True)
