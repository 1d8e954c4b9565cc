"""The score entries an attention call counts: all of them (dense) or, with ``effective``,
the ones kept -- read from a mask's values, a causal or sliding-window band (closed form), a
packed batch's offsets or a jagged nested tensor's lengths -- and the operand layouts that
give the number of score matrices.

Values are read only for the effective convention, outside flopsight's counting modes;
meta and fake tensors have none, and the dense count (or a bound) is used instead.

>>> score_entries(2, 4, 4, effective=False, upper=0)   # dense: every entry of 2 matrices
32
>>> score_entries(2, 4, 4, effective=True, upper=0)    # causal: 4*5/2 per matrix
20
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

from ..._process import PROCESS
from ..._torch_private import jagged_layout, modes_disabled
from ..shapes import broadcast_shape, numel, prod

__all__ = [
    "band_entries",
    "bhle_dims",
    "blhe_dims",
    "efficient_upper",
    "flash_band",
    "kept_entries",
    "nested_entries",
    "no_band",
    "packed_entries",
    "read_values",
    "values_read",
    "readable",
    "score_entries",
]


# -- reading values (the effective convention only; meta tensors have none) -------------------
def readable(t: Any) -> bool:
    """Whether ``t``'s values can be read: a real tensor, not meta, not fake, not nested."""
    return (
        isinstance(t, torch.Tensor)
        and t.device.type != "meta"
        and not t.is_nested
        and type(t) in (torch.Tensor, torch.nn.Parameter)  # not a fake or other subclass
    )


class ValuesRead:
    """What formulas have read of tensor values in this process: how many times they asked
    (a cost that did cannot be reused by shape), how many reads copied values (off the device),
    and the values kept (see :func:`read_values`)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.asked = 0
        self.copied = 0
        #: (key, ids of the tensors) -> (weak references to them, their versions, the value read)
        self.known: dict[tuple, tuple] = {}


#: the process's reads
VALUES: ValuesRead = PROCESS.own("values read", ValuesRead)


def values_read() -> int:
    """How many times a formula has read tensor values so far (see :func:`read_values`)."""
    return VALUES.asked


def read_values(fn: Callable, *tensors: Any, key: Any = None) -> Any:
    """``fn(*tensors)`` on the values, outside flopsight's counting modes (so reading is not
    counted as the model's work), or None when a tensor has no readable values. Every
    formula that reads values does it through here: a cost that depends on values is not
    reused for another call of the same shapes.

    With ``key`` (what ``fn`` computes, the same for the same values), the answer is kept
    while the tensors live and are not written to (the same objects, the same version
    counters): every layer of a model attends with the same mask, and on CUDA each read
    copies it to the host and waits for the GPU; so a mask is read once per pass.

    >>> mask = torch.ones(4, dtype=torch.bool)
    >>> before = VALUES.copied
    >>> [read_values(lambda m: int(m.sum()), mask, key="kept") for _ in range(3)], VALUES.copied - before
    ([4, 4, 4], 1)
    >>> mask[0] = False       # written to: its version changes, it is read again
    >>> read_values(lambda m: int(m.sum()), mask, key="kept"), VALUES.copied - before
    (3, 2)
    """
    VALUES.asked += 1
    if not all(readable(t) for t in tensors):
        return None
    if key is not None:
        cache_key = (key, *map(id, tensors))
        known = VALUES.known.get(cache_key)
        if known is not None and all(r() is t and v == t._version for r, t, v in zip(known[0], tensors, known[1])):
            return known[2]
    VALUES.copied += 1
    with modes_disabled(), torch.no_grad():
        value = fn(*tensors)
    if key is not None:
        cache = VALUES.known
        if len(cache) >= _KNOWN_LIMIT:
            cache.pop(next(iter(cache)))  # the oldest
        cache[cache_key] = ([weakref.ref(t) for t in tensors], [t._version for t in tensors], value)
    return value


_KNOWN_LIMIT = 64


def _ints(t: Any) -> list[int] | None:
    return read_values(lambda x: [int(v) for v in x.tolist()], t, key="ints")


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


def kept_entries(mask: Any, full: int, *, drop_true: bool = False) -> int | None:
    """Entries a mask keeps among the ``full`` entries it is broadcast to, or None when its
    values are unreadable (meta). Bool masks keep ``True`` (SDPA) or ``False`` entries
    (``drop_true``: ``nn.MultiheadAttention``'s masks); float masks keep what is not -inf."""

    def count(m):
        keep = (~m if drop_true else m) if m.dtype == torch.bool else ~torch.isneginf(m)
        return int(keep.sum())

    n = numel(mask)
    kept = read_values(count, mask, key=("kept", drop_true)) if n else None
    return None if kept is None else kept * (full // n)


def score_entries(bh: int, q_len: int, kv_len: int, *, effective: bool, mask: Any = None, upper: int | None = None,
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
            kept = kept_entries(mask, dense)
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


# -- operand layouts --------------------------------------------------------------------------
def _batch_heads(query, key, value) -> int:
    """Number of score matrices for ``(..., H, L, E)`` operands: the leading dims broadcast as
    in ``matmul``. Grouped-query attention (fewer key/value heads, which do not broadcast
    against the query's) counts the query's heads."""
    leading = query.shape[:-2]
    shape = broadcast_shape(leading, key.shape[:-2], value.shape[:-2])
    return prod(leading if shape is None else shape)  # None: GQA, Hkv divides Hq


def bhle_dims(query, key, value) -> tuple[int, int, int, int, int]:
    """(score matrices, L, S, E, Ev) of layout ``(..., H, L, E)`` (SDPA, ``_scaled_dot_product_*``)."""
    return _batch_heads(query, key, value), query.shape[-2], key.shape[-2], query.shape[-1], value.shape[-1]


def blhe_dims(query, key, value) -> tuple[int, int, int, int, int]:
    """(score matrices, L, S, E, Ev) of layout ``(B, L, H, E)`` (``_flash_attention_forward``,
    ``_efficient_attention_forward``)."""
    b, q_len, heads, e = query.shape
    return b * heads, q_len, key.shape[1], e, value.shape[-1]


# -- bands of the fused kernels: ``band(L, S) -> (lower, upper)`` per score matrix ----------
def _window(q_len, kv_len, is_causal, left, right) -> tuple[int | None, int | None]:
    """(lower, upper) band of a flash kernel: causal and ``window_size_left/right`` (-1 or
    None: unbounded) are aligned bottom-right, as flash-attention aligns them."""
    shift = kv_len - q_len
    lower = shift - left if left is not None and left >= 0 else None
    upper = shift + right if right is not None and right >= 0 else None
    if is_causal:
        upper = shift if upper is None else min(upper, shift)
    return lower, upper


def efficient_upper(custom_mask_type, q_len, kv_len) -> int | None:
    """``custom_mask_type`` of the memory-efficient kernels: 0 none, 1 causal from the top
    left, 2 causal from the bottom right."""
    return {1: 0, 2: kv_len - q_len}.get(int(custom_mask_type or 0))


def no_band(q_len, kv_len):
    return None, None


def flash_band(is_causal, left=None, right=None):
    return lambda q_len, kv_len: _window(q_len, kv_len, is_causal, left, right)


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


def packed_entries(heads, total_q, total_k, max_q, max_k, cu_q, cu_k, *, effective, band) -> int:
    """Score entries of a packed batch: the dense bound (:func:`_varlen_dims`); with
    ``effective`` and readable offsets, ``heads * sum_i entries(L_i, S_i)`` where ``band(L, S)``
    gives a sequence's (lower, upper) band (causal, window)."""
    if effective and total_k is not None:
        q_lens, k_lens = _lengths(cu_q), _lengths(cu_k)
        if q_lens is not None and k_lens is not None and len(q_lens) == len(k_lens):
            return heads * sum(band_entries(lq, lk, *band(lq, lk)) for lq, lk in zip(q_lens, k_lens))
    q_len, kv_len = _varlen_dims(total_q, total_k, max_q, max_k)
    return heads * q_len * kv_len


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


def nested_entries(query, key, *, effective, is_causal) -> int:
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
