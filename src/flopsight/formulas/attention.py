"""Attention: scaled dot-product attention on every backend (dense, packed, jagged nested),
multi-head attention, the native fast paths of ``nn.MultiheadAttention`` /
``nn.TransformerEncoderLayer``, and the ``attention="effective"`` convention option.

Convention (dense, the default)
-------------------------------
For queries ``(..., Hq, L, E)``, keys ``(..., Hkv, S, E)`` and values ``(..., Hkv, S, Ev)``,
with ``scores = B * Hq * L * S`` (``B`` the product of the leading batch dims):

* **MACs** = ``scores * E`` (``Q K^T``) + ``scores * Ev`` (``P V``); grouped-query attention
  costs what ``Hq`` full heads cost. Masks and causality are ignored.
* **FLOPs** = 2 per MAC + 1 per score for the scale, 1 for the softmax, 1 for an explicit
  mask (any dtype) and 1 for dropout on the weights when ``dropout_p > 0``.

With ``attention="effective"`` (:func:`attention_registry`) the same formulas count only the
score entries that are kept: under a causal mask, a sliding window, the sequences of a packed
batch (read from the offsets when they have values), a boolean or ``-inf`` mask's kept
entries (when readable) and a flex ``BlockMask``'s computed blocks. Every per-score term
applies to the entries counted. docs/conventions/attention.md derives every formula.

Units: ``F.scaled_dot_product_attention`` and ``F.multi_head_attention_forward`` are counted
whole from their arguments (so CPU flash, the math decomposition, meta and CUDA agree); each
fused forward and backward kernel is also registered at dispatch for when it is reached
without the unit. Backward formulas count the gradients needed (``dV``, ``dP``, the softmax,
scale and dropout backward, ``dQ``, ``dK``) and never a flash kernel's recomputation.

>>> import torch
>>> from flopsight.formulas.attention import scaled_dot_product_attention
>>> q = torch.ones(2, 4, 16, 8)      # B=2, H=4, L=16, E=8
>>> kv = torch.ones(2, 4, 32, 8)     # S=32
>>> # scores = 2*4*16*32 = 4096; MACs = 4096*8 + 4096*8; FLOPs = 2*MACs + scale + softmax
>>> scaled_dot_product_attention(None, q, kv, kv)
Stats(macs=65536, flops=139264)
>>> from flopsight.formulas.attention import scaled_dot_product_attention_backward
>>> _ = q.requires_grad_()           # only Q requires grad: dP, softmax and scale backward, dQ
>>> # MACs = 4096*8 (dP) + 4096*8 (dQ); FLOPs = 2*MACs + 4*4096 (softmax) + 4096 (scale)
>>> scaled_dot_product_attention_backward(None, q, kv, kv)
Stats(macs=65536, flops=151552)
>>> # effective: a causal 16 x 16 square keeps 16*17/2 = 136 of 256 entries per head
>>> q = torch.ones(1, 1, 16, 8)
>>> scaled_dot_product_attention(None, q, q, q, is_causal=True, effective=True)
Stats(macs=2176, flops=4624)
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import sys
from typing import Any, Callable

import torch
import torch.nn.functional as F

from .._torch_private import jagged_layout, modes_disabled
from .activation import activation_flops, softmax_backward_flops, softmax_flops
from .dropout import dropout_backward_flops, dropout_flops
from .elementwise import elementwise_flops
from .matmul import linear_cost
from .norm import layer_norm_flops
from .reduction import mean_flops
from .registry import REGISTRY, Cost, Registry
from .shapes import broadcast_shape, numel, prod

__all__ = [
    "ATTENTION_CONVENTIONS",
    "attention_registry",
    "attention_cost",
    "attention_backward_cost",
    "band_entries",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_backward",
    "sdpa_with_bias",
    "flash_attention_forward",
    "efficient_attention_forward",
    "cudnn_attention_forward",
    "varlen_attn",
    "varlen_attn_backward",
    "multi_head_attention",
    "multi_head_attention_backward",
    "native_multi_head_attention",
    "transformer_encoder_layer_fwd",
    "register_varlen_ops",
]

#: The values of the ``attention=`` option.
ATTENTION_CONVENTIONS = ("dense", "effective")

# Every formula of this family takes a keyword-only ``effective=False``; the effective
# registry registers ``partial(formula, effective=True)`` in its place (see attention_registry).
_FAMILY: set[Callable] = set()


def _family(fn: Callable) -> Callable:
    _FAMILY.add(fn)
    return fn


# -- reading values (the effective convention only; meta tensors have none) -------------------
def _readable(t: Any) -> bool:
    """Whether ``t``'s values can be read: a real tensor, not meta, not fake, not nested."""
    return (
        isinstance(t, torch.Tensor)
        and t.device.type != "meta"
        and not t.is_nested
        and type(t) in (torch.Tensor, torch.nn.Parameter)  # not a fake or other subclass
    )


def _read(fn: Callable, *tensors: Any) -> Any:
    """``fn(*tensors)`` on the values, outside flopsight's counting modes (so reading is not
    counted as the model's work), or None when a tensor has no readable values."""
    if not all(_readable(t) for t in tensors):
        return None
    with modes_disabled(), torch.no_grad():
        return fn(*tensors)


def _ints(t: Any) -> list[int] | None:
    return _read(lambda x: [int(v) for v in x.tolist()], t)


# -- counting score entries -------------------------------------------------------------------
def _sum_positive(slope: int, start: int, lo: int, hi: int) -> int:
    """``sum(max(0, slope * i + start) for i in range(lo, hi))`` for slope -1, 0 or 1."""
    if hi <= lo:
        return 0
    if slope == 0:
        return max(0, start) * (hi - lo)
    if slope == 1:
        lo = max(lo, 1 - start)  # i + start > 0
        return 0 if hi <= lo else (hi - lo) * (lo + hi - 1 + 2 * start) // 2
    hi = min(hi, start)  # start - i > 0
    return 0 if hi <= lo else (hi - lo) * (2 * start - lo - hi + 1) // 2


def band_entries(q_len: int, kv_len: int, lower: int | None = None, upper: int | None = None) -> int:
    """Score entries ``(i, j)``, ``0 <= i < q_len``, ``0 <= j < kv_len``, with
    ``i + lower <= j <= i + upper`` (None: unbounded): the kept entries of a causal mask
    (``upper=0``: top-left aligned, as SDPA's ``is_causal``; ``upper=kv_len-q_len``:
    bottom-right, as flash kernels) or a sliding window. Closed form, O(1).

    >>> band_entries(4, 4, upper=0)       # causal square: 4*5/2
    10
    >>> band_entries(2, 5, upper=0), band_entries(2, 5, upper=3)   # top-left vs bottom-right
    (3, 9)
    >>> band_entries(6, 6, lower=-2, upper=0)   # causal window of 3 keys: 1+2+3+3+3+3
    15
    """
    big = q_len + kv_len + 1
    up = big if upper is None else upper
    low = -big if lower is None else lower
    # entries in row i: max(0, min(kv_len - 1, i + up) - max(0, i + low) + 1); split the rows
    # where either clamp switches, so the count is linear in i on each piece
    cuts = sorted({0, q_len, min(max(kv_len - 1 - up, 0), q_len), min(max(1 - low, 0), q_len)})
    total = 0
    for a, b in zip(cuts, cuts[1:]):
        top_clamped = a + up >= kv_len - 1  # min(...) = kv_len - 1 on [a, b)
        bottom_clamped = a + low <= 0  # max(...) = 0 on [a, b)
        slope = (0 if top_clamped else 1) - (0 if bottom_clamped else 1)
        start = (kv_len - 1 if top_clamped else up) - (0 if bottom_clamped else low) + 1
        total += _sum_positive(slope, start, a, b)
    return total


def _kept(mask: Any, full: int, *, drop_true: bool = False) -> int | None:
    """Entries a mask keeps among the ``full`` entries it is broadcast to, or None when its
    values are unreadable (meta). Bool masks keep ``True`` (SDPA) or ``False`` entries
    (``drop_true``: ``nn.MultiheadAttention``'s masks); float masks keep what is not -inf."""

    def count(m):
        keep = (~m if drop_true else m) if m.dtype == torch.bool else ~torch.isneginf(m)
        return int(keep.sum())

    n = numel(mask)
    kept = _read(count, mask) if n else None
    return None if kept is None else kept * (full // n)


def _entries(bh: int, q_len: int, kv_len: int, *, effective: bool, mask: Any = None, upper: int | None = None,
             lower: int | None = None) -> int:
    """Score entries counted for ``bh`` score matrices of ``q_len x kv_len``: all of them
    (dense); with ``effective``, a readable mask's kept entries, else the band
    ``[i + lower, i + upper]`` (a causal mask or a window)."""
    dense = bh * q_len * kv_len
    if not effective:
        return dense
    if mask is not None:
        causal = _causal_bias_upper(mask, q_len, kv_len)
        if causal is not None:
            upper = causal
        else:
            kept = _kept(mask, dense)
            if kept is not None:
                return kept
    if upper is None and lower is None:
        return dense
    return bh * band_entries(q_len, kv_len, lower, upper)


def _causal_bias_upper(mask: Any, q_len: int, kv_len: int) -> int | None:
    """The band's upper offset of ``torch.nn.attention.bias.CausalBias`` masks, else None."""
    variant = getattr(mask, "variant", None)
    if variant is None or type(mask).__name__ != "CausalBias":
        return None
    return 0 if variant.name == "UPPER_LEFT" else kv_len - q_len


# -- the attention core --------------------------------------------------------------------
def _head_mean_flops(batch: int, heads: int, q_len: int, kv_len: int) -> int:
    """Averaging the attention weights over heads (``need_weights``), as ``aten.mean`` counts it
    (the fast path runs ``sum`` then ``/= heads``; the slow path runs ``mean(dim=1)``)."""
    return mean_flops(batch * heads * q_len * kv_len, batch * q_len * kv_len)


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


def _batch_heads(query, key, value) -> int:
    """Number of score matrices for ``(..., H, L, E)`` operands: the leading dims broadcast as
    in ``matmul``. Grouped-query attention (fewer key/value heads, which do not broadcast
    against the query's) counts the query's heads."""
    leading = query.shape[:-2]
    shape = broadcast_shape(leading, key.shape[:-2], value.shape[:-2])
    return prod(leading if shape is None else shape)  # None: GQA, Hkv divides Hq


def _bhle_dims(query, key, value) -> tuple[int, int, int, int, int]:
    """(score matrices, L, S, E, Ev) of layout ``(..., H, L, E)`` (SDPA, ``_scaled_dot_product_*``)."""
    return _batch_heads(query, key, value), query.shape[-2], key.shape[-2], query.shape[-1], value.shape[-1]


def _blhe_dims(query, key, value) -> tuple[int, int, int, int, int]:
    """(score matrices, L, S, E, Ev) of layout ``(B, L, H, E)`` (``_flash_attention_forward``,
    ``_efficient_attention_forward``)."""
    b, q_len, heads, e = query.shape
    return b * heads, q_len, key.shape[1], e, value.shape[-1]


def _window(q_len, kv_len, is_causal, left, right) -> tuple[int | None, int | None]:
    """(lower, upper) band of a flash kernel: causal and ``window_size_left/right`` (-1 or
    None: unbounded) are aligned bottom-right, as flash-attention aligns them."""
    shift = kv_len - q_len
    lower = shift - left if left is not None and left >= 0 else None
    upper = shift + right if right is not None and right >= 0 else None
    if is_causal:
        upper = shift if upper is None else min(upper, shift)
    return lower, upper


def _efficient_upper(custom_mask_type, q_len, kv_len) -> int | None:
    """``custom_mask_type`` of the memory-efficient kernels: 0 none, 1 causal from the top
    left, 2 causal from the bottom right."""
    return {1: 0, 2: kv_len - q_len}.get(int(custom_mask_type or 0))


# -- packed variable-length sequences --------------------------------------------------------
def _varlen_dims(total_q, total_k, max_q, max_k) -> tuple[int, int]:
    """(query length, key length) per head whose product bounds the packed scores without
    reading the offsets: ``min(total_q * max_k, total_k * max_q)``, exact when every sequence
    has the same length. ``total_k`` is None for a paged KV cache."""
    max_q = int(max_q) if max_q is not None else total_q
    max_k = int(max_k) if max_k is not None else (total_k or 0)
    if total_k is None or total_q * max_k <= total_k * max_q:
        return total_q, max_k
    return max_q, total_k


def _lengths(cu_seq) -> list[int] | None:
    offsets = _ints(cu_seq)
    return None if offsets is None else [b - a for a, b in zip(offsets, offsets[1:])]


def _packed_entries(heads, total_q, total_k, max_q, max_k, cu_q, cu_k, *, effective, band) -> int:
    """Score entries of a packed batch: the dense bound (:func:`_varlen_dims`); with
    ``effective`` and readable offsets, ``heads * sum_i entries(L_i, S_i)`` where ``band(L, S)``
    gives a sequence's (lower, upper) band (causal, window)."""
    if effective and total_k is not None:
        q_lens, k_lens = _lengths(cu_q), _lengths(cu_k)
        if q_lens is not None and k_lens is not None and len(q_lens) == len(k_lens):
            return heads * sum(band_entries(lq, lk, *band(lq, lk)) for lq, lk in zip(q_lens, k_lens))
    q_len, kv_len = _varlen_dims(total_q, total_k, max_q, max_k)
    return heads * q_len * kv_len


def _varlen(query, key, value, total_q, total_k, max_q, max_k, cu_q, cu_k, *, masked, dropout_p, effective,
            band) -> Cost:
    """Forward of packed ``(total, H, E)`` operands."""
    heads, e, ev = query.shape[-2], query.shape[-1], value.shape[-1]
    scores = _packed_entries(heads, total_q, total_k, max_q, max_k, cu_q, cu_k, effective=effective, band=band)
    return attention_cost(heads, 0, 0, e, ev, masked=masked, dropout_p=dropout_p or 0.0, scores=scores)


def _no_band(q_len, kv_len):
    return None, None


def _flash_band(is_causal, left=None, right=None):
    return lambda q_len, kv_len: _window(q_len, kv_len, is_causal, left, right)


# -- jagged nested tensors (torch.nested, layout=torch.jagged) ----------------------------------
def _nested_lengths(t) -> tuple[list[int] | None, int, int]:
    """(per-sequence lengths or None if unreadable, total length, max length) of an NJT's
    ragged dim. The max comes from the NJT's cached metadata when present (no values read)."""
    lengths, offsets, total, max_len = jagged_layout(t)
    lens = _ints(lengths) if lengths is not None else _lengths(offsets)
    max_len = total if max_len is None else max_len
    if lens is not None:
        max_len = max(lens, default=0)
    return lens, total, max_len


def _nested_entries(query, key, *, effective, is_causal) -> int:
    """Score entries of SDPA on jagged ``(B, H, j, E)`` nested tensors: ``H * sum_i L_i * S_i``
    when the offsets are readable (the exact dense count), else the packed bound
    ``H * min(total_q * max_k, total_k * max_q)``. ``effective`` and causal: each sequence's
    top-left causal band."""
    heads = query.shape[1]
    q_lens, total_q, max_q = _nested_lengths(query)
    k_lens, total_k, max_k = (q_lens, total_q, max_q) if key is query else _nested_lengths(key)
    if q_lens is not None and k_lens is not None:
        upper = 0 if (effective and is_causal) else None
        return heads * sum(band_entries(lq, lk, None, upper) for lq, lk in zip(q_lens, k_lens))
    q_len, kv_len = _varlen_dims(total_q, total_k, max_q, max_k)
    return heads * q_len * kv_len


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
def _requires_grad(t) -> bool:
    return isinstance(t, torch.Tensor) and t.requires_grad


@_family
def scaled_dot_product_attention(
    out, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, effective=False, **_
) -> Cost:
    """``F.scaled_dot_product_attention`` (bound by ``aten::scaled_dot_product_attention``'s
    schema) and the kernels with the same argument names: the math kernels, the CPU flash
    kernel (whose ``attn_mask`` is a float keyword) and CUDA flash (no mask; its ``.quantized``
    overload adds descale tensors). ``is_causal`` is top-left aligned, as SDPA's."""
    if query.is_nested:
        scores = _nested_entries(query, key, effective=effective, is_causal=is_causal)
        e, ev = query.shape[-1], value.shape[-1]
        return attention_cost(0, 0, 0, e, ev, masked=attn_mask is not None, dropout_p=dropout_p or 0.0,
                              scores=scores)
    bh, q_len, kv_len, e, ev = _bhle_dims(query, key, value)
    scores = _entries(bh, q_len, kv_len, effective=effective, mask=attn_mask, upper=0 if is_causal else None)
    return attention_cost(bh, q_len, kv_len, e, ev, masked=attn_mask is not None, dropout_p=dropout_p or 0.0,
                          scores=scores)


@_family
def sdpa_with_bias(out, query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False, *, effective=False,
                   **_) -> Cost:
    """The fused SDPA kernels whose mask is an additive ``attn_bias``: memory-efficient, cuDNN,
    and the out-of-tree hook (``_fused_attention_overrideable``); ``(B, H, L, E)``."""
    return scaled_dot_product_attention(out, query, key, value, attn_bias, dropout_p, is_causal, effective=effective)


@_family
def flash_attention_forward(
    result, /, query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, *,
    window_size_left=None, window_size_right=None, alibi_slopes=None, block_table=None, effective=False, **_,
) -> Cost:
    """The flash kernel (and ``_no_dropout_inplace``, whose ``out`` buffer comes first):
    ``(B, L, H, E)``, or packed ``(total, H, E)`` when ``cum_seq_q`` is given (nested tensors,
    ``torch.nn.attention.varlen``). ALiBi slopes are an additive bias, counted like a mask.
    Causal and sliding windows are aligned bottom-right."""
    masked = alibi_slopes is not None
    band = _flash_band(is_causal, window_size_left, window_size_right)
    if cum_seq_q is not None:
        total_k = None if (cum_seq_k is None or block_table is not None) else key.shape[0]
        return _varlen(query, key, value, query.shape[0], total_k, max_q, max_k, cum_seq_q, cum_seq_k,
                       masked=masked, dropout_p=dropout_p, effective=effective, band=band)
    bh, q_len, kv_len, e, ev = _blhe_dims(query, key, value)
    lower, upper = band(q_len, kv_len)
    scores = _entries(bh, q_len, kv_len, effective=effective, lower=lower, upper=upper)
    return attention_cost(bh, q_len, kv_len, e, ev, masked=masked, dropout_p=dropout_p or 0.0, scores=scores)


@_family
def efficient_attention_forward(
    out, query, key, value, bias, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
    custom_mask_type, *, effective=False, **_,
) -> Cost:
    """The memory-efficient kernel: ``(B, L, H, E)``; packed sequences are ``(1, total, H, E)``
    with ``cu_seqlens_q``. ``custom_mask_type`` (causal) costs nothing in the dense count."""
    masked = bias is not None

    def band(q_len, kv_len):
        return None, _efficient_upper(custom_mask_type, q_len, kv_len)

    if cu_seqlens_q is not None:
        # The kernel returns the batch maxima it used (outputs 4 and 5) when not given.
        if max_seqlen_q is None and isinstance(out, (tuple, list)) and len(out) > 5:
            max_seqlen_q, max_seqlen_k = out[4], out[5]
        total_k = key.shape[1] if cu_seqlens_k is not None else None
        return _varlen(query, key, value, query.shape[1], total_k, max_seqlen_q, max_seqlen_k, cu_seqlens_q,
                       cu_seqlens_k, masked=masked, dropout_p=dropout_p, effective=effective, band=band)
    bh, q_len, kv_len, e, ev = _blhe_dims(query, key, value)
    scores = _entries(bh, q_len, kv_len, effective=effective, mask=bias, upper=band(q_len, kv_len)[1])
    return attention_cost(bh, q_len, kv_len, e, ev, masked=masked, dropout_p=dropout_p or 0.0, scores=scores)


@_family
def cudnn_attention_forward(
    out, query, key, value, attn_bias, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p=0.0, is_causal=False, *,
    effective=False, **_,
) -> Cost:
    """The cuDNN kernel: ``(B, H, L, E)``, or packed ``(total, H, E)`` with ``cum_seq_q``
    (causal aligned top-left, cuDNN's causal mask)."""
    masked = attn_bias is not None
    if cum_seq_q is not None:
        total_k = key.shape[0] if cum_seq_k is not None else None
        band = (lambda q_len, kv_len: (None, 0)) if is_causal else _no_band
        return _varlen(query, key, value, query.shape[0], total_k, max_q, max_k, cum_seq_q, cum_seq_k,
                       masked=masked, dropout_p=dropout_p, effective=effective, band=band)
    return scaled_dot_product_attention(out, query, key, value, attn_bias, dropout_p, is_causal, effective=effective)


def _varlen_band(is_causal, window_size):
    left, right = window_size if window_size else (None, None)
    return _flash_band(is_causal, left, right)


@_family
def varlen_attn(result, /, query, key, value, cu_seq_q, cu_seq_k=None, max_q=None, max_k=None, is_causal=False,
                window_size=None, block_table=None, *, effective=False, **_) -> Cost:
    """``torch_attn::_varlen_attn`` and ``_varlen_attn_out`` (whose ``out`` buffer comes
    first): the custom ops behind ``torch.nn.attention.varlen``; packed ``(total, H, E)``."""
    total_k = None if (cu_seq_k is None or block_table is not None) else key.shape[0]
    return _varlen(query, key, value, query.shape[0], total_k, max_q, max_k, cu_seq_q, cu_seq_k, masked=False,
                   dropout_p=0.0, effective=effective, band=_varlen_band(is_causal, window_size))


# -- backward --------------------------------------------------------------------------------
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


def _summed(t, grad: bool, full: int) -> int:
    """Elements summed to reduce a gradient computed at ``full`` elements (one per query
    head and batch) back to ``t``'s shape, when ``t`` is smaller (broadcast or shared)."""
    return full if grad and t is not None and numel(t) < full else 0


def _dense_backward(dims, query, key, value, mask, *, grads, dropout_p, scores) -> Cost:
    """Backward of one attention call of ``dims`` = (score matrices, L, S, E, Ev); ``grads`` =
    which of (query, key, value, mask) get a gradient; ``scores`` the entries counted."""
    bh, q_len, kv_len, e, ev = dims
    q_g, k_g, v_g, m_g = grads
    m_g = bool(m_g) and mask is not None
    summed = (
        _summed(query, q_g, bh * q_len * e)
        + _summed(key, k_g, bh * kv_len * e)  # GQA: dK of the shared heads sums over the group
        + _summed(value, v_g, bh * kv_len * ev)
        + _summed(mask, m_g, bh * q_len * kv_len)
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


def _varlen_backward(query, key, value, total_q, total_k, max_q, max_k, cu_q, cu_k, *, dropout_p, effective,
                     band) -> Cost:
    scores = _packed_entries(query.shape[-2], total_q, total_k, max_q, max_k, cu_q, cu_k, effective=effective,
                             band=band)
    return _packed_backward(query, key, value, scores, dropout_p=dropout_p)


@_family
def scaled_dot_product_attention_backward(
    out, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, effective=False, **_
) -> Cost:
    """Backward of ``F.scaled_dot_product_attention``: the gradients of the operands that
    require grad (read at forward time), whatever kernel the device runs."""
    grads = (_requires_grad(query), _requires_grad(key), _requires_grad(value), _requires_grad(attn_mask))
    if query.is_nested:
        scores = _nested_entries(query, key, effective=effective, is_causal=is_causal)
        e, ev = query.shape[-1], value.shape[-1]
        return attention_backward_cost(0, 0, 0, e, ev, query_grad=grads[0], key_grad=grads[1],
                                       value_grad=grads[2], dropout_p=dropout_p or 0.0, scores=scores)
    dims = _bhle_dims(query, key, value)
    scores = _entries(*dims[:3], effective=effective, mask=attn_mask, upper=0 if is_causal else None)
    return _dense_backward(dims, query, key, value, attn_mask, grads=grads, dropout_p=dropout_p, scores=scores)


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

# The fused backward kernels compute dQ, dK and dV whenever they run (the efficient and
# overrideable ones take a ``grad_input_mask`` for (q, k, v, bias)); a bias gets a gradient
# only when asked for.
_ALL = (True, True, True, False)


@_family
def sdpa_flash_backward(result, /, query, key, value, dropout_p, is_causal, attn_mask=None, *, effective=False,
                        **_) -> Cost:
    """The flash kernels' backward, ``(B, H, L, E)``: CPU (``attn_mask`` a float keyword, no
    gradient for it) and CUDA (no mask; its dense calls leave ``cum_seq_q`` empty)."""
    dims = _bhle_dims(query, key, value)
    scores = _entries(*dims[:3], effective=effective, mask=attn_mask, upper=0 if is_causal else None)
    return _dense_backward(dims, query, key, value, attn_mask, grads=_ALL, dropout_p=dropout_p, scores=scores)


@_family
def sdpa_efficient_backward(result, /, query, key, value, attn_bias, dropout_p, grad_input_mask, is_causal=False,
                            *, effective=False, **_) -> Cost:
    """Memory-efficient and out-of-tree (overrideable) backward: ``(B, H, L, E)``;
    ``grad_input_mask`` says which of (q, k, v, bias) are computed."""
    dims = _bhle_dims(query, key, value)
    scores = _entries(*dims[:3], effective=effective, mask=attn_bias, upper=0 if is_causal else None)
    return _dense_backward(dims, query, key, value, attn_bias, grads=tuple(grad_input_mask), dropout_p=dropout_p,
                           scores=scores)


@_family
def sdpa_cudnn_backward(result, /, query, key, value, attn_bias, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
                        is_causal, *, effective=False, **_) -> Cost:
    """cuDNN backward: ``(B, H, L, E)``, or packed ``(total, H, E)`` with ``cum_seq_q``; it
    returns no gradient for ``attn_bias``."""
    if cum_seq_q is not None:
        total_k = key.shape[0] if cum_seq_k is not None else None
        band = (lambda q_len, kv_len: (None, 0)) if is_causal else _no_band
        return _varlen_backward(query, key, value, query.shape[0], total_k, max_q, max_k, cum_seq_q, cum_seq_k,
                                dropout_p=dropout_p, effective=effective, band=band)
    dims = _bhle_dims(query, key, value)
    scores = _entries(*dims[:3], effective=effective, mask=attn_bias, upper=0 if is_causal else None)
    return _dense_backward(dims, query, key, value, attn_bias, grads=_ALL, dropout_p=dropout_p, scores=scores)


@_family
def flash_attention_backward(result, /, query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
                             *, window_size_left=None, window_size_right=None, effective=False, **_) -> Cost:
    """The flash kernel's backward: ``(B, L, H, E)``, or packed ``(total, H, E)`` when
    ``cum_seq_q`` is given; causal and windows aligned bottom-right as in the forward."""
    band = _flash_band(is_causal, window_size_left, window_size_right)
    if cum_seq_q is not None:
        total_k = key.shape[0] if cum_seq_k is not None else None
        return _varlen_backward(query, key, value, query.shape[0], total_k, max_q, max_k, cum_seq_q, cum_seq_k,
                                dropout_p=dropout_p, effective=effective, band=band)
    dims = _blhe_dims(query, key, value)
    lower, upper = band(dims[1], dims[2])
    scores = _entries(*dims[:3], effective=effective, lower=lower, upper=upper)
    return _dense_backward(dims, query, key, value, None, grads=_ALL, dropout_p=dropout_p, scores=scores)


@_family
def efficient_attention_backward(
    result, /, query, key, value, bias, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
    custom_mask_type, bias_requires_grad, *, effective=False, **_,
) -> Cost:
    """The memory-efficient kernel's backward: ``(B, L, H, E)``, or packed ``(1, total, H, E)``
    with ``cu_seqlens_q``; the bias gets a gradient when ``bias_requires_grad``."""

    def band(q_len, kv_len):
        return None, _efficient_upper(custom_mask_type, q_len, kv_len)

    if cu_seqlens_q is not None:
        total_k = key.shape[1] if cu_seqlens_k is not None else None
        return _varlen_backward(query, key, value, query.shape[1], total_k, max_seqlen_q, max_seqlen_k, cu_seqlens_q,
                                cu_seqlens_k, dropout_p=dropout_p, effective=effective, band=band)
    dims = _blhe_dims(query, key, value)
    scores = _entries(*dims[:3], effective=effective, mask=bias, upper=band(dims[1], dims[2])[1])
    return _dense_backward(dims, query, key, value, bias, grads=(True, True, True, bias_requires_grad),
                           dropout_p=dropout_p, scores=scores)


@_family
def varlen_attn_backward(result, /, query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal,
                         window_size=None, *, effective=False, **_) -> Cost:
    """``torch_attn::_varlen_attn_backward`` (``torch.nn.attention.varlen``'s backward): dQ,
    dK, dV of packed ``(total, H, E)`` operands, for the forward's score entries (no dropout)."""
    return _varlen_backward(query, key, value, query.shape[0], key.shape[0], max_q, max_k, cu_seq_q, cu_seq_k,
                            dropout_p=0.0, effective=effective, band=_varlen_band(is_causal, window_size))


REGISTRY.register("aten::_scaled_dot_product_flash_attention_for_cpu_backward",
                  "aten::_scaled_dot_product_flash_attention_backward", missing_ok=True)(sdpa_flash_backward)
REGISTRY.register("aten::_scaled_dot_product_efficient_attention_backward",
                  "aten::_scaled_dot_product_fused_attention_overrideable_backward",
                  missing_ok=True)(sdpa_efficient_backward)
REGISTRY.register("aten::_scaled_dot_product_cudnn_attention_backward", "aten::_cudnn_attention_backward",
                  missing_ok=True)(sdpa_cudnn_backward)
REGISTRY.register("aten::_flash_attention_backward", missing_ok=True)(flash_attention_backward)
REGISTRY.register("aten::_efficient_attention_backward", missing_ok=True)(efficient_attention_backward)


# -- torch.nn.attention.varlen's custom ops --------------------------------------------------
# The torch_attn ops exist only once torch.nn.attention.varlen is imported, which costs ~1 s
# before torch._dynamo is loaded: too much for `import flopsight`. They are registered when
# that module is imported, before or after flopsight (a post-import hook on its name).
_VARLEN_MODULE = "torch.nn.attention.varlen"


def register_varlen_ops(registry: Registry = REGISTRY) -> bool:
    """Register ``torch_attn::_varlen_attn``, ``_varlen_attn_out`` and ``_varlen_attn_backward``
    in ``registry`` if ``torch.nn.attention.varlen`` has defined them; whether it had."""
    ops = getattr(torch.ops, "torch_attn", None)
    if ops is None or not hasattr(ops, "_varlen_attn"):
        return False
    registry.register(ops._varlen_attn, ops._varlen_attn_out)(varlen_attn)
    if hasattr(ops, "_varlen_attn_backward"):
        registry.register(ops._varlen_attn_backward)(varlen_attn_backward)
    return True


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then()`` right after module ``name`` is first imported (then steps aside)."""

    def __init__(self, name: str, then: Callable[[], Any]):
        self.name, self.then = name, then

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module, then = loader.exec_module, self.then

        def exec_then_register(module):
            exec_module(module)
            then()

        loader.exec_module = exec_then_register
        return spec


if _VARLEN_MODULE in sys.modules:
    register_varlen_ops()
else:
    sys.meta_path.insert(0, _AfterImport(_VARLEN_MODULE, register_varlen_ops))


# -- multi-head attention -----------------------------------------------------------------
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
    if masks and all(_readable(m) for m in masks):

        def keep(m):
            return ~m if m.dtype == torch.bool else ~torch.isneginf(m)

        def count(*ms):
            attn = keep(attn_mask) if attn_mask is not None else None
            kpm = keep(key_padding_mask) if key_padding_mask is not None else None
            s = (attn if attn is not None else kpm).shape[-1]
            # per (batch, head): the columns each row keeps, restricted to kept keys
            cols = attn.reshape(-1, q_len, s).sum(-2) if attn is not None else torch.full((1, s), q_len)
            cols = cols.reshape(-1, 1, s) if cols.shape[0] == 1 else cols.reshape(batch, heads, s)
            rows = kpm.reshape(batch, 1, s) if kpm is not None else torch.ones(1, 1, s, dtype=torch.bool)
            per = (cols * rows).sum(-1)  # (batch or 1, heads or 1)
            extra = q_len * (attended - s)  # appended positions: kept
            return int(per.sum()) * (batch * heads // per.numel()) + batch * heads * extra

        return _read(count, *masks)
    if is_causal:
        return batch * heads * band_entries(q_len, attended, None, 0)
    return dense


@_family
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


@_family
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
    rg = _requires_grad
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
    summed = _summed(attn_mask, rg(attn_mask), scores) + _summed(key_padding_mask, rg(key_padding_mask), scores)
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


REGISTRY.register_unit(F.multi_head_attention_forward, name="multi_head_attention",
                       backward=multi_head_attention_backward)(multi_head_attention)


def _native_mask_entries(batch, heads, q_len, kv_len, mask, mask_type, *, effective) -> int:
    """Entries the fast paths' merged mask keeps (``mask_type`` 1: a ``(N, S)`` key padding
    mask; otherwise broadcast to ``(N, H, L, S)``); bool ``True`` and ``-inf`` entries drop."""
    if mask is not None and int(mask_type or 0) == 1:
        return _mha_entries(batch, heads, q_len, kv_len, effective=effective, attn_mask=None, key_padding_mask=mask,
                            is_causal=False)
    dense = batch * heads * q_len * kv_len
    if not effective or mask is None:
        return dense
    kept = _kept(mask, dense, drop_true=True)
    return dense if kept is None else kept


@_family
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


@_family
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


# -- the attention= option ---------------------------------------------------------------------
def _effective(formula: Callable) -> Callable:
    variant = functools.partial(formula, effective=True)
    variant.__name__ = f"{formula.__name__}[effective]"  # type: ignore[attr-defined]
    variant.__doc__ = formula.__doc__
    return variant


def attention_registry(registry: Registry, attention: str = "dense") -> Registry:
    """The registry that counts attention by the convention ``attention``:

    * ``"dense"`` (the default, DeepSpeed-compatible): ``registry`` itself;
    * ``"effective"``: a copy of ``registry`` whose attention formulas (ops and units, the
      backward formulas included) count only the score entries kept -- a causal band, a
      sliding window, the sequences of a packed or nested batch, a boolean / ``-inf`` mask's
      kept entries (when its values are readable: not on meta), a flex ``BlockMask``'s
      computed blocks. Formulas a user replaced are left alone.

    >>> import torch
    >>> from flopsight.formulas import REGISTRY
    >>> attention_registry(REGISTRY, "dense") is REGISTRY
    True
    >>> effective = attention_registry(REGISTRY, "effective")
    >>> q = torch.ones(1, 1, 4, 8)   # causal 4 x 4: 10 of 16 entries; MACs 10*8*2
    >>> sdpa = effective.unit(torch.nn.functional.scaled_dot_product_attention)
    >>> sdpa.cost(None, sdpa.bind((q, q, q), {"is_causal": True}))
    Stats(macs=160, flops=340)
    """
    if attention == "dense":
        return registry
    if attention != "effective":
        raise ValueError(f"attention: expected one of {', '.join(map(repr, ATTENTION_CONVENTIONS))}, got {attention!r}")
    new = registry.copy()
    variants: dict[Callable, Callable] = {}

    def variant(fn):
        if fn not in variants:
            variants[fn] = _effective(fn)
        return variants[fn]

    for op, formula in list(registry.ops().items()):
        if formula in _FAMILY:
            new.register(op)(variant(formula))
    for function, unit in list(registry.units().items()):
        if unit.formula in _FAMILY:
            backward = unit.backward
            if backward in _FAMILY:
                backward = variant(backward)
            new.register_unit(function, name=unit.name, backward=backward)(variant(unit.formula))
    return new
