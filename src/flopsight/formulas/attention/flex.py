"""FlexAttention (``torch.nn.attention.flex_attention.flex_attention``), counted as a unit.

Eager ``flex_attention`` runs the ``flex_attention`` higher-order operator (HOP): a
``TorchFunctionMode`` sees the HOP itself, which :data:`REGISTRY` counts as the unit
``flex_attention`` from its arguments (the HOP's signature: ``query, key, value, score_mod,
block_mask`` -- the ``BlockMask.as_tuple()`` -- ``scale, kernel_options, ...``).

A HOP reaching a ``TorchDispatchMode`` needs a rule for that mode's class (torch raises
``NotImplementedError`` otherwise). The rules registered here, for flopsight's counting
mode, run the HOP's dense (``CompositeExplicitAutograd``) implementation with the mode still
active: its aten ops are then seen like any others -- not counted again under the unit, and
in the backward charged to the unit's ``flex_attention.backward``.

Dense convention: as SDPA (:func:`.sdpa.attention_cost`) on ``(B, H, L, E)`` operands,
GQA included; a ``score_mod`` costs 1 FLOP per score (an elementwise modification, like an
additive bias) and a ``BlockMask`` with a ``mask_mod`` costs 1 per score (a mask). With
``attention="effective"``: the entries of the blocks the ``BlockMask`` computes (partial and
full), clipped at the sequence ends, when its block counts are readable (not meta).

>>> import torch
>>> from flopsight.formulas.attention.flex import flex_attention
>>> q = torch.ones(1, 2, 4, 8)          # scores = 2*4*4 = 32; MACs = 32*8*2
>>> flex_attention(None, q, q, q, None, None, 0.35, {})
Stats(macs=512, flops=1088)
"""

from __future__ import annotations

from typing import Any

import torch

from ..._torch_private import flex_attention_ops
from ..elementwise import elementwise_flops
from ..registry import REGISTRY, Cost
from ..shapes import requires_grad
from .backward import dense_backward
from .convention import effective_family
from .entries import bhle_dims, read_values, readable
from .sdpa import attention_cost

__all__ = ["flex_attention", "flex_attention_backward", "flex_block_entries"]


def _is(fn: Any, name: str) -> bool:
    """Whether ``fn`` is flex_attention's default ``name`` (``_identity`` score_mod,
    ``noop_mask`` mask_mod): imported lazily (torch.nn.attention.flex_attention is not
    imported by ``import torch``)."""
    module = __import__("torch.nn.attention.flex_attention", fromlist=[name])
    return fn is None or fn is getattr(module, name, None)


def _block_mask_fields(block_mask: Any) -> dict | None:
    """The fields of a ``BlockMask.as_tuple()`` that counting needs, or None for another layout.

    ``(q_len, kv_len, kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices, ...,
    Q_BLOCK_SIZE, KV_BLOCK_SIZE, mask_mod)``."""
    if not isinstance(block_mask, (tuple, list)) or len(block_mask) < 9 or not callable(block_mask[-1]):
        return None
    return dict(kv_num_blocks=block_mask[2], kv_indices=block_mask[3], full_kv_num_blocks=block_mask[4],
                full_kv_indices=block_mask[5], q_block=block_mask[-3], kv_block=block_mask[-2],
                mask_mod=block_mask[-1])


def flex_block_entries(fields: dict, q_len: int, kv_len: int, batch_heads: int) -> int | None:
    """Score entries of the blocks a BlockMask computes (partial + full), each block
    ``rows x cols`` clipped at the sequence ends, broadcast to ``batch_heads`` score
    matrices; None when unreadable (meta)."""
    q_block, kv_block = int(fields["q_block"]), int(fields["kv_block"])
    pairs = [(fields["kv_num_blocks"], fields["kv_indices"]), (fields["full_kv_num_blocks"], fields["full_kv_indices"])]
    pairs = [(n, i) for n, i in pairs if n is not None and i is not None]
    if not pairs or not all(readable(t) for pair in pairs for t in pair):
        return None

    def count(num, idx):
        n_q, n_kv = idx.shape[-2], idx.shape[-1]
        rows = (q_len - torch.arange(n_q) * q_block).clamp(0, q_block)  # query rows of each q block
        cols = (kv_len - torch.arange(n_kv) * kv_block).clamp(0, kv_block)  # keys of each kv block
        computed = torch.arange(n_kv) < num.long().cpu()[..., None]  # the first num[b, h, r] indices
        entries = (cols[idx.long().cpu().clamp(0, n_kv - 1)] * computed).sum(-1) * rows
        return int(entries.sum()) * (batch_heads // max(1, num.shape[0] * num.shape[1]))

    return sum(read_values(count, num, idx, key=("flex", q_len, kv_len, q_block, kv_block, batch_heads))
               for num, idx in pairs)


def _flex_scores(query, key, value, block_mask, effective) -> tuple[tuple, int, bool]:
    """(dims, score entries counted, whether a mask_mod applies)."""
    dims = bhle_dims(query, key, value)
    fields = _block_mask_fields(block_mask)
    masked = fields is not None and not _is(fields["mask_mod"], "noop_mask")
    scores = dims[0] * dims[1] * dims[2]
    if effective and fields is not None:
        kept = flex_block_entries(fields, dims[1], dims[2], dims[0])
        scores = scores if kept is None else kept
    return dims, scores, masked


@effective_family
def flex_attention(out, query, key, value, score_mod, block_mask, scale=None, kernel_options=None, *,
                   effective=False, **_) -> Cost:
    """The ``flex_attention`` HOP: SDPA's dense count, + 1 FLOP per score for a ``score_mod``
    and 1 for a ``mask_mod``; ``effective``: the BlockMask's computed entries."""
    dims, scores, masked = _flex_scores(query, key, value, block_mask, effective)
    bh, q_len, kv_len, e, ev = dims
    cost = attention_cost(bh, q_len, kv_len, e, ev, masked=masked, scores=scores)
    if not _is(score_mod, "_identity"):
        cost = cost + Cost.of_flops(elementwise_flops(scores))
    return cost


@effective_family
def flex_attention_backward(out, query, key, value, score_mod, block_mask, scale=None, kernel_options=None, *,
                            effective=False, **_) -> Cost:
    """Backward of the ``flex_attention`` HOP: SDPA's backward (:func:`.backward.attention_backward_cost`)
    for the operands that require grad; ``score_mod`` and ``mask_mod`` pass the score gradient
    through (0 FLOPs, as a mask's add)."""
    dims, scores, _masked = _flex_scores(query, key, value, block_mask, effective)
    grads = (requires_grad(query), requires_grad(key), requires_grad(value), False)
    return dense_backward(dims, query, key, value, None, grads=grads, dropout_p=0.0, scores=scores)


REGISTRY.register_unit(flex_attention_ops()[0], name="flex_attention", backward=flex_attention_backward)(flex_attention)
