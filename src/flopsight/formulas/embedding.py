"""Embeddings: lookups are free; bags reduce the rows they look up; max_norm renormalises.

* ``embedding`` (``nn.Embedding``, ``F.embedding``) copies rows: 0 FLOPs, as in DeepSpeed.
* ``embedding_bag`` (``nn.EmbeddingBag``, ``F.embedding_bag``) gathers ``n`` rows of width
  ``D`` into ``B`` bags and reduces each bag, costing one FLOP per gathered element and
  per arithmetic step:

  ======  ==============================================  =================
  mode    per gathered element / per output element       FLOPs
  ======  ==============================================  =================
  sum     add                                             n·D
  sum     multiply by ``per_sample_weights``, add         2·n·D
  mean    add / divide by the bag size                    n·D + B·D
  max     compare                                         n·D
  ======  ==============================================  =================

  ``padding_idx`` entries are counted (dense: which indices are padding is data).
  Torch runs ``_embedding_bag`` or ``_embedding_bag_forward_only`` depending on
  autograd; both, and the public ``embedding_bag``, share this formula.
* ``embedding_renorm_`` (``max_norm=...``) rescales the looked-up rows in place: per
  index a p-norm of its row (:func:`flopsight.formulas.reduction.norm_cost`), a compare
  with ``max_norm`` and a scale factor ``max_norm / (norm + 1e-7)`` (2), then a
  multiply per row element. Dense: every index is counted as a distinct row that needs
  rescaling (duplicates and rows already short enough are data).

Backward (the weight's gradient; indices have none): rows are **accumulated**, one add per
gathered element into a zeroed ``(num_weights, D)`` gradient, whether or not indices repeat
(dense, like ``index_put(accumulate=True)``). A per-index scale that is not 1 adds a multiply
per gathered element, and its computation a divide per index:

==============================================  ==========================================
backward kernel                                 FLOPs
==============================================  ==========================================
``embedding_dense_backward``                    ``n·D``; ``scale_grad_by_freq``: ``+ n·D + n``
``embedding_sparse_backward`` (composite)       0 (the rows are copied into a sparse
                                                gradient); ``scale_grad_by_freq``: ``n·D + n``
``_embedding_bag_backward``,                    sum: ``n·D``; each of ``per_sample_weights``,
``_embedding_bag_dense_backward``               mean (÷ bag size), ``scale_grad_by_freq``
                                                makes the scale not 1 (``+ n·D`` once) and
                                                adds ``n`` divides or multiplies for the
                                                scale; max: ``B·D`` (one add per selected
                                                element)
``_embedding_bag_backward(sparse=True)``,       as dense without the ``n·D`` adds (rows are
``_embedding_bag_sparse_backward``              copied into a sparse gradient)
``_embedding_bag_per_sample_weights_backward``  ``2·n·D``: per index, the dot product of its
                                                bag's gradient with its row (multiply, add),
                                                FLOPs without MACs, as the forward's weighted
                                                sum
==============================================  ==========================================

``n`` = indices, ``D`` = embedding width, ``B`` = bags. ``padding_idx`` entries are counted
(dense).

>>> import torch
>>> from flopsight.formulas.embedding import embedding_bag, embedding_dense_backward
>>> w, idx, offsets = torch.ones(100, 16), torch.zeros(12, dtype=torch.long), torch.tensor([0, 4, 8])
>>> bags = (torch.ones(3, 16),)
>>> embedding_bag(bags, w, idx, offsets, mode=0)   # sum: 12*16
Stats(macs=0, flops=192)
>>> embedding_bag(bags, w, idx, offsets, mode=1)   # mean: 12*16 + 3*16
Stats(macs=0, flops=240)
>>> g = torch.ones(12, 16)
>>> embedding_dense_backward(w, g, idx, scale_grad_by_freq=False)   # 12 rows of 16 added
Stats(macs=0, flops=192)
"""

from __future__ import annotations

from .reduction import norm_cost
from .registry import REGISTRY, Cost, OpNames
from .shapes import first_tensor, is_float, numel

__all__ = [
    "embedding_bag", "embedding_renorm", "MODES", "embedding_dense_backward", "embedding_sparse_backward",
    "embedding_backward", "embedding_bag_backward", "embedding_bag_dense_backward",
    "embedding_bag_sparse_backward", "embedding_bag_per_sample_weights_backward",
]

aten = OpNames("aten")  # names: an op this torch lacks is skipped (registry.builtins_loading)

#: ``mode`` as the aten ops receive it (``F.embedding_bag`` maps the strings to these).
MODES = {0: "sum", 1: "mean", 2: "max", "sum": "sum", "mean": "mean", "max": "max"}

# A lookup copies rows; DeepSpeed counts it as 0 and so do we.
REGISTRY.zero_cost(aten.embedding)


@REGISTRY.register(aten.embedding_bag, aten._embedding_bag, aten._embedding_bag_forward_only)
def embedding_bag(out, weight, indices, offsets, *, mode=0, per_sample_weights=None, **_) -> Cost:
    """Per gathered element: an add (sum, mean) or a compare (max); a multiply with
    ``per_sample_weights`` (sum only); mean divides each bag by its size."""
    if not is_float(weight):
        return Cost()
    mode = MODES[mode]
    width = weight.shape[-1]
    gathered = numel(indices) * width
    if mode == "mean":
        return Cost.of_flops(gathered + numel(first_tensor(out)))
    if mode == "sum" and per_sample_weights is not None:
        return Cost.of_flops(2 * gathered)
    return Cost.of_flops(gathered)


@REGISTRY.register(aten.embedding_renorm, aten.embedding_renorm_)
def embedding_renorm(out, self, indices, norm_type, **_) -> Cost:
    """Per index: the row's norm, compare, scale factor (3), and a multiply per element
    (``self`` is the weight)."""
    if not is_float(self):
        return Cost()
    width = self.shape[-1]
    per_row = norm_cost(width, 1, norm_type) + 3 + width
    return Cost.of_flops(numel(indices) * per_row)


# -- backward ----------------------------------------------------------------------------------
def _scaled_rows(n: int, width: int, *, accumulate: bool, scales: int) -> int:
    """FLOPs to move ``n`` gathered gradient rows of ``width`` into the weight's gradient:
    an add per element when accumulating into a dense gradient (a sparse one copies them);
    ``scales`` per-index factors (per-sample weight, 1/bag size, 1/frequency) make the
    scale not 1: a multiply per element, and one divide or multiply per index and factor."""
    flops = n * width if accumulate else 0
    if scales:
        flops += n * width + scales * n
    return flops


def _dense_or_sparse(out, grad, indices, scale_grad_by_freq, *, sparse: bool) -> Cost:
    if not is_float(grad):
        return Cost()
    return Cost.of_flops(_scaled_rows(numel(indices), grad.shape[-1] if grad.dim() else 1,
                                      accumulate=not sparse, scales=int(bool(scale_grad_by_freq))))


@REGISTRY.register(aten.embedding_dense_backward)
def embedding_dense_backward(out, grad_output, indices, *, scale_grad_by_freq, **_) -> Cost:
    """``nn.Embedding``'s weight gradient: each index's gradient row added into its row (one
    add per element); ``scale_grad_by_freq`` divides each index's row by its count first."""
    return _dense_or_sparse(out, grad_output, indices, scale_grad_by_freq, sparse=False)


@REGISTRY.register("aten::embedding_sparse_backward", missing_ok=True)
def embedding_sparse_backward(out, grad, indices, *, scale_grad_by_freq, **_) -> Cost:
    """``nn.Embedding(sparse=True)``: the gradient rows become the values of a sparse
    gradient (copied: free); ``scale_grad_by_freq`` scales them. Composite: torch
    decomposes it before dispatch; named for modes that see composites."""
    return _dense_or_sparse(out, grad, indices, scale_grad_by_freq, sparse=True)


@REGISTRY.register("aten::embedding_backward", missing_ok=True)
def embedding_backward(out, grad, indices, *, scale_grad_by_freq, sparse, **_) -> Cost:
    """Composite: the dense or the sparse backward, as ``sparse`` says."""
    return _dense_or_sparse(out, grad, indices, scale_grad_by_freq, sparse=bool(sparse))


def _bag_backward(grad, indices, scale_grad_by_freq, mode, per_sample_weights, *, sparse: bool) -> Cost:
    if not is_float(grad):
        return Cost()
    mode = MODES[mode]
    width = grad.shape[-1] if grad.dim() else 1
    if mode == "max":  # the gradient goes to the selected (max) element of each bag column
        return Cost.of_flops(numel(grad))
    scales = int(bool(scale_grad_by_freq)) + (mode == "mean") + (per_sample_weights is not None)
    return Cost.of_flops(_scaled_rows(numel(indices), width, accumulate=not sparse, scales=scales))


@REGISTRY.register(aten._embedding_bag_backward)
def embedding_bag_backward(out, grad, indices, *, scale_grad_by_freq, mode, sparse, per_sample_weights=None,
                           **_) -> Cost:
    """``nn.EmbeddingBag``'s weight gradient (dense or sparse, as ``sparse`` says): each
    index's row gets its bag's gradient, scaled by its per-sample weight, 1/bag size
    (mean) and 1/frequency where they apply; ``max`` routes each bag's gradient to the
    selected elements."""
    return _bag_backward(grad, indices, scale_grad_by_freq, mode, per_sample_weights, sparse=bool(sparse))


@REGISTRY.register(aten._embedding_bag_dense_backward)
def embedding_bag_dense_backward(out, grad, indices, *, scale_grad_by_freq, mode, per_sample_weights=None,
                                 **_) -> Cost:
    """The dense half of :func:`embedding_bag_backward` (CPU and CUDA kernels)."""
    return _bag_backward(grad, indices, scale_grad_by_freq, mode, per_sample_weights, sparse=False)


@REGISTRY.register("aten::_embedding_bag_sparse_backward", missing_ok=True)
def embedding_bag_sparse_backward(out, grad, indices, *, scale_grad_by_freq, mode, per_sample_weights=None,
                                  **_) -> Cost:
    """The sparse half (composite: decomposed before dispatch; named for modes that see
    composites)."""
    return _bag_backward(grad, indices, scale_grad_by_freq, mode, per_sample_weights, sparse=True)


@REGISTRY.register(aten._embedding_bag_per_sample_weights_backward)
def embedding_bag_per_sample_weights_backward(out, grad, weight, indices, **_) -> Cost:
    """The gradient of each per-sample weight: the dot product of its bag's gradient with
    its row, ``D`` multiplies and ``D`` adds per index. Counted as FLOPs (no MACs), like the
    forward's weighted sum that it differentiates."""
    if not is_float(grad):
        return Cost()
    width = weight.shape[-1] if weight.dim() else 1
    return Cost.of_flops(2 * numel(indices) * width)
