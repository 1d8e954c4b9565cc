"""Multi-head attention: ``F.multi_head_attention_forward`` (``nn.MultiheadAttention``'s slow
path), counted as a unit with its backward, and the native fast paths that ``nn.MultiheadAttention``
and ``nn.TransformerEncoderLayer`` take in eval + no_grad (``aten::_native_multi_head_attention``,
``aten::_transformer_encoder_layer_fwd``), counted as the slow path counts the same call.

The attention core is SDPA's (:func:`.sdpa.attention_cost`, :func:`.backward.attention_backward_cost`).

>>> import torch
>>> x = torch.ones(4, 2, 16)                      # L=S=4, N=2, D=16
>>> w, b, w_out, b_out = torch.ones(48, 16), torch.ones(48), torch.ones(16, 16), torch.ones(16)
>>> # H=2: in-projections 3*2*4*16*16 = 6144 MACs; scores 2*2*4*4 = 64, MACs 64*8*2 = 1024;
>>> # out-projection 2*4*16*16 = 2048; FLOPs = 2*MACs + biases 384+128 + scale and softmax 2*64
>>> multi_head_attention(None, x, x, x, 16, 2, w, b, None, None, False, 0.0, w_out, b_out, False,
...                      need_weights=False)
Stats(macs=9216, flops=19072)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..activation import activation_flops
from ..elementwise import elementwise_flops
from ..matmul import linear_cost
from ..norm import layer_norm_flops
from ..reduction import mean_flops
from ..registry import REGISTRY, Cost, forward_names
from ..shapes import numel
from .backward import attention_backward_cost, requires_grad, summed_back
from .convention import effective_family
from .entries import band_entries, kept_entries, read_values, readable
from .sdpa import attention_cost

__all__ = [
    "multi_head_attention",
    "multi_head_attention_backward",
    "native_multi_head_attention",
    "transformer_encoder_layer_fwd",
]


def _head_mean_flops(batch: int, heads: int, q_len: int, kv_len: int) -> int:
    """Averaging the attention weights over heads (``need_weights``), as ``aten.mean`` counts it
    (the fast path runs ``sum`` then ``/= heads``; the slow path runs ``mean(dim=1)``)."""
    return mean_flops(batch * heads * q_len * kv_len, batch * q_len * kv_len)


def _in_projection(
    batch: int, q_len: int, kv_len: int, embed_dim: int, q_in: int, k_in: int, v_in: int, bias: bool
) -> Cost:
    """Q, K, V projections to ``embed_dim``: packed (one ``3E x E`` weight, however torch
    splits the product for self / encoder-decoder attention) or separate (``kdim``/``vdim``)
    weights cost the same: ``q_len`` rows through ``E x q_in``, ``kv_len`` rows through
    ``E x k_in`` and ``E x v_in``."""
    return (
        linear_cost(batch * q_len, q_in, embed_dim, bias)
        + linear_cost(batch * kv_len, k_in, embed_dim, bias)
        + linear_cost(batch * kv_len, v_in, embed_dim, bias)
    )


def _mha_dims(query, key, num_heads, bias_k, add_zero_attn, static_k) -> tuple[int, ...]:
    """(batch, query length, key length, embed dim, head dim, attended key positions) of an
    ``F.multi_head_attention_forward`` call: ``(L, N, D)`` inputs or unbatched ``(L, D)``."""
    batch = query.shape[1] if query.dim() == 3 else 1
    q_len, kv_len, embed_dim = query.shape[0], key.shape[0], query.shape[-1]
    attended = static_k.shape[1] if static_k is not None else kv_len
    attended += (bias_k is not None) + bool(add_zero_attn)  # one appended position each
    return batch, q_len, kv_len, embed_dim, embed_dim // num_heads, attended


def _mha_entries(batch, heads, q_len, attended, *, effective, attn_mask, key_padding_mask, is_causal) -> int:
    """Score entries of multi-head attention: all ``N * H * L * Sa`` (dense); with
    ``effective``, those both masks keep (``nn.MultiheadAttention``'s masks drop ``True`` and
    ``-inf`` entries; appended ``bias_k``/zero positions are always kept), when readable;
    else the top-left causal band if ``is_causal``."""
    dense = batch * heads * q_len * attended
    if not effective:
        return dense
    masks = [m for m in (attn_mask, key_padding_mask) if m is not None]
    if masks and all(readable(m) for m in masks):

        def keep(m):
            return ~m if m.dtype == torch.bool else ~torch.isneginf(m)

        def count(*ms):
            attn = keep(attn_mask) if attn_mask is not None else None
            kpm = keep(key_padding_mask) if key_padding_mask is not None else None
            given = attn if attn is not None else kpm
            if given is None:  # no mask, every entry kept (not reached: count runs with a mask)
                return dense
            s, device = given.shape[-1], given.device  # what is made here goes on the masks' device
            # per (batch, head): the columns each row keeps, restricted to kept keys
            cols = attn.reshape(-1, q_len, s).sum(-2) if attn is not None else torch.full((1, s), q_len, device=device)
            cols = cols.reshape(-1, 1, s) if cols.shape[0] == 1 else cols.reshape(batch, heads, s)
            rows = kpm.reshape(batch, 1, s) if kpm is not None else torch.ones(1, 1, s, dtype=torch.bool, device=device)
            per = (cols * rows).sum(-1)  # (batch or 1, heads or 1)
            extra = q_len * (attended - s)  # appended positions: kept
            return int(per.sum()) * (batch * heads // per.numel()) + batch * heads * extra

        return read_values(count, *masks, key=("mha", batch, heads, q_len, attended,
                                                attn_mask is not None, key_padding_mask is not None))
    if is_causal:
        return batch * heads * band_entries(q_len, attended, None, 0)
    return dense


@effective_family
def multi_head_attention(
    out, query, key, value, embed_dim_to_check, num_heads, in_proj_weight=None, in_proj_bias=None, bias_k=None,
    bias_v=None, add_zero_attn=False, dropout_p=0.0, out_proj_weight=None, out_proj_bias=None, training=True,
    key_padding_mask=None, need_weights=True, attn_mask=None, static_k=None, average_attn_weights=True,
    is_causal=False, *, effective=False, **_,
) -> Cost:
    """``F.multi_head_attention_forward``: inputs ``(L, N, E)`` (or unbatched ``(L, E)``);
    ``nn.MultiheadAttention`` transposes ``batch_first`` inputs before the call.

    = in-projection + attention core (:func:`attention_cost`, so it agrees with SDPA) +
    out-projection, plus:

    * ``add_bias_kv`` and ``add_zero_attn`` each append one key/value position (``S + 1``);
      ``static_k`` replaces the keys (the in-projection still runs: torch computes it).
    * masks: any ``attn_mask`` or ``key_padding_mask`` is applied once per score; when both
      are given, merging them is one more add per score (torch adds them, on both paths).
    * ``need_weights`` with ``average_attn_weights``: the mean of the weights over heads, as
      ``aten.mean`` counts it (``N*H*L*S`` adds + ``N*L*S`` divides); the weights themselves
      are the softmax output and cost nothing more.
    * dropout on the weights only when ``training`` and ``dropout_p > 0``.
    """
    batch, q_len, kv_len, embed_dim, head_dim, attended = _mha_dims(query, key, num_heads, bias_k, add_zero_attn,
                                                                   static_k)
    batch_heads = batch * num_heads

    cost = _in_projection(batch, q_len, kv_len, embed_dim, query.shape[-1], key.shape[-1], value.shape[-1],
                          in_proj_bias is not None)

    scores = batch_heads * q_len * attended
    if attn_mask is not None and key_padding_mask is not None:
        cost = cost + Cost.of_flops(elementwise_flops(scores))  # merging the masks: an add (dense)
    kept = _mha_entries(batch, num_heads, q_len, attended, effective=effective, attn_mask=attn_mask,
                        key_padding_mask=key_padding_mask, is_causal=is_causal)
    cost = cost + attention_cost(
        batch_heads, q_len, attended, head_dim, head_dim,
        masked=attn_mask is not None or key_padding_mask is not None,
        dropout_p=dropout_p if training else 0.0,
        scores=kept,
    )
    if need_weights and average_attn_weights:
        cost = cost + Cost.of_flops(_head_mean_flops(batch, num_heads, q_len, attended))
    out_features = out_proj_weight.shape[0] if out_proj_weight is not None else embed_dim
    return cost + linear_cost(batch * q_len, embed_dim, out_features, out_proj_bias is not None)


def _linear_backward(rows: int, in_features: int, out_features: int, *, input_grad, weight_grad, bias_grad) -> Cost:
    """Backward of ``rows`` vectors through a linear map, the products priced by
    :func:`matmul.linear_cost`: ``dX = dY W`` and ``dW = dY^T X`` are ``rows * in * out``
    MACs each; the bias gradient sums ``dY`` over the rows (1 FLOP per element summed)."""
    cost = Cost()
    if input_grad:
        cost = cost + linear_cost(rows, out_features, in_features, False)
    if weight_grad:
        cost = cost + linear_cost(in_features, rows, out_features, False)
    if bias_grad:
        cost = cost + Cost.of_flops(rows * out_features)
    return cost


@effective_family
def multi_head_attention_backward(
    out, query, key, value, embed_dim_to_check, num_heads, in_proj_weight=None, in_proj_bias=None, bias_k=None,
    bias_v=None, add_zero_attn=False, dropout_p=0.0, out_proj_weight=None, out_proj_bias=None, training=True,
    key_padding_mask=None, need_weights=True, attn_mask=None, use_separate_proj_weight=False, q_proj_weight=None,
    k_proj_weight=None, v_proj_weight=None, static_k=None, static_v=None, average_attn_weights=True,
    is_causal=False, *, effective=False, **_,
) -> Cost:
    """Backward of ``F.multi_head_attention_forward``: out-projection backward + attention
    core backward (:func:`attention_backward_cost`, as for SDPA) + in-projection backward,
    each gradient only where something requires it:

    * a projection's input gets a gradient when it requires grad, its weight and bias when
      they do (packed or separate weights cost the same);
    * the projected queries / keys / values need a gradient when their projection's input,
      weight or bias does (keys also for ``bias_k``; ``static_k`` replaces the projected
      keys, whose projection then gets no gradient); the core's output gradient (the
      out-projection's ``dX``) is needed when any of them, or a mask, does;
    * ``bias_k``/``bias_v`` are repeated over the batch: their gradient sums it (``N * D``);
    * the ``need_weights`` head average is not counted: the averaged weights are a
      by-product whose backward runs only if a loss uses them (see the conventions doc).
    """
    rg = requires_grad
    batch, q_len, kv_len, embed_dim, head_dim, attended = _mha_dims(query, key, num_heads, bias_k, add_zero_attn,
                                                                   static_k)
    if use_separate_proj_weight:
        w_q, w_k, w_v = q_proj_weight, k_proj_weight, v_proj_weight
    else:
        w_q = w_k = w_v = in_proj_weight
    bias_grad = rg(in_proj_bias)
    q_proj = rg(query) or rg(w_q) or bias_grad
    k_proj = static_k is None and (rg(key) or rg(w_k) or bias_grad)
    v_proj = static_v is None and (rg(value) or rg(w_v) or bias_grad)
    q_grad = q_proj
    k_grad = k_proj or rg(bias_k) or rg(static_k)
    v_grad = v_proj or rg(bias_v) or rg(static_v)
    mask_grad = rg(attn_mask) or rg(key_padding_mask)

    batch_heads = batch * num_heads
    scores = batch_heads * q_len * attended
    out_features = out_proj_weight.shape[0] if out_proj_weight is not None else embed_dim
    cost = _linear_backward(batch * q_len, embed_dim, out_features, input_grad=q_grad or k_grad or v_grad or mask_grad,
                            weight_grad=rg(out_proj_weight), bias_grad=rg(out_proj_bias))
    # masks broadcast over heads (and batch, for an (L, S) attn_mask): their gradients sum back
    summed = summed_back(attn_mask, rg(attn_mask), scores) + summed_back(key_padding_mask, rg(key_padding_mask), scores)
    summed += batch * embed_dim * (rg(bias_k) + rg(bias_v))  # bias_k.repeat(1, N, 1) summed back
    kept = _mha_entries(batch, num_heads, q_len, attended, effective=effective, attn_mask=attn_mask,
                        key_padding_mask=key_padding_mask, is_causal=is_causal)
    cost = cost + attention_backward_cost(
        batch_heads, q_len, attended, head_dim, head_dim,
        query_grad=q_grad, key_grad=k_grad, value_grad=v_grad, mask_grad=mask_grad,
        dropout_p=dropout_p if training else 0.0, summed=summed, scores=kept,
    )
    for needed, rows, x, w in ((q_proj, q_len, query, w_q), (k_proj, kv_len, key, w_k), (v_proj, kv_len, value, w_v)):
        if needed:
            cost = cost + _linear_backward(batch * rows, x.shape[-1], embed_dim, input_grad=rg(x),
                                           weight_grad=rg(w), bias_grad=bias_grad)
    return cost


def _has_multi_head_attention(modules) -> bool:
    """Whether ``F.multi_head_attention_forward`` may run among ``modules``: an
    ``nn.MultiheadAttention`` calls it, and so may a module whose ``forward`` names it."""
    return any(isinstance(m, torch.nn.MultiheadAttention)
               or "multi_head_attention_forward" in forward_names(m)
               for m in modules)


REGISTRY.register_unit(F.multi_head_attention_forward, name="multi_head_attention",
                       backward=multi_head_attention_backward, may_run=_has_multi_head_attention)(multi_head_attention)


def _native_mask_entries(batch, heads, q_len, kv_len, mask, mask_type, *, effective) -> int:
    """Entries the fast paths' merged mask keeps (``mask_type`` 1: a ``(N, S)`` key padding
    mask; otherwise broadcast to ``(N, H, L, S)``); bool ``True`` and ``-inf`` entries drop."""
    if mask is not None and int(mask_type or 0) == 1:
        return _mha_entries(batch, heads, q_len, kv_len, effective=effective, attn_mask=None, key_padding_mask=mask,
                            is_causal=False)
    dense = batch * heads * q_len * kv_len
    if not effective or mask is None:
        return dense
    kept = kept_entries(mask, dense, drop_true=True)
    return dense if kept is None else kept


@effective_family
def native_multi_head_attention(
    out, query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias,
    mask=None, need_weights=True, average_attn_weights=True, mask_type=None, *, effective=False, **_,
) -> Cost:
    """``nn.MultiheadAttention``'s fast path: batch-first ``(B, L, E)`` inputs, bool masks
    already merged by ``merge_masks`` (whose add, if any, is counted at dispatch before this
    op). Counted as :func:`multi_head_attention` counts the same call on the slow path (the
    fast path runs only in eval, so without dropout)."""
    batch = query.shape[0] if query.dim() == 3 else 1
    q_len, kv_len = query.shape[-2], key.shape[-2]
    head_dim = embed_dim // num_head
    batch_heads = batch * num_head
    cost = _in_projection(batch, q_len, kv_len, embed_dim, query.shape[-1], key.shape[-1], value.shape[-1],
                          qkv_bias is not None)
    kept = _native_mask_entries(batch, num_head, q_len, kv_len, mask, mask_type, effective=effective)
    cost = cost + attention_cost(batch_heads, q_len, kv_len, head_dim, head_dim, masked=mask is not None,
                                 scores=kept)
    if need_weights and average_attn_weights:
        cost = cost + Cost.of_flops(_head_mean_flops(batch, num_head, q_len, kv_len))
    return cost + linear_cost(batch * q_len, embed_dim, proj_weight.shape[0], proj_bias is not None)


@effective_family
def transformer_encoder_layer_fwd(
    out, src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, *, norm_weight_1, norm_weight_2,
    ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None, mask_type=None, effective=False, **_,
) -> Cost:
    """``nn.TransformerEncoderLayer``'s fast path, equal to the slow path's total:
    self-attention (``need_weights=False``) + 2 layer norms + ``linear1`` + ReLU/GELU +
    ``linear2`` + 2 residual adds, on ``tokens = B * L`` rows. ``norm_first`` only reorders
    them. Eval only, so the dropouts cost nothing."""
    tokens = numel(src) // embed_dim
    hidden = ffn_weight_1.shape[0]
    cost = native_multi_head_attention(None, src, src, src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                                       proj_bias, mask, need_weights=False, mask_type=mask_type, effective=effective)
    cost = cost + linear_cost(tokens, embed_dim, hidden, ffn_bias_1 is not None)
    cost = cost + linear_cost(tokens, hidden, ffn_weight_2.shape[0], ffn_bias_2 is not None)
    elementwise = (
        activation_flops(tokens * hidden)
        + layer_norm_flops(tokens * embed_dim, norm_weight_1 is not None)
        + layer_norm_flops(tokens * embed_dim, norm_weight_2 is not None)
        + elementwise_flops(tokens * embed_dim, ops=2)  # the two residual adds
    )
    return cost + Cost.of_flops(elementwise)


REGISTRY.register("aten::_native_multi_head_attention", missing_ok=True)(native_multi_head_attention)
REGISTRY.register("aten::_transformer_encoder_layer_fwd", missing_ok=True)(transformer_encoder_layer_fwd)
