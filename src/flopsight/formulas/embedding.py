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

>>> import torch
>>> from flopsight.formulas.embedding import embedding_bag
>>> w, idx, offsets = torch.ones(100, 16), torch.zeros(12, dtype=torch.long), torch.tensor([0, 4, 8])
>>> bags = (torch.ones(3, 16),)
>>> embedding_bag(bags, w, idx, offsets, False, 0)   # sum: 12*16
Cost(macs=0, flops=192)
>>> embedding_bag(bags, w, idx, offsets, False, 1)   # mean: 12*16 + 3*16
Cost(macs=0, flops=240)
"""

from __future__ import annotations

import torch

from .reduction import norm_cost
from .registry import REGISTRY, Cost
from .shapes import arg, first_tensor, is_float, numel

__all__ = ["embedding_bag", "embedding_renorm", "MODES"]

aten = torch.ops.aten

#: ``mode`` as the aten ops receive it (``F.embedding_bag`` maps the strings to these).
MODES = {0: "sum", 1: "mean", 2: "max", "sum": "sum", "mean": "mean", "max": "max"}

# A lookup copies rows; DeepSpeed counts it as 0 and so do we.
REGISTRY.zero_cost(aten.embedding)


@REGISTRY.register(aten.embedding_bag, aten._embedding_bag, aten._embedding_bag_forward_only)
def embedding_bag(out, weight, indices, offsets=None, *args, **kwargs) -> Cost:
    """``(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights, ...)``."""
    if not is_float(weight):
        return Cost()
    mode = MODES[arg(args, kwargs, 1, "mode", 0)]
    psw = arg(args, kwargs, 3, "per_sample_weights", None)
    width = weight.shape[-1]
    gathered = numel(indices) * width
    if mode == "mean":
        return Cost.of_flops(gathered + numel(first_tensor(out)))
    if mode == "sum" and psw is not None:
        return Cost.of_flops(2 * gathered)
    return Cost.of_flops(gathered)


@REGISTRY.register(aten.embedding_renorm, aten.embedding_renorm_)
def embedding_renorm(out, weight, indices, max_norm, norm_type=2.0, *args, **kwargs) -> Cost:
    """Per index: the row's norm, compare, scale factor (3), and a multiply per element."""
    if not is_float(weight):
        return Cost()
    width = weight.shape[-1]
    per_row = norm_cost(width, 1, norm_type) + 3 + width
    return Cost.of_flops(numel(indices) * per_row)
