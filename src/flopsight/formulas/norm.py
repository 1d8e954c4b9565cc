"""Normalisation: layer, group, batch (every kernel), instance, RMS, weight norm.

Per-element constants, 0 MACs -- DeepSpeed's wherever it has one, so totals match it:

==========================  ===========================  ==================
op                          with affine weight           without
==========================  ===========================  ==================
layer norm, group norm      5 per input element          4
batch norm, batch stats     5 (mean, var, normalise,     4
(training)                  scale, shift)
batch norm, running stats   2 (normalise, scale+shift)   1 (normalise)
(eval)
RMS norm (none in           4 (square, mean, scale by    3
DeepSpeed)                  1/rms, weight)
==========================  ===========================  ==================

"Affine" means a ``weight`` is passed (as DeepSpeed decides it); the bias add is folded
into the constant. The few per-row/per-channel FLOPs (``rsqrt`` of the variance, running
stat updates) are not counted, as in DeepSpeed.

Which batch-norm constant applies is decided by the statistics the kernel really uses:
batch statistics when ``training`` is true *or* there are no running stats (a BatchNorm
with ``track_running_stats=False`` normalises with batch statistics in eval too, and so
does ``nn.InstanceNorm`` without running stats); the running statistics otherwise.

What dispatches (torch 2.13, identical on CPU and meta): ``native_layer_norm``,
``native_group_norm``, ``native_batch_norm`` (CUDA: ``cudnn_batch_norm`` or
``native_batch_norm``; ROCm: ``miopen_batch_norm``; export/compile: the
``_native_batch_norm_legit*`` and ``_batch_norm_{with,no}_update*`` family).
``F.instance_norm`` is composite: it views the input as ``(1, N*C, *spatial)`` and runs
batch norm on it in training mode (batch statistics) -- so instance norm costs 5/4 per
element like DeepSpeed's, except in eval with ``track_running_stats=True``, where it
really is a running-stats batch norm (2/1; DeepSpeed says 5/4). ``SyncBatchNorm``'s CUDA
path splits batch norm into ``batch_norm_stats`` (3 per element: the training minus eval
constants) and ``batch_norm_elemt`` (2/1), which add up to the same 5/4.
``LocalResponseNorm`` is composite (``mul``, ``constant_pad_nd``, ``avg_pool``, ``add``,
``pow``, ``div``): each piece is counted by its own family.

``F.rms_norm``/``torch.rms_norm`` decompose into ``pow, mean, add, rsqrt, mul`` on CPU and
meta but run one fused kernel (``aten._fused_rms_norm``) on CUDA, so the function is
counted as a **unit** (one entry, ``rms_norm``) and the fused kernel is registered with the
same formula. The constant is layer norm's minus the mean subtraction: square (1), mean
accumulation (1), scale by 1/rms (1), weight (1) = 4; 3 without weight. The decomposition
it replaces would count about the same (pow 1, mean 1, mul 1, mul 1 per element plus per-row
add and rsqrt).

Weight norm's fused kernel (``_weight_norm_interface``) counts what its decomposition
would: a 2-norm, a divide per norm and a scale per element, ``3*numel(v) + 2*numel(g)``.

**Backward.** The textbook derivatives, counted at the forward's granularity: one FLOP
per element for each elementwise step and for each element accumulated into a per-row /
per-channel sum; per-row/per-channel scalar work free. ``x_hat = (x - mean) * rstd`` is
recomputed from the saved statistics (the forward's normalise step, 1), once for all the
gradients that need it; ``g`` is the incoming gradient, ``D`` the size of a normalised
group. Only the gradients the kernel is asked for (``output_mask``) are counted.

* **Layer / group norm**, ``g_hat = g * weight``:
  ``grad_input = rstd * (g_hat - mean(g_hat) - x_hat * mean(g_hat * x_hat))`` -- ``g_hat`` 1
  (with weight), ``sum(g_hat)`` 1, ``sum(g_hat * x_hat)`` 2, then ``x_hat * m``, two
  subtractions and ``* rstd``: 4 -> **8 with weight, 7 without**;
  ``grad_weight = sum(g * x_hat)`` over the batch: **2**; ``grad_bias = sum(g)``: **1**.
  All three with ``x_hat``: **12** per element (forward 5); input only, no affine: **8** (4).
* **Batch norm, batch statistics** (training; instance norm): the weight is per channel,
  constant over the reduced elements, so
  ``grad_input = weight * rstd * (g - mean(g) - x_hat * mean(g * x_hat))`` needs exactly the
  two sums the parameter grads are: ``sum(g)`` 1 (= ``grad_bias``), ``sum(g * x_hat)`` 2
  (= ``grad_weight``), plus the combine 4. Everything: ``x_hat`` 1 + 1 + 2 + 4 = **8**, with
  or without affine (forward 5/4).
* **Batch norm, running statistics** (eval): the statistics are constants, so
  ``grad_input = g * (weight * rstd)``: **1**; ``grad_weight = sum(g * x_hat)``: ``x_hat`` 1 + 2
  = **3**; ``grad_bias`` **1**: 5 in all (forward 2/1).
* **RMS norm** (unit ``rms_norm``, ``x_hat = x * rrms``, ``g_hat = g * weight``):
  ``grad_input = rrms * (g_hat - x_hat * mean(g_hat * x_hat))``: ``g_hat`` 1, the sum 2, then
  ``x_hat * m``, a subtraction and ``* rrms``: 3 -> **6 with weight, 5 without**;
  ``grad_weight = sum(g * x_hat)``: **2**; plus ``x_hat`` 1: **9** / **6** per element -- layer
  norm's without the mean-subtraction terms (``sum(g_hat)``, one subtraction) and the bias,
  as in the forward (4/3). The unit's backward formula reads which of input and weight
  require grad; ``aten._fused_rms_norm_backward`` (CUDA) is registered with the same count.
* **Weight norm** (``w = g * v / ||v||``): ``grad_g = sum(grad_w * v) / ||v||`` (2 per
  element of ``v``, 1 per norm), ``grad_v = (g / ||v||) * (grad_w - v * grad_g / ||v||)``
  (3 per element, 2 per norm): ``5 * numel(v) + 3 * numel(g)`` (forward ``3 * numel(v) +
  2 * numel(g)``); the kernel always computes both.

>>> import torch
>>> from flopsight.formulas.norm import native_layer_norm
>>> x = torch.ones(2, 8, 16)
>>> native_layer_norm(None, x, [16], weight=torch.ones(16), bias=torch.ones(16))  # 5 * 2*8*16
Stats(macs=0, flops=1280)
>>> from flopsight.formulas.norm import rms_norm
>>> rms_norm(None, x, [16], weight=None)  # the rms_norm unit: 3 * 2*8*16 without weight
Stats(macs=0, flops=768)
>>> from flopsight.formulas.norm import layer_norm_backward_cost
>>> layer_norm_backward_cost(x, torch.ones(16), (True, True, True))  # 12 * 2*8*16
Stats(macs=0, flops=3072)
"""

from __future__ import annotations

import torch

from .registry import REGISTRY, Cost
from .shapes import is_float, numel

__all__ = [
    "layer_norm_flops", "layer_norm_cost", "batch_norm_cost", "rms_norm_cost", "native_layer_norm", "rms_norm",
    "layer_norm_backward_cost", "batch_norm_backward_cost", "rms_norm_backward_cost", "weight_norm_backward_cost",
]

# Private and backend kernels (``_batch_norm_with_update`` since 2.4, ``_fused_rms_norm``,
# MIOpen...) vary across torch versions: registrations name their ops with ``missing_ok=True``.

#: Per-element FLOPs (with weight, without). DeepSpeed's constants, except RMS norm,
#: which DeepSpeed does not count: layer norm's without the mean subtraction.
LAYER_NORM = (5, 4)
BATCH_NORM_TRAIN = (5, 4)
BATCH_NORM_EVAL = (2, 1)
RMS_NORM = (4, 3)
#: Batch statistics alone (SyncBatchNorm's split): training minus eval, 5-2 == 4-1.
BATCH_STATS = 3
#: Weight norm, per element of v: square and accumulate the norm (2), scale (1).
WEIGHT_NORM = 3

# Backward, per element (the module docstring derives each one).
#: Recomputing x_hat from the saved statistics: the forward's normalise step.
NORMALISE = 1
#: Layer/group norm grad_input (with weight, without), x_hat aside: g_hat 1, two sums 1 + 2,
#: combine 4.
LAYER_NORM_INPUT_GRAD = (8, 7)
#: RMS norm grad_input (with weight, without), x_hat aside: g_hat 1, one sum 2, combine 3.
RMS_NORM_INPUT_GRAD = (6, 5)
#: sum(g * x_hat) (weight grad, and batch norm's second sum): multiply, accumulate.
SUM_G_XHAT = 2
#: sum(g) (bias grad, and batch norm's first sum): accumulate.
SUM_G = 1
#: Batch norm grad_input with batch statistics, the two sums aside: x_hat * m, two
#: subtractions, the per-channel scale.
BATCH_NORM_COMBINE = 4
#: Batch norm grad_input with running statistics: g times a per-channel constant.
BATCH_NORM_EVAL_INPUT_GRAD = 1
#: Weight norm backward: per element of v (the dot product 2, grad_v 3), per norm.
WEIGHT_NORM_BACKWARD = (5, 3)


def _per_element(x, weight, constants: tuple[int, int]) -> Cost:
    if not is_float(x):  # quantized/integer inputs: no floating-point arithmetic
        return Cost()
    return Cost.of_flops(numel(x) * constants[0 if weight is not None else 1])


def layer_norm_flops(n: int, affine: bool = True) -> int:
    """FLOPs of a layer (or group) norm over ``n`` elements, from counts alone (used by the
    attention fast paths, which know only shapes of their inner tensors).

    >>> layer_norm_flops(10), layer_norm_flops(10, affine=False)
    (50, 40)
    """
    return n * LAYER_NORM[0 if affine else 1]


def layer_norm_cost(x, weight) -> Cost:
    """5 FLOPs per element with a weight, 4 without (layer and group norm)."""
    return _per_element(x, weight, LAYER_NORM)


def batch_norm_cost(x, weight, batch_stats: bool) -> Cost:
    """5/4 per element when normalising with batch statistics, 2/1 with running ones."""
    return _per_element(x, weight, BATCH_NORM_TRAIN if batch_stats else BATCH_NORM_EVAL)


def rms_norm_cost(x, weight) -> Cost:
    """4 FLOPs per element with a weight, 3 without."""
    return _per_element(x, weight, RMS_NORM)


# -- layer / group norm ----------------------------------------------------------------
@REGISTRY.register("aten::native_layer_norm", "aten::layer_norm", missing_ok=True)
def native_layer_norm(out, input, normalized_shape, weight=None, **_) -> Cost:
    return layer_norm_cost(input, weight)


@REGISTRY.register("aten::native_group_norm", "aten::group_norm", missing_ok=True)
def group_norm(out, input, weight=None, **_) -> Cost:
    """``native_group_norm`` and its composite front door ``group_norm``."""
    return layer_norm_cost(input, weight)


# -- batch norm ------------------------------------------------------------------------
@REGISTRY.register(
    "aten::native_batch_norm",
    "aten::cudnn_batch_norm",
    "aten::miopen_batch_norm",
    "aten::_native_batch_norm_legit",
    "aten::_native_batch_norm_legit_functional",
    "aten::batch_norm",
    "aten::_batch_norm_impl_index",
    "aten::instance_norm",
    missing_ok=True,
)
def native_batch_norm(out, input, weight=None, running_mean=None, training=False, use_input_stats=False,
                      **_) -> Cost:
    """Batch statistics when ``training`` (``use_input_stats`` for instance norm: the same
    meaning) or without running statistics (``_native_batch_norm_legit.no_stats``)."""
    return batch_norm_cost(input, weight, bool(training) or bool(use_input_stats) or running_mean is None)


@REGISTRY.register("aten::_native_batch_norm_legit_no_training", "aten::_batch_norm_no_update", missing_ok=True)
def batch_norm_no_update(out, input, weight=None, running_mean=None, **_) -> Cost:
    """Normalises with the running statistics (batch ones only if there are none)."""
    return batch_norm_cost(input, weight, running_mean is None)


@REGISTRY.register("aten::quantized_batch_norm", missing_ok=True)
def quantized_batch_norm(out, input, weight=None, **_) -> Cost:
    """Normalises with the given ``mean`` and ``var`` (0 FLOPs: quantized data)."""
    return batch_norm_cost(input, weight, False)


@REGISTRY.register("aten::_batch_norm_with_update", "aten::_batch_norm_with_update_functional", missing_ok=True)
def batch_norm_with_update(out, input, weight=None, **_) -> Cost:
    """Training-mode batch norm that also updates the running statistics."""
    return batch_norm_cost(input, weight, True)


# SyncBatchNorm's CUDA path: statistics, all-gather, combine, normalise.
@REGISTRY.register("aten::batch_norm_stats", "aten::batch_norm_update_stats", missing_ok=True)
def batch_norm_stats(out, input, **_) -> Cost:
    """Per-channel mean and variance of the local batch: 3 FLOPs per element."""
    return Cost.of_flops(BATCH_STATS * numel(input) if is_float(input) else 0)


@REGISTRY.register("aten::batch_norm_gather_stats", "aten::batch_norm_gather_stats_with_counts", missing_ok=True)
def batch_norm_gather_stats(out, input, mean, invstd, **_) -> Cost:
    """Combines the replicas' (world, C) statistics: 1 FLOP per gathered value (negligible)."""
    return Cost.of_flops(numel(mean) + numel(invstd))


@REGISTRY.register("aten::batch_norm_elemt", missing_ok=True)
def batch_norm_elemt(out, input, weight=None, **_) -> Cost:
    """Normalise with given statistics (+ scale and shift): the eval constants, 2/1."""
    return batch_norm_cost(input, weight, False)


# -- RMS norm ------------------------------------------------------------------------
# Both entry points: nn.RMSNorm and most code call F.rms_norm, which calls torch.rms_norm;
# the unit mode counts the outermost one only. (Absent before torch 2.4.) Both take
# (input, normalized_shape, weight=None, eps=None): F.rms_norm by its Python signature,
# torch.rms_norm by the schema of aten::rms_norm.
_RMS_FUNCTIONS = tuple(f for f in (getattr(torch.nn.functional, "rms_norm", None), getattr(torch, "rms_norm", None))
                       if f is not None)  # fmt: skip


def rms_norm_backward(out, input, weight=None, **_) -> Cost:
    """The ``rms_norm`` unit's backward, from the forward call's arguments: the gradients of
    the tensors that require grad."""
    want_weight = isinstance(weight, torch.Tensor) and weight.requires_grad
    return rms_norm_backward_cost(input, weight, bool(getattr(input, "requires_grad", False)), want_weight)


@REGISTRY.register_unit(*_RMS_FUNCTIONS, name="rms_norm", backward=rms_norm_backward,
                        reaches=getattr(torch, "rms_norm", None))
def rms_norm(out, input, normalized_shape, weight=None, **_) -> Cost:
    """``F.rms_norm(input, normalized_shape, weight=None, eps=None)``."""
    return rms_norm_cost(input, weight)


# The CUDA fused kernel, and the composite aten op for modes that see composites.
REGISTRY.register("aten::_fused_rms_norm", "aten::rms_norm", missing_ok=True)(rms_norm)


# -- weight norm ------------------------------------------------------------------------
@REGISTRY.register("aten::_weight_norm_interface", "aten::_weight_norm", missing_ok=True)
def weight_norm(out, v, g, **_) -> Cost:
    """``v * (g / ||v||)``, the norm taken over every dim but ``dim``.

    What its decomposition counts step by step: the 2-norm (square and add per element of
    ``v``, a square root per norm: the reduction family's ``2n + n_out``), ``g / norm`` (a
    divide per norm) and the scale (a multiply per element): ``3 * numel(v) + 2 * numel(g)``.
    """
    if not is_float(v):
        return Cost()
    return Cost.of_flops(WEIGHT_NORM * numel(v) + 2 * numel(g))


# -- backward ------------------------------------------------------------------------------
def _mask(value, size: int = 3) -> tuple:
    """An ``output_mask`` argument (all True if absent), padded to ``size`` entries."""
    mask = (True,) * size if value is None else tuple(bool(m) for m in value)
    return mask + (False,) * (size - len(mask))


def _per_element_backward(x, per_element: int) -> Cost:
    if not is_float(x):
        return Cost()
    return Cost.of_flops(numel(x) * per_element)


def layer_norm_backward_cost(x, weight, mask) -> Cost:
    """Layer and group norm backward (grad_input, grad_weight, grad_bias as ``mask`` asks):
    ``x_hat`` 1 (if input or weight grad) + input 8/7 + weight 2 + bias 1 per element."""
    want_input, want_weight, want_bias = mask
    per = NORMALISE if want_input or want_weight else 0
    per += LAYER_NORM_INPUT_GRAD[0 if weight is not None else 1] if want_input else 0
    per += SUM_G_XHAT if want_weight else 0
    per += SUM_G if want_bias else 0
    return _per_element_backward(x, per)


def batch_norm_backward_cost(x, batch_stats: bool, mask) -> Cost:
    """Batch norm backward. With batch statistics grad_input needs ``sum(g)`` and
    ``sum(g * x_hat)``, which are also the bias and weight grads: counted once. With running
    statistics grad_input is ``g`` times a per-channel constant."""
    want_input, want_weight, want_bias = mask
    if batch_stats:
        per = NORMALISE if want_input or want_weight else 0
        per += SUM_G if want_input or want_bias else 0
        per += SUM_G_XHAT if want_input or want_weight else 0
        per += BATCH_NORM_COMBINE if want_input else 0
    else:
        per = BATCH_NORM_EVAL_INPUT_GRAD if want_input else 0
        per += NORMALISE + SUM_G_XHAT if want_weight else 0
        per += SUM_G if want_bias else 0
    return _per_element_backward(x, per)


def rms_norm_backward_cost(x, weight, want_input: bool, want_weight: bool) -> Cost:
    """RMS norm backward: ``x_hat`` 1 (if any grad) + input 6/5 + weight 2 per element."""
    per = NORMALISE if want_input or want_weight else 0
    per += RMS_NORM_INPUT_GRAD[0 if weight is not None else 1] if want_input else 0
    per += SUM_G_XHAT if want_weight else 0
    return _per_element_backward(x, per)


def weight_norm_backward_cost(v, g) -> Cost:
    """``grad_v`` and ``grad_g`` of ``w = g * v / ||v||``: ``5 * numel(v) + 3 * numel(g)``."""
    if not is_float(v):
        return Cost()
    return Cost.of_flops(WEIGHT_NORM_BACKWARD[0] * numel(v) + WEIGHT_NORM_BACKWARD[1] * numel(g))


@REGISTRY.register("aten::native_layer_norm_backward", missing_ok=True)
def native_layer_norm_backward(out, grad_out, input, weight=None, output_mask=None, **_) -> Cost:
    return layer_norm_backward_cost(input, weight, _mask(output_mask))


@REGISTRY.register("aten::native_group_norm_backward", missing_ok=True)
def native_group_norm_backward(out, grad_out, input, weight=None, output_mask=None, **_) -> Cost:
    return layer_norm_backward_cost(input, weight, _mask(output_mask))


@REGISTRY.register("aten::native_batch_norm_backward", "aten::batch_norm_backward", missing_ok=True)
def native_batch_norm_backward(out, grad_out, input, running_mean=None, train=False, update=False,
                               output_mask=None, **_) -> Cost:
    """``train`` (``update`` in the newer op) says batch statistics were used; so does the
    absence of running statistics."""
    return batch_norm_backward_cost(input, bool(train) or bool(update) or running_mean is None, _mask(output_mask))


@REGISTRY.register("aten::_batch_norm_impl_index_backward", missing_ok=True)
def batch_norm_impl_index_backward(out, impl_index, input, grad_output, running_mean=None, train=False,
                                   output_mask=None, **_) -> Cost:
    return batch_norm_backward_cost(input, bool(train) or running_mean is None, _mask(output_mask))


# cuDNN/MIOpen batch norm backward kernels run only for training (an eval-mode cudnn_batch_norm
# is differentiated by native_batch_norm_backward) and compute all three gradients.
@REGISTRY.register("aten::cudnn_batch_norm_backward", "aten::miopen_batch_norm_backward", missing_ok=True)
def cudnn_batch_norm_backward(out, input, grad_output, **_) -> Cost:
    return batch_norm_backward_cost(input, True, (True, True, True))


# SyncBatchNorm's CUDA backward: the two per-channel sums, an all-reduce, then grad_input.
@REGISTRY.register("aten::batch_norm_backward_reduce", missing_ok=True)
def batch_norm_backward_reduce(out, grad_out, input, **_) -> Cost:
    """``sum(g)`` and ``sum(g * (x - mean))`` per channel: ``x_hat`` 1 + 1 + 2 = 4 per element."""
    return _per_element_backward(input, NORMALISE + SUM_G + SUM_G_XHAT)


@REGISTRY.register("aten::batch_norm_backward_elemt", missing_ok=True)
def batch_norm_backward_elemt(out, grad_out, input, **_) -> Cost:
    """grad_input from the all-reduced sums: ``x_hat`` again 1 + combine 4 = 5 per element (the
    split recomputes ``x_hat``: 9 in all against the fused kernel's 8)."""
    return _per_element_backward(input, NORMALISE + BATCH_NORM_COMBINE)


@REGISTRY.register("aten::_fused_rms_norm_backward", missing_ok=True)
def fused_rms_norm_backward(out, grad_out, input, weight=None, output_mask=None, **_) -> Cost:
    """The unit's count; ``output_mask`` has two entries: (input, weight)."""
    want_input, want_weight = _mask(output_mask, 2)
    return rms_norm_backward_cost(input, weight, want_input, want_weight)


@REGISTRY.register("aten::_weight_norm_interface_backward", "aten::_weight_norm_differentiable_backward",
                   missing_ok=True)
def weight_norm_backward(out, grad_w, saved_v, saved_g, **_) -> Cost:
    """-> (grad_v, grad_g)."""
    return weight_norm_backward_cost(saved_v, saved_g)
