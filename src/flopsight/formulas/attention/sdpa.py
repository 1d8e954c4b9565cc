"""``F.scaled_dot_product_attention``, counted as a unit, and every fused forward kernel it may
run (math, CPU and CUDA flash, memory-efficient, cuDNN, the out-of-tree hook), dense, packed
``(total, H, E)`` or on jagged nested tensors; :func:`attention_cost`, the core that
multi-head and flex attention count with too.

Each kernel is registered at dispatch for when it is reached without the unit, and counts
what the unit counts:

>>> import torch
>>> from flopsight.formulas import REGISTRY
>>> q = torch.ones(1, 2, 8, 4)   # scores = 2*8*8 = 128; MACs = 128*4*2; FLOPs + scale + softmax
>>> REGISTRY.resolve(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default).cost(None, (q, q, q), {})
Stats(macs=1024, flops=2304)
"""

from __future__ import annotations

import torch.nn.functional as F

from ..activation import softmax_flops
from ..dropout import dropout_flops
from ..elementwise import elementwise_flops
from ..registry import REGISTRY, Cost
from .backward import scaled_dot_product_attention_backward
from .convention import effective_family
from .entries import (
    bhle_dims,
    blhe_dims,
    efficient_upper,
    flash_band,
    nested_entries,
    no_band,
    packed_entries,
    score_entries,
)

__all__ = [
    "attention_cost",
    "scaled_dot_product_attention",
    "sdpa_with_bias",
    "flash_attention_forward",
    "efficient_attention_forward",
    "cudnn_attention_forward",
    "varlen_forward",
]


# -- the attention core --------------------------------------------------------------------
def attention_cost(
    batch_heads: int,
    q_len: int,
    kv_len: int,
    head_dim: int,
    value_dim: int,
    *,
    masked: bool = False,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scores: int | None = None,
) -> Cost:
    """``softmax(Q K^T * scale + mask) V`` for ``batch_heads`` (query) heads.

    ``scores``: the score entries counted, by default all ``batch_heads * q_len * kv_len``
    (dense); the effective convention passes the kept ones. Every term is per score entry.
    ``is_causal`` is accepted from every caller and ignored: a causal count is a ``scores``.
    """
    del is_causal  # carried by ``scores``
    if scores is None:
        scores = batch_heads * q_len * kv_len
    macs = scores * head_dim + scores * value_dim
    extra = elementwise_flops(scores) + softmax_flops(scores)  # the scale (a multiply), the softmax
    if masked:
        extra += elementwise_flops(scores)  # the additive mask / bias
    extra += dropout_flops(scores, dropout_p, training=True)
    return Cost.of_product(macs, extra)


def varlen_forward(query, key, value, total_q, total_k, max_q, max_k, cu_q, cu_k, *, masked, dropout_p, effective,
                   band) -> Cost:
    """Forward of packed ``(total, H, E)`` operands (the kernels' ``cum_seq_q`` calls, :mod:`.varlen`'s
    ops); ``band`` as in :func:`.entries.packed_entries`."""
    heads, e, ev = query.shape[-2], query.shape[-1], value.shape[-1]
    scores = packed_entries(heads, total_q, total_k, max_q, max_k, cu_q, cu_k, effective=effective, band=band)
    return attention_cost(heads, 0, 0, e, ev, masked=masked, dropout_p=dropout_p or 0.0, scores=scores)


# What a jagged nested tensor runs around its SDPA unit (reading its values, offsets, lengths
# and cached extreme lengths, viewing values as a nested tensor): metadata and views, free.
REGISTRY.zero_cost(
    "aten::_nested_get_values", "aten::_nested_get_offsets", "aten::_nested_get_lengths",
    "aten::_nested_get_ragged_idx", "aten::_nested_get_min_seqlen", "aten::_nested_get_max_seqlen",
    "aten::_nested_get_jagged_dummy", "aten::_nested_view_from_jagged", "aten::sym_is_contiguous", "aten::dim",
    "prim::layout",
    missing_ok=True,
)


# -- scaled_dot_product_attention: the unit's formulas and every kernel it may run -------------
@effective_family
def scaled_dot_product_attention(
    out, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, effective=False, **_
) -> Cost:
    """``F.scaled_dot_product_attention`` (bound by ``aten::scaled_dot_product_attention``'s
    schema) and the kernels with the same argument names: the math kernels, the CPU flash
    kernel (whose ``attn_mask`` is a float keyword) and CUDA flash (no mask; its ``.quantized``
    overload adds descale tensors). ``is_causal`` is top-left aligned, as SDPA's."""
    if query.is_nested:
        scores = nested_entries(query, key, effective=effective, is_causal=is_causal)
        e, ev = query.shape[-1], value.shape[-1]
        return attention_cost(0, 0, 0, e, ev, masked=attn_mask is not None, dropout_p=dropout_p or 0.0,
                              scores=scores)
    bh, q_len, kv_len, e, ev = bhle_dims(query, key, value)
    scores = score_entries(bh, q_len, kv_len, effective=effective, mask=attn_mask, upper=0 if is_causal else None)
    return attention_cost(bh, q_len, kv_len, e, ev, masked=attn_mask is not None, dropout_p=dropout_p or 0.0,
                          scores=scores)


@effective_family
def sdpa_with_bias(out, query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False, *, effective=False,
                   **_) -> Cost:
    """The fused SDPA kernels whose mask is an additive ``attn_bias``: memory-efficient, cuDNN,
    and the out-of-tree hook (``_fused_attention_overrideable``); ``(B, H, L, E)``."""
    return scaled_dot_product_attention(out, query, key, value, attn_bias, dropout_p, is_causal, effective=effective)


@effective_family
def flash_attention_forward(
    result, /, query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, *,
    window_size_left=None, window_size_right=None, alibi_slopes=None, block_table=None, effective=False, **_,
) -> Cost:
    """The flash kernel (and ``_no_dropout_inplace``, whose ``out`` buffer comes first):
    ``(B, L, H, E)``, or packed ``(total, H, E)`` when ``cum_seq_q`` is given (nested tensors,
    ``torch.nn.attention.varlen``). ALiBi slopes are an additive bias, counted like a mask.
    Causal and sliding windows are aligned bottom-right."""
    masked = alibi_slopes is not None
    band = flash_band(is_causal, window_size_left, window_size_right)
    if cum_seq_q is not None:
        total_k = None if (cum_seq_k is None or block_table is not None) else key.shape[0]
        return varlen_forward(query, key, value, query.shape[0], total_k, max_q, max_k, cum_seq_q, cum_seq_k,
                              masked=masked, dropout_p=dropout_p, effective=effective, band=band)
    bh, q_len, kv_len, e, ev = blhe_dims(query, key, value)
    lower, upper = band(q_len, kv_len)
    scores = score_entries(bh, q_len, kv_len, effective=effective, lower=lower, upper=upper)
    return attention_cost(bh, q_len, kv_len, e, ev, masked=masked, dropout_p=dropout_p or 0.0, scores=scores)


@effective_family
def efficient_attention_forward(
    out, query, key, value, bias, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
    custom_mask_type, *, effective=False, **_,
) -> Cost:
    """The memory-efficient kernel: ``(B, L, H, E)``; packed sequences are ``(1, total, H, E)``
    with ``cu_seqlens_q``. ``custom_mask_type`` (causal) costs nothing in the dense count."""
    masked = bias is not None

    def band(q_len, kv_len):
        return None, efficient_upper(custom_mask_type, q_len, kv_len)

    if cu_seqlens_q is not None:
        # The kernel returns the batch maxima it used (outputs 4 and 5) when not given.
        if max_seqlen_q is None and isinstance(out, (tuple, list)) and len(out) > 5:
            max_seqlen_q, max_seqlen_k = out[4], out[5]
        total_k = key.shape[1] if cu_seqlens_k is not None else None
        return varlen_forward(query, key, value, query.shape[1], total_k, max_seqlen_q, max_seqlen_k, cu_seqlens_q,
                              cu_seqlens_k, masked=masked, dropout_p=dropout_p, effective=effective, band=band)
    bh, q_len, kv_len, e, ev = blhe_dims(query, key, value)
    scores = score_entries(bh, q_len, kv_len, effective=effective, mask=bias, upper=band(q_len, kv_len)[1])
    return attention_cost(bh, q_len, kv_len, e, ev, masked=masked, dropout_p=dropout_p or 0.0, scores=scores)


@effective_family
def cudnn_attention_forward(
    out, query, key, value, attn_bias, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p=0.0, is_causal=False, *,
    effective=False, **_,
) -> Cost:
    """The cuDNN kernel: ``(B, H, L, E)``, or packed ``(total, H, E)`` with ``cum_seq_q``
    (causal aligned top-left, cuDNN's causal mask)."""
    masked = attn_bias is not None
    if cum_seq_q is not None:
        total_k = key.shape[0] if cum_seq_k is not None else None
        band = (lambda q_len, kv_len: (None, 0)) if is_causal else no_band
        return varlen_forward(query, key, value, query.shape[0], total_k, max_q, max_k, cum_seq_q, cum_seq_k,
                              masked=masked, dropout_p=dropout_p, effective=effective, band=band)
    return scaled_dot_product_attention(out, query, key, value, attn_bias, dropout_p, is_causal, effective=effective)


REGISTRY.register_unit(F.scaled_dot_product_attention, name="scaled_dot_product_attention",
                       backward=scaled_dot_product_attention_backward)(scaled_dot_product_attention)
REGISTRY.register(
    # composite in eager mode, so normally never seen at dispatch; registered so that a backend
    # or tracer that keeps it whole is counted the same
    "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_attention_math",
    "aten::_scaled_dot_product_attention_math_for_mps",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_flash_attention",
    missing_ok=True,
)(scaled_dot_product_attention)
REGISTRY.register(
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::_scaled_dot_product_fused_attention_overrideable",
    missing_ok=True,
)(sdpa_with_bias)
REGISTRY.register("aten::_flash_attention_forward", "aten::_flash_attention_forward_no_dropout_inplace",
                  missing_ok=True)(flash_attention_forward)
REGISTRY.register("aten::_efficient_attention_forward", missing_ok=True)(efficient_attention_forward)
REGISTRY.register("aten::_cudnn_attention_forward", missing_ok=True)(cudnn_attention_forward)
