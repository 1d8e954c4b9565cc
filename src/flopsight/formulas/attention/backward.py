"""Backward formulas of attention: ``F.scaled_dot_product_attention``'s (the unit's backward,
registered with it in :mod:`.sdpa`) and every fused backward kernel's, dense and packed.

They count the gradients needed (``dV``, ``dP``, the softmax, scale and dropout backward,
``dQ``, ``dK``) and never a flash kernel's recomputation.

>>> import torch
>>> from flopsight.formulas.attention import scaled_dot_product_attention_backward
>>> q = torch.ones(2, 4, 16, 8).requires_grad_()   # B=2, H=4, L=16, E=8
>>> kv = torch.ones(2, 4, 32, 8)                   # S=32: scores = 2*4*16*32 = 4096
>>> # only Q requires grad: dP, softmax and scale backward, dQ
>>> # MACs = 4096*8 (dP) + 4096*8 (dQ); FLOPs = 2*MACs + 4*4096 (softmax) + 4096 (scale)
>>> scaled_dot_product_attention_backward(None, q, kv, kv)
Stats(macs=65536, flops=151552)
"""

from __future__ import annotations

from ..activation import softmax_backward_flops
from ..dropout import dropout_backward_flops
from ..elementwise import elementwise_flops
from ..registry import REGISTRY, Cost
from ..shapes import numel, requires_grad
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
    "attention_backward_cost",
    "dense_backward",
    "scaled_dot_product_attention_backward",
    "summed_back",
    "varlen_backward",
]


# -- the attention core's backward -----------------------------------------------------------
# Model FLOPs of the gradients the backward pass needs, device-independent. Flash kernels
# recompute the scores and the softmax in their backward instead of storing them: that
# recomputation is an implementation detail (a memory/compute trade) and is not counted, so a
# flash kernel, the math decomposition and meta agree.
def attention_backward_cost(
    batch_heads: int,
    q_len: int,
    kv_len: int,
    head_dim: int,
    value_dim: int,
    *,
    query_grad: bool = True,
    key_grad: bool = True,
    value_grad: bool = True,
    mask_grad: bool = False,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    summed: int = 0,
    scores: int | None = None,
) -> Cost:
    """Backward of ``O = dropout(softmax(Q K^T * scale + mask)) V`` for ``batch_heads`` (query)
    heads, computing only the gradients asked for (``*_grad``):

    * ``dV = P^T dO`` (``value_grad``): ``scores * Ev`` MACs;
    * the gradient of the scores, needed for ``dQ``, ``dK`` or a mask that requires grad:
      ``dP = dO V^T`` (``scores * Ev`` MACs), the dropout backward (1 per score when
      ``dropout_p > 0``), the softmax backward (``softmax_backward_flops``: 4 per score);
    * the scale's backward (1 per score) when ``dQ`` or ``dK`` is needed (the mask's
      gradient is taken before the scale: the add passes it through unchanged);
    * ``dQ = dS K`` (``query_grad``) and ``dK = dS^T Q`` (``key_grad``): ``scores * E`` MACs each;
    * ``summed``: gradient elements summed back over broadcast dimensions -- shared KV heads
      (GQA), broadcast batch dims, a broadcast mask --, 1 FLOP each (the reduction
      convention: ``aten.sum`` counts every element it reads).

    ``scores`` as in :func:`attention_cost` (default: all entries); ``is_causal`` is ignored.
    """
    del is_causal  # carried by ``scores``
    if scores is None:
        scores = batch_heads * q_len * kv_len
    macs = 0
    flops = summed
    if value_grad:
        macs += scores * value_dim  # dV = P^T dO
    if query_grad or key_grad or mask_grad:
        macs += scores * value_dim  # dP = dO V^T
        flops += dropout_backward_flops(scores, dropout_p, training=True)  # dP * mask * scale
        flops += softmax_backward_flops(scores)
    if query_grad or key_grad:
        flops += elementwise_flops(scores)  # dS * scale
    if query_grad:
        macs += scores * head_dim  # dQ = dS K
    if key_grad:
        macs += scores * head_dim  # dK = dS^T Q
    return Cost.of_product(macs, flops)


def summed_back(t, grad: bool, full: int) -> int:
    """Elements summed to reduce a gradient computed at ``full`` elements (one per query
    head and batch) back to ``t``'s shape, when ``t`` is smaller (broadcast or shared)."""
    return full if grad and t is not None and numel(t) < full else 0


def dense_backward(dims, query, key, value, mask, *, grads, dropout_p, scores) -> Cost:
    """Backward of one attention call of ``dims`` = (score matrices, L, S, E, Ev); ``grads`` =
    which of (query, key, value, mask) get a gradient; ``scores`` the entries counted."""
    bh, q_len, kv_len, e, ev = dims
    q_g, k_g, v_g, m_g = grads
    m_g = bool(m_g) and mask is not None
    summed = (
        summed_back(query, q_g, bh * q_len * e)
        + summed_back(key, k_g, bh * kv_len * e)  # GQA: dK of the shared heads sums over the group
        + summed_back(value, v_g, bh * kv_len * ev)
        + summed_back(mask, m_g, bh * q_len * kv_len)
    )
    return attention_backward_cost(
        bh, q_len, kv_len, e, ev, query_grad=bool(q_g), key_grad=bool(k_g), value_grad=bool(v_g), mask_grad=m_g,
        dropout_p=dropout_p or 0.0, summed=summed, scores=scores,
    )


def _packed_backward(query, key, value, scores, *, dropout_p) -> Cost:
    """Backward of packed ``(total, H, E)`` attention, all of ``dQ``, ``dK``, ``dV`` (what the
    varlen kernels return), for ``scores`` entries; with fewer KV heads, ``dK``/``dV`` of
    every key position sum over the group."""
    heads, e, ev = query.shape[-2], query.shape[-1], value.shape[-1]
    summed = 0
    if key.shape[-2] < heads:
        keys = numel(key) // (key.shape[-2] * e)  # total key positions
        summed = heads * keys * (e + ev)
    return attention_backward_cost(heads, 0, 0, e, ev, dropout_p=dropout_p or 0.0, summed=summed, scores=scores)


def varlen_backward(query, key, value, total_q, total_k, max_q, max_k, cu_q, cu_k, *, dropout_p, effective,
                    band) -> Cost:
    """Backward of packed ``(total, H, E)`` operands (the kernels' ``cum_seq_q`` calls,
    :mod:`.varlen`'s ops): the forward's score entries, ``band`` as in :func:`.entries.packed_entries`."""
    scores = packed_entries(query.shape[-2], total_q, total_k, max_q, max_k, cu_q, cu_k, effective=effective,
                            band=band)
    return _packed_backward(query, key, value, scores, dropout_p=dropout_p)


@effective_family
def scaled_dot_product_attention_backward(
    out, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, effective=False, **_
) -> Cost:
    """Backward of ``F.scaled_dot_product_attention``: the gradients of the operands that
    require grad (read at forward time), whatever kernel the device runs."""
    grads = (requires_grad(query), requires_grad(key), requires_grad(value), requires_grad(attn_mask))
    if query.is_nested:
        scores = nested_entries(query, key, effective=effective, is_causal=is_causal)
        e, ev = query.shape[-1], value.shape[-1]
        return attention_backward_cost(0, 0, 0, e, ev, query_grad=grads[0], key_grad=grads[1],
                                       value_grad=grads[2], dropout_p=dropout_p or 0.0, scores=scores)
    dims = bhle_dims(query, key, value)
    scores = score_entries(*dims[:3], effective=effective, mask=attn_mask, upper=0 if is_causal else None)
    return dense_backward(dims, query, key, value, attn_mask, grads=grads, dropout_p=dropout_p, scores=scores)


# The fused backward kernels compute dQ, dK and dV whenever they run (the efficient and
# overrideable ones take a ``grad_input_mask`` for (q, k, v, bias)); a bias gets a gradient
# only when asked for.
_ALL = (True, True, True, False)


@effective_family
def sdpa_flash_backward(result, /, query, key, value, dropout_p, is_causal, attn_mask=None, *, effective=False,
                        **_) -> Cost:
    """The flash kernels' backward, ``(B, H, L, E)``: CPU (``attn_mask`` a float keyword, no
    gradient for it) and CUDA (no mask; its dense calls leave ``cum_seq_q`` empty)."""
    dims = bhle_dims(query, key, value)
    scores = score_entries(*dims[:3], effective=effective, mask=attn_mask, upper=0 if is_causal else None)
    return dense_backward(dims, query, key, value, attn_mask, grads=_ALL, dropout_p=dropout_p, scores=scores)


@effective_family
def sdpa_efficient_backward(result, /, query, key, value, attn_bias, dropout_p, grad_input_mask, is_causal=False,
                            *, effective=False, **_) -> Cost:
    """Memory-efficient and out-of-tree (overrideable) backward: ``(B, H, L, E)``;
    ``grad_input_mask`` says which of (q, k, v, bias) are computed."""
    dims = bhle_dims(query, key, value)
    scores = score_entries(*dims[:3], effective=effective, mask=attn_bias, upper=0 if is_causal else None)
    return dense_backward(dims, query, key, value, attn_bias, grads=tuple(grad_input_mask), dropout_p=dropout_p,
                          scores=scores)


@effective_family
def sdpa_cudnn_backward(result, /, query, key, value, attn_bias, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
                        is_causal, *, effective=False, **_) -> Cost:
    """cuDNN backward: ``(B, H, L, E)``, or packed ``(total, H, E)`` with ``cum_seq_q``; it
    returns no gradient for ``attn_bias``."""
    if cum_seq_q is not None:
        total_k = key.shape[0] if cum_seq_k is not None else None
        band = (lambda q_len, kv_len: (None, 0)) if is_causal else no_band
        return varlen_backward(query, key, value, query.shape[0], total_k, max_q, max_k, cum_seq_q, cum_seq_k,
                               dropout_p=dropout_p, effective=effective, band=band)
    dims = bhle_dims(query, key, value)
    scores = score_entries(*dims[:3], effective=effective, mask=attn_bias, upper=0 if is_causal else None)
    return dense_backward(dims, query, key, value, attn_bias, grads=_ALL, dropout_p=dropout_p, scores=scores)


@effective_family
def flash_attention_backward(result, /, query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
                             *, window_size_left=None, window_size_right=None, effective=False, **_) -> Cost:
    """The flash kernel's backward: ``(B, L, H, E)``, or packed ``(total, H, E)`` when
    ``cum_seq_q`` is given; causal and windows aligned bottom-right as in the forward."""
    band = flash_band(is_causal, window_size_left, window_size_right)
    if cum_seq_q is not None:
        total_k = key.shape[0] if cum_seq_k is not None else None
        return varlen_backward(query, key, value, query.shape[0], total_k, max_q, max_k, cum_seq_q, cum_seq_k,
                               dropout_p=dropout_p, effective=effective, band=band)
    dims = blhe_dims(query, key, value)
    lower, upper = band(dims[1], dims[2])
    scores = score_entries(*dims[:3], effective=effective, lower=lower, upper=upper)
    return dense_backward(dims, query, key, value, None, grads=_ALL, dropout_p=dropout_p, scores=scores)


@effective_family
def efficient_attention_backward(
    result, /, query, key, value, bias, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
    custom_mask_type, bias_requires_grad, *, effective=False, **_,
) -> Cost:
    """The memory-efficient kernel's backward: ``(B, L, H, E)``, or packed ``(1, total, H, E)``
    with ``cu_seqlens_q``; the bias gets a gradient when ``bias_requires_grad``."""

    def band(q_len, kv_len):
        return None, efficient_upper(custom_mask_type, q_len, kv_len)

    if cu_seqlens_q is not None:
        total_k = key.shape[1] if cu_seqlens_k is not None else None
        return varlen_backward(query, key, value, query.shape[1], total_k, max_seqlen_q, max_seqlen_k, cu_seqlens_q,
                               cu_seqlens_k, dropout_p=dropout_p, effective=effective, band=band)
    dims = blhe_dims(query, key, value)
    scores = score_entries(*dims[:3], effective=effective, mask=bias, upper=band(dims[1], dims[2])[1])
    return dense_backward(dims, query, key, value, bias, grads=(True, True, True, bias_requires_grad),
                          dropout_p=dropout_p, scores=scores)


REGISTRY.register("aten::_scaled_dot_product_flash_attention_for_cpu_backward",
                  "aten::_scaled_dot_product_flash_attention_backward", missing_ok=True)(sdpa_flash_backward)
REGISTRY.register("aten::_scaled_dot_product_efficient_attention_backward",
                  "aten::_scaled_dot_product_fused_attention_overrideable_backward",
                  missing_ok=True)(sdpa_efficient_backward)
REGISTRY.register("aten::_scaled_dot_product_cudnn_attention_backward", "aten::_cudnn_attention_backward",
                  missing_ok=True)(sdpa_cudnn_backward)
REGISTRY.register("aten::_flash_attention_backward", missing_ok=True)(flash_attention_backward)
REGISTRY.register("aten::_efficient_attention_backward", missing_ok=True)(efficient_attention_backward)
