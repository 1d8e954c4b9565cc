"""Attention: scaled dot-product attention on every backend, multi-head attention, and the
native fast paths of ``nn.MultiheadAttention`` / ``nn.TransformerEncoderLayer``.

Convention (dense)
------------------
For queries ``(..., Hq, L, E)``, keys ``(..., Hkv, S, E)`` and values ``(..., Hkv, S, Ev)``,
with ``scores = B * Hq * L * S`` (``B`` the product of the leading batch dims):

* **MACs** = ``scores * E`` (``Q K^T``) + ``scores * Ev`` (``P V``). Grouped-query attention
  (``Hkv < Hq``) costs the same as with ``Hq`` full heads: every query head does its own
  products, the KV heads are only shared. Masks and causality are ignored (dense count).
* **FLOPs** = 2 per MAC, plus one FLOP per score for each of:

  - the scale (``scores * scale``; counted on the scores, wherever a backend applies it --
    on ``Q`` and ``K`` in the math path, folded into the softmax exponent in flash kernels),
  - the softmax (1 per element, DeepSpeed's constant),
  - an explicit ``attn_mask`` of any dtype (every backend applies masks as an additive bias:
    bool masks are turned into ``0/-inf`` floats before they reach a kernel),
  - dropout on the attention weights when ``dropout_p > 0`` (the dropout convention: one
    multiply per element; see :mod:`flopsight.formulas.dropout`).

  ``is_causal=True`` adds nothing: the causal mask is an index test, not arithmetic, and
  the dense count does not subtract the skipped upper triangle. (A causal-aware count may
  come later as a clearly labelled option: :func:`attention_cost` takes ``is_causal`` from
  every caller for that reason and ignores it today.)

This equals what an eager implementation written with ``@``, ``/ sqrt(d)``, ``+ mask``,
``softmax`` and ``dropout`` costs op by op, so switching a model between eager and SDPA
attention does not change its count. DeepSpeed counts ``2 * MACs`` for SDPA and misses the
per-score terms; PyTorch's ``FlopCounterMode`` counts the CPU flash kernel as 0.

Why units: ``F.scaled_dot_product_attention`` runs ``_scaled_dot_product_flash_attention_for_cpu``
on CPU, a ``bmm``/``_safe_softmax`` decomposition on meta (and on CPU when flash cannot be
used), and flash / efficient / cuDNN kernels on CUDA. It is counted as one unit from its
arguments, so every device agrees. Each fused forward kernel is also registered at dispatch
with the same formula (its layout and argument positions differ), for when it is reached
without the unit -- called directly, from ``torch.nn.attention.varlen``, or with no function
mode active.

``F.multi_head_attention_forward`` (what ``nn.MultiheadAttention`` runs whenever a function
mode is active -- always, while flopsight counts) is a unit too: in-projection + the
attention core above + out-projection. ``aten._native_multi_head_attention`` and
``aten._transformer_encoder_layer_fwd`` (the eval + no_grad fast paths, reached only without
a function mode or when called directly) are counted to equal the slow path's total.

Backward (dense, device-independent model FLOPs)
------------------------------------------------
Each unit has a backward formula, evaluated at forward time from which operands require
grad, and charged once (as ``<unit>.backward``) whatever kernels the backward runs -- the
CPU flash backward kernel, the math decomposition's ``bmm``/``_softmax_backward_data``/``mul``
ops, meta, or CUDA's fused kernels. For the attention core (:func:`attention_backward_cost`):

* ``dV = P^T dO`` if V requires grad: ``scores * Ev`` MACs;
* if Q, K or the mask requires grad, the gradient of the scores: ``dP = dO V^T``
  (``scores * Ev`` MACs), the dropout backward (1 per score when ``dropout_p > 0``) and the
  softmax backward (``activation.softmax_backward_flops``: 4 per score);
* the scale's backward, 1 per score, if Q or K requires grad (counted on the scores, as in
  the forward; the math path scales ``dQ`` and ``dK`` instead);
* ``dQ = dS K`` and ``dK = dS^T Q``: ``scores * E`` MACs each, if Q (K) requires grad;
* a mask gets no gradient unless it requires grad; then the add passes the score
  gradient through (0 FLOPs), summed back over the dims it was broadcast along;
* gradients of operands shared across query heads or broadcast batch dims -- the KV heads
  of grouped-query attention -- are computed per query head and summed back: 1 FLOP per
  element summed (the reduction convention).

A flash kernel's backward recomputes the scores and the softmax instead of storing them: that
recomputation trades compute for memory, is an implementation detail, and is not counted.
The fused backward kernels are registered at dispatch with the same cost (all of ``dQ``,
``dK``, ``dV``, which they always return, or those their ``grad_input_mask`` asks for).

``F.multi_head_attention_forward``'s backward = out-projection backward + the core's +
in-projection backward, each gradient counted where something requires it (see
:func:`multi_head_attention_backward`).

>>> import torch
>>> from flopsight.formulas.attention import scaled_dot_product_attention
>>> q = torch.ones(2, 4, 16, 8)      # B=2, H=4, L=16, E=8
>>> kv = torch.ones(2, 4, 32, 8)     # S=32
>>> # scores = 2*4*16*32 = 4096; MACs = 4096*8 + 4096*8; FLOPs = 2*MACs + scale + softmax
>>> scaled_dot_product_attention(None, q, kv, kv)
Cost(macs=65536, flops=139264)
>>> from flopsight.formulas.attention import scaled_dot_product_attention_backward
>>> _ = q.requires_grad_()           # only Q requires grad: dP, softmax and scale backward, dQ
>>> # MACs = 4096*8 (dP) + 4096*8 (dQ); FLOPs = 2*MACs + 4*4096 (softmax) + 4096 (scale)
>>> scaled_dot_product_attention_backward(None, q, kv, kv)
Cost(macs=65536, flops=151552)
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from .activation import activation_flops, softmax_backward_flops, softmax_flops
from .dropout import dropout_backward_flops, dropout_flops
from .elementwise import elementwise_flops
from .matmul import linear_cost
from .norm import layer_norm_flops
from .reduction import mean_flops
from .registry import REGISTRY, Cost
from .shapes import broadcast_shape, numel, prod

__all__ = [
    "attention_cost",
    "attention_backward_cost",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_backward",
    "multi_head_attention",
    "multi_head_attention_backward",
    "native_multi_head_attention",
    "transformer_encoder_layer_fwd",
]

# The fused attention kernels came one torch release at a time (cuDNN in 2.3, the
# overrideable hook in 2.5, ...): registrations name their ops with ``missing_ok=True``.


# -- per-element costs ----------------------------------------------------------------------
# The fast-path kernels below must count what the slow path counts op by op, so every
# per-element constant comes from the family that owns it: softmax and activations
# (activation.py), layer norm (norm.py), elementwise arithmetic -- the scale, mask adds and
# residual adds (elementwise.py) --, the head mean (reduction.py), linear layers (matmul.py)
# and dropout (dropout.py).
def _head_mean_flops(batch: int, heads: int, q_len: int, kv_len: int) -> int:
    """Averaging the attention weights over heads (``need_weights``), as ``aten.mean`` counts it
    (the fast path runs ``sum`` then ``/= heads``; the slow path runs ``mean(dim=1)``)."""
    return mean_flops(batch * heads * q_len * kv_len, batch * q_len * kv_len)


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
) -> Cost:
    """``softmax(Q K^T * scale + mask) V`` for ``batch_heads`` (query) heads, dense.

    ``is_causal`` is accepted from every caller and ignored: the dense convention counts the
    full ``q_len x kv_len`` score matrix. It is the extension point for a causal-aware option.
    """
    del is_causal  # dense count: see the docstring
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


def _bhle(query, key, value, *, masked, dropout_p, is_causal) -> Cost:
    """Layout ``(..., H, L, E)``: SDPA and the ``_scaled_dot_product_*`` kernels."""
    return attention_cost(
        _batch_heads(query, key, value),
        query.shape[-2],
        key.shape[-2],
        query.shape[-1],
        value.shape[-1],
        masked=masked,
        dropout_p=dropout_p or 0.0,
        is_causal=is_causal,
    )


def _blhe(query, key, value, *, masked, dropout_p, is_causal) -> Cost:
    """Layout ``(B, L, H, E)``: ``_flash_attention_forward``, ``_efficient_attention_forward``."""
    b, q_len, heads, e = query.shape
    return attention_cost(
        b * heads, q_len, key.shape[1], e, value.shape[-1],
        masked=masked, dropout_p=dropout_p or 0.0, is_causal=is_causal,
    )


def _varlen(query, key, value, total_q, total_k, max_q, max_k, *, masked, dropout_p, is_causal) -> Cost:
    """Packed variable-length sequences (``cum_seq_q``/``cu_seqlens_q`` given).

    The exact count ``sum_i L_i * S_i`` needs the offsets' *values*, which formulas never
    read (meta tensors have none). We count ``min(total_q * max_k, total_k * max_q)`` per
    head: exact when every sequence of the batch has the same length, an upper bound
    otherwise. ``total_k`` is None for a paged KV cache.
    """
    q_len, kv_len = _varlen_dims(total_q, total_k, max_q, max_k)
    heads, e, ev = query.shape[-2], query.shape[-1], value.shape[-1]
    return attention_cost(heads, q_len, kv_len, e, ev, masked=masked, dropout_p=dropout_p or 0.0, is_causal=is_causal)


def _varlen_dims(total_q, total_k, max_q, max_k) -> tuple[int, int]:
    """(query length, key length) per head whose product bounds the packed scores (see
    :func:`_varlen`); shared by the forward and backward kernels."""
    max_q = int(max_q) if max_q is not None else total_q
    max_k = int(max_k) if max_k is not None else (total_k or 0)
    if total_k is None or total_q * max_k <= total_k * max_q:
        return total_q, max_k
    return max_q, total_k


def _first_float(values, default=0.0) -> float:
    """The first float among ``values`` (bools are not floats): locates ``dropout_p`` in ops
    whose overloads put optional tensors before it."""
    for v in values:
        if isinstance(v, float):
            return v
    return default


# -- scaled_dot_product_attention: the unit and every kernel it may run --------------------
@REGISTRY.register_unit(F.scaled_dot_product_attention, name="scaled_dot_product_attention")
def scaled_dot_product_attention(
    out, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, **kwargs
) -> Cost:
    """``F.scaled_dot_product_attention`` (also ``aten.scaled_dot_product_attention``)."""
    return _bhle(query, key, value, masked=attn_mask is not None, dropout_p=dropout_p, is_causal=is_causal)


# Composite in eager mode, so normally never seen at dispatch; registered so that a backend
# or tracer that keeps it whole is counted the same.
REGISTRY.register("aten::scaled_dot_product_attention", missing_ok=True)(scaled_dot_product_attention)


@REGISTRY.register(
    "aten::_scaled_dot_product_attention_math", "aten::_scaled_dot_product_attention_math_for_mps", missing_ok=True
)
def sdpa_math(
    out, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, dropout_mask=None, **kwargs
) -> Cost:
    """The math reference kernel (a real kernel on MPS); returns ``(output, attn_weights)``."""
    return _bhle(query, key, value, masked=attn_mask is not None, dropout_p=dropout_p, is_causal=is_causal)


@REGISTRY.register("aten::_scaled_dot_product_flash_attention_for_cpu", missing_ok=True)
def sdpa_flash_cpu(
    out, query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None, **kwargs
) -> Cost:
    """CPU flash kernel: ``(B, H, L, E)``; the mask arrives as a float (converted) keyword."""
    return _bhle(query, key, value, masked=attn_mask is not None, dropout_p=dropout_p, is_causal=is_causal)


@REGISTRY.register("aten::_scaled_dot_product_flash_attention", missing_ok=True)
def sdpa_flash(out, query, key, value, *rest, **kwargs) -> Cost:
    """CUDA flash: ``(B, H, L, E)``, no mask. The ``.quantized`` overload puts three descale
    tensors before ``dropout_p``, so ``dropout_p`` is found as the first float argument."""
    dropout_p = kwargs.get("dropout_p", _first_float(rest))
    return _bhle(query, key, value, masked=False, dropout_p=dropout_p, is_causal=kwargs.get("is_causal", False))


@REGISTRY.register("aten::_scaled_dot_product_efficient_attention", missing_ok=True)
def sdpa_efficient(
    out, query, key, value, attn_bias=None, compute_log_sumexp=False, dropout_p=0.0, is_causal=False, **kwargs
) -> Cost:
    """Memory-efficient attention: ``(B, H, L, E)`` with an optional additive ``attn_bias``."""
    return _bhle(query, key, value, masked=attn_bias is not None, dropout_p=dropout_p, is_causal=is_causal)


@REGISTRY.register("aten::_scaled_dot_product_cudnn_attention", missing_ok=True)
def sdpa_cudnn(
    out, query, key, value, attn_bias=None, compute_log_sumexp=False, dropout_p=0.0, is_causal=False, *args, **kwargs
) -> Cost:
    """cuDNN attention: ``(B, H, L, E)`` with an optional ``attn_bias``."""
    return _bhle(query, key, value, masked=attn_bias is not None, dropout_p=dropout_p, is_causal=is_causal)


@REGISTRY.register("aten::_scaled_dot_product_fused_attention_overrideable", missing_ok=True)
def sdpa_overrideable(out, query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False, *args, **kwargs) -> Cost:
    """The hook for out-of-tree backends (PrivateUse1, XPU): ``(B, H, L, E)``."""
    return _bhle(query, key, value, masked=attn_bias is not None, dropout_p=dropout_p, is_causal=is_causal)


@REGISTRY.register("aten::_flash_attention_forward", missing_ok=True)
def flash_attention_forward(
    out, query, key, value, cum_seq_q=None, cum_seq_k=None, max_q=None, max_k=None, dropout_p=0.0, is_causal=False,
    *args, alibi_slopes=None, block_table=None, **kwargs,
) -> Cost:
    """The flash kernel itself: ``(B, L, H, E)``, or packed ``(total, H, E)`` when
    ``cum_seq_q`` is given (nested tensors, ``torch.nn.attention.varlen``). ALiBi slopes
    are an additive bias, counted like a mask."""
    masked = alibi_slopes is not None
    if cum_seq_q is not None:
        total_k = None if (cum_seq_k is None or block_table is not None) else key.shape[0]
        return _varlen(query, key, value, query.shape[0], total_k, max_q, max_k,
                       masked=masked, dropout_p=dropout_p, is_causal=is_causal)
    return _blhe(query, key, value, masked=masked, dropout_p=dropout_p, is_causal=is_causal)


@REGISTRY.register("aten::_flash_attention_forward_no_dropout_inplace", missing_ok=True)
def flash_attention_forward_inplace(out, out_buffer, query, key, value, *args, **kwargs) -> Cost:
    """``_flash_attention_forward`` writing into a given output (its first argument)."""
    return flash_attention_forward(None, query, key, value, *args, **kwargs)


@REGISTRY.register("aten::_efficient_attention_forward", missing_ok=True)
def efficient_attention_forward(
    out, query, key, value, bias=None, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
    dropout_p=0.0, custom_mask_type=0, *args, **kwargs,
) -> Cost:
    """The memory-efficient kernel itself: ``(B, L, H, E)``; packed sequences are
    ``(1, total, H, E)`` with ``cu_seqlens_q``. ``custom_mask_type`` (causal) costs nothing."""
    masked = bias is not None
    if cu_seqlens_q is not None:
        # The kernel returns the batch maxima it used (outputs 4 and 5) when not given.
        if max_seqlen_q is None and isinstance(out, (tuple, list)) and len(out) > 5:
            max_seqlen_q, max_seqlen_k = out[4], out[5]
        total_k = key.shape[1] if cu_seqlens_k is not None else None
        return _varlen(query, key, value, query.shape[1], total_k, max_seqlen_q, max_seqlen_k,
                       masked=masked, dropout_p=dropout_p, is_causal=bool(custom_mask_type))
    return _blhe(query, key, value, masked=masked, dropout_p=dropout_p, is_causal=bool(custom_mask_type))


@REGISTRY.register("aten::_cudnn_attention_forward", missing_ok=True)
def cudnn_attention_forward(
    out, query, key, value, attn_bias=None, cum_seq_q=None, cum_seq_k=None, max_q=None, max_k=None,
    compute_log_sumexp=False, dropout_p=0.0, is_causal=False, *args, **kwargs,
) -> Cost:
    """The cuDNN kernel itself: ``(B, H, L, E)``, or packed ``(total, H, E)`` with ``cum_seq_q``."""
    masked = attn_bias is not None
    if cum_seq_q is not None:
        total_k = key.shape[0] if cum_seq_k is not None else None
        return _varlen(query, key, value, query.shape[0], total_k, max_q, max_k,
                       masked=masked, dropout_p=dropout_p, is_causal=is_causal)
    return _bhle(query, key, value, masked=masked, dropout_p=dropout_p, is_causal=is_causal)


def varlen_attn(out, query, key, value, cu_seq_q, cu_seq_k=None, max_q=None, max_k=None, is_causal=False, *args,
                block_table=None, **kwargs) -> Cost:
    """``torch_attn::_varlen_attn``: the custom op behind ``torch.nn.attention.varlen``."""
    total_k = None if (cu_seq_k is None or block_table is not None) else key.shape[0]
    return _varlen(query, key, value, query.shape[0], total_k, max_q, max_k,
                   masked=False, dropout_p=0.0, is_causal=is_causal)


def varlen_attn_out(out, out_buffer, query, key, value, *args, **kwargs) -> Cost:
    """``torch_attn::_varlen_attn_out``: the same, writing into its first argument."""
    return varlen_attn(None, query, key, value, *args, **kwargs)


# The torch_attn ops exist only once torch.nn.attention.varlen is imported, which costs ~1 s
# (it imports torch._dynamo), too much for `import flopsight`. Register them when the user
# has already imported it; otherwise they are reported as unsupported (see the conventions
# doc: the registry would need lazily resolved op names to do better).
if "torch.nn.attention.varlen" in sys.modules:
    REGISTRY.register(torch.ops.torch_attn._varlen_attn)(varlen_attn)
    REGISTRY.register(torch.ops.torch_attn._varlen_attn_out)(varlen_attn_out)


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
        .plus(linear_cost(batch * kv_len, k_in, embed_dim, bias))
        .plus(linear_cost(batch * kv_len, v_in, embed_dim, bias))
    )


def _mha_dims(query, key, num_heads, bias_k, add_zero_attn, static_k) -> tuple[int, ...]:
    """(batch, query length, key length, embed dim, head dim, attended key positions) of an
    ``F.multi_head_attention_forward`` call: ``(L, N, D)`` inputs or unbatched ``(L, D)``."""
    batch = query.shape[1] if query.dim() == 3 else 1
    q_len, kv_len, embed_dim = query.shape[0], key.shape[0], query.shape[-1]
    attended = static_k.shape[1] if static_k is not None else kv_len
    attended += (bias_k is not None) + bool(add_zero_attn)  # one appended position each
    return batch, q_len, kv_len, embed_dim, embed_dim // num_heads, attended


@REGISTRY.register_unit(F.multi_head_attention_forward, name="multi_head_attention")
def multi_head_attention(
    out,
    query,
    key,
    value,
    embed_dim_to_check,
    num_heads,
    in_proj_weight=None,
    in_proj_bias=None,
    bias_k=None,
    bias_v=None,
    add_zero_attn=False,
    dropout_p=0.0,
    out_proj_weight=None,
    out_proj_bias=None,
    training=True,
    key_padding_mask=None,
    need_weights=True,
    attn_mask=None,
    use_separate_proj_weight=False,
    q_proj_weight=None,
    k_proj_weight=None,
    v_proj_weight=None,
    static_k=None,
    static_v=None,
    average_attn_weights=True,
    is_causal=False,
    **kwargs,
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
        cost = cost.plus(Cost.of_flops(elementwise_flops(scores)))  # merging the masks: an add
    cost = cost.plus(attention_cost(
        batch_heads, q_len, attended, head_dim, head_dim,
        masked=attn_mask is not None or key_padding_mask is not None,
        dropout_p=dropout_p if training else 0.0,
        is_causal=is_causal,
    ))
    if need_weights and average_attn_weights:
        cost = cost.plus(Cost.of_flops(_head_mean_flops(batch, num_heads, q_len, attended)))
    out_features = out_proj_weight.shape[0] if out_proj_weight is not None else embed_dim
    return cost.plus(linear_cost(batch * q_len, embed_dim, out_features, out_proj_bias is not None))


@REGISTRY.register("aten::_native_multi_head_attention", missing_ok=True)
def native_multi_head_attention(
    out, query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias,
    mask=None, need_weights=True, average_attn_weights=True, mask_type=None, **kwargs,
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
    cost = cost.plus(attention_cost(batch_heads, q_len, kv_len, head_dim, head_dim, masked=mask is not None))
    if need_weights and average_attn_weights:
        cost = cost.plus(Cost.of_flops(_head_mean_flops(batch, num_head, q_len, kv_len)))
    return cost.plus(linear_cost(batch * q_len, embed_dim, proj_weight.shape[0], proj_bias is not None))


@REGISTRY.register("aten::_transformer_encoder_layer_fwd", missing_ok=True)
def transformer_encoder_layer_fwd(
    out, src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu, norm_first, eps,
    norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2,
    mask=None, mask_type=None, **kwargs,
) -> Cost:
    """``nn.TransformerEncoderLayer``'s fast path, equal to the slow path's total:
    self-attention (``need_weights=False``) + 2 layer norms + ``linear1`` + ReLU/GELU +
    ``linear2`` + 2 residual adds, on ``tokens = B * L`` rows. ``norm_first`` only reorders
    them. Eval only, so the dropouts cost nothing."""
    tokens = numel(src) // embed_dim
    hidden = ffn_weight_1.shape[0]
    cost = native_multi_head_attention(None, src, src, src, embed_dim, num_heads, qkv_weight, qkv_bias,
                                       proj_weight, proj_bias, mask, need_weights=False)
    cost = cost.plus(linear_cost(tokens, embed_dim, hidden, ffn_bias_1 is not None))
    cost = cost.plus(linear_cost(tokens, hidden, ffn_weight_2.shape[0], ffn_bias_2 is not None))
    elementwise = (
        activation_flops(tokens * hidden)
        + layer_norm_flops(tokens * embed_dim, norm_weight_1 is not None)
        + layer_norm_flops(tokens * embed_dim, norm_weight_2 is not None)
        + elementwise_flops(tokens * embed_dim, ops=2)  # the two residual adds
    )
    return cost.plus(Cost.of_flops(elementwise))


# -- backward ----------------------------------------------------------------------------------
# Model FLOPs of the gradients the backward pass needs, dense and device-independent (see the
# module docstring). Flash kernels recompute the scores and the softmax in their backward
# instead of storing them: that recomputation is an implementation detail (a memory/compute
# trade) and is not counted, so a flash kernel, the math decomposition and meta agree.
def _requires_grad(t) -> bool:
    return isinstance(t, torch.Tensor) and t.requires_grad


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
) -> Cost:
    """Backward of ``O = dropout(softmax(Q K^T * scale + mask)) V`` for ``batch_heads`` (query)
    heads, computing only the gradients asked for (``*_grad``), dense:

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

    ``is_causal`` is ignored, as in :func:`attention_cost`.
    """
    del is_causal  # dense count
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


def _dense_backward(query, key, value, mask, *, layout, grads, dropout_p, is_causal) -> Cost:
    """Backward of one attention call in layout ``"bhle"`` or ``"blhe"`` (see the forward
    helpers); ``grads`` = which of (query, key, value, mask) get a gradient."""
    if layout == "bhle":
        bh, q_len, kv_len = _batch_heads(query, key, value), query.shape[-2], key.shape[-2]
    else:
        b, q_len, heads, _ = query.shape
        bh, kv_len = b * heads, key.shape[1]
    e, ev = query.shape[-1], value.shape[-1]
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
        dropout_p=dropout_p or 0.0, is_causal=is_causal, summed=summed,
    )


def _varlen_backward(query, key, value, total_q, total_k, max_q, max_k, *, dropout_p, is_causal) -> Cost:
    """Backward of packed variable-length attention (``(total, H, E)`` operands), all of
    ``dQ``, ``dK``, ``dV`` (what the varlen kernels return): the same scores bound as the
    forward's; with fewer KV heads, ``dK``/``dV`` of every key position sum over the group."""
    q_len, kv_len = _varlen_dims(total_q, total_k, max_q, max_k)
    heads, e, ev = query.shape[-2], query.shape[-1], value.shape[-1]
    summed = 0
    if key.shape[-2] < heads:
        keys = numel(key) // (key.shape[-2] * e)  # total key positions
        summed = heads * keys * (e + ev)
    return attention_backward_cost(heads, q_len, kv_len, e, ev, dropout_p=dropout_p or 0.0, is_causal=is_causal,
                                   summed=summed)


def scaled_dot_product_attention_backward(
    out, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, **kwargs
) -> Cost:
    """Backward of ``F.scaled_dot_product_attention``: the gradients of the operands that
    require grad (read at forward time), whatever kernel the device runs."""
    grads = (_requires_grad(query), _requires_grad(key), _requires_grad(value), _requires_grad(attn_mask))
    return _dense_backward(query, key, value, attn_mask, layout="bhle", grads=grads, dropout_p=dropout_p,
                           is_causal=is_causal)


REGISTRY.set_unit_backward("scaled_dot_product_attention", scaled_dot_product_attention_backward)

# The fused backward kernels compute dQ, dK and dV whenever they run (the efficient and
# overrideable ones take a ``grad_input_mask`` for (q, k, v, bias)); a bias gets a gradient
# only when asked for.
_ALL = (True, True, True, False)


@REGISTRY.register("aten::_scaled_dot_product_flash_attention_for_cpu_backward", missing_ok=True)
def sdpa_flash_cpu_backward(
    out, grad_out, query, key, value, output, logsumexp, dropout_p=0.0, is_causal=False, *, attn_mask=None, **kwargs
) -> Cost:
    """The CPU flash kernel's backward: ``(B, H, L, E)``; no gradient for the mask."""
    return _dense_backward(query, key, value, attn_mask, layout="bhle", grads=_ALL, dropout_p=dropout_p,
                           is_causal=is_causal)


@REGISTRY.register("aten::_scaled_dot_product_flash_attention_backward", missing_ok=True)
def sdpa_flash_backward(
    out, grad_out, query, key, value, output, logsumexp, cum_seq_q=None, cum_seq_k=None, max_q=None, max_k=None,
    dropout_p=0.0, is_causal=False, *args, **kwargs,
) -> Cost:
    """CUDA flash backward: ``(B, H, L, E)``, no mask."""
    return _dense_backward(query, key, value, None, layout="bhle", grads=_ALL, dropout_p=dropout_p,
                           is_causal=is_causal)


@REGISTRY.register("aten::_scaled_dot_product_efficient_attention_backward", missing_ok=True)
def sdpa_efficient_backward(
    out, grad_out, query, key, value, attn_bias, output, logsumexp, philox_seed=None, philox_offset=None,
    dropout_p=0.0, grad_input_mask=(True, True, True, False), is_causal=False, **kwargs,
) -> Cost:
    """Memory-efficient backward: ``(B, H, L, E)``; ``grad_input_mask`` says which of
    (q, k, v, bias) it computes."""
    return _dense_backward(query, key, value, attn_bias, layout="bhle", grads=tuple(grad_input_mask),
                           dropout_p=dropout_p, is_causal=is_causal)


@REGISTRY.register("aten::_scaled_dot_product_cudnn_attention_backward", "aten::_cudnn_attention_backward",
                   missing_ok=True)
def sdpa_cudnn_backward(
    out, grad_out, query, key, value, output, logsumexp, philox_seed=None, philox_offset=None, attn_bias=None,
    cum_seq_q=None, cum_seq_k=None, max_q=None, max_k=None, dropout_p=0.0, is_causal=False, *args, **kwargs,
) -> Cost:
    """cuDNN backward: ``(B, H, L, E)``, or packed ``(total, H, E)`` with ``cum_seq_q``; it
    returns no gradient for ``attn_bias``."""
    if cum_seq_q is not None:
        total_k = key.shape[0] if cum_seq_k is not None else None
        return _varlen_backward(query, key, value, query.shape[0], total_k, max_q, max_k, dropout_p=dropout_p,
                                is_causal=is_causal)
    return _dense_backward(query, key, value, attn_bias, layout="bhle", grads=_ALL, dropout_p=dropout_p,
                           is_causal=is_causal)


@REGISTRY.register("aten::_scaled_dot_product_fused_attention_overrideable_backward", missing_ok=True)
def sdpa_overrideable_backward(
    out, grad_out, query, key, value, attn_bias=None, grad_input_mask=(True, True, True, False), output=None,
    logsumexp=None, cum_seq_q=None, cum_seq_k=None, max_q=None, max_k=None, dropout_p=0.0, is_causal=False,
    *args, **kwargs,
) -> Cost:
    """The out-of-tree backends' hook: ``(B, H, L, E)``, gradients per ``grad_input_mask``."""
    return _dense_backward(query, key, value, attn_bias, layout="bhle", grads=tuple(grad_input_mask),
                           dropout_p=dropout_p, is_causal=is_causal)


@REGISTRY.register("aten::_flash_attention_backward", missing_ok=True)
def flash_attention_backward(
    out, grad_out, query, key, value, output, logsumexp, cum_seq_q=None, cum_seq_k=None, max_q=None, max_k=None,
    dropout_p=0.0, is_causal=False, *args, **kwargs,
) -> Cost:
    """The flash kernel's backward: ``(B, L, H, E)``, or packed ``(total, H, E)`` when
    ``cum_seq_q`` is given."""
    if cum_seq_q is not None:
        total_k = key.shape[0] if cum_seq_k is not None else None
        return _varlen_backward(query, key, value, query.shape[0], total_k, max_q, max_k, dropout_p=dropout_p,
                                is_causal=is_causal)
    return _dense_backward(query, key, value, None, layout="blhe", grads=_ALL, dropout_p=dropout_p,
                           is_causal=is_causal)


@REGISTRY.register("aten::_efficient_attention_backward", missing_ok=True)
def efficient_attention_backward(
    out, grad_out, query, key, value, bias, output, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
    max_seqlen_k=None, logsumexp=None, dropout_p=0.0, philox_seed=None, philox_offset=None, custom_mask_type=0,
    bias_requires_grad=False, **kwargs,
) -> Cost:
    """The memory-efficient kernel's backward: ``(B, L, H, E)``, or packed ``(1, total, H, E)``
    with ``cu_seqlens_q``; the bias gets a gradient when ``bias_requires_grad``."""
    if cu_seqlens_q is not None:
        total_k = key.shape[1] if cu_seqlens_k is not None else None
        return _varlen_backward(query, key, value, query.shape[1], total_k, max_seqlen_q, max_seqlen_k,
                                dropout_p=dropout_p, is_causal=bool(custom_mask_type))
    return _dense_backward(query, key, value, bias, layout="blhe", grads=(True, True, True, bias_requires_grad),
                           dropout_p=dropout_p, is_causal=bool(custom_mask_type))


# -- multi-head attention backward ---------------------------------------------------------------
def _linear_backward(rows: int, in_features: int, out_features: int, *, input_grad, weight_grad, bias_grad) -> Cost:
    """Backward of ``rows`` vectors through a linear map, the products priced by
    :func:`matmul.linear_cost`: ``dX = dY W`` and ``dW = dY^T X`` are ``rows * in * out``
    MACs each; the bias gradient sums ``dY`` over the rows (1 FLOP per element summed)."""
    cost = Cost()
    if input_grad:
        cost = cost.plus(linear_cost(rows, out_features, in_features, False))
    if weight_grad:
        cost = cost.plus(linear_cost(in_features, rows, out_features, False))
    if bias_grad:
        cost = cost.plus(Cost.of_flops(rows * out_features))
    return cost


def multi_head_attention_backward(
    out, query, key, value, embed_dim_to_check, num_heads, in_proj_weight=None, in_proj_bias=None, bias_k=None,
    bias_v=None, add_zero_attn=False, dropout_p=0.0, out_proj_weight=None, out_proj_bias=None, training=True,
    key_padding_mask=None, need_weights=True, attn_mask=None, use_separate_proj_weight=False, q_proj_weight=None,
    k_proj_weight=None, v_proj_weight=None, static_k=None, static_v=None, average_attn_weights=True,
    is_causal=False, **kwargs,
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
    cost = cost.plus(attention_backward_cost(
        batch_heads, q_len, attended, head_dim, head_dim,
        query_grad=q_grad, key_grad=k_grad, value_grad=v_grad, mask_grad=mask_grad,
        dropout_p=dropout_p if training else 0.0, is_causal=is_causal, summed=summed,
    ))
    for needed, rows, x, w in ((q_proj, q_len, query, w_q), (k_proj, kv_len, key, w_k), (v_proj, kv_len, value, w_v)):
        if needed:
            cost = cost.plus(_linear_backward(batch * rows, x.shape[-1], embed_dim, input_grad=rg(x),
                                              weight_grad=rg(w), bias_grad=bias_grad))
    return cost


REGISTRY.set_unit_backward("multi_head_attention", multi_head_attention_backward)


def attention_registry(registry, attention: str):  # TRANSITION: replaced by the attention family's own
    if attention == "dense":
        return registry
    raise NotImplementedError(attention)
