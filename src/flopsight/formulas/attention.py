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

>>> import torch
>>> from flopsight.formulas.attention import scaled_dot_product_attention
>>> q = torch.ones(2, 4, 16, 8)      # B=2, H=4, L=16, E=8
>>> kv = torch.ones(2, 4, 32, 8)     # S=32
>>> # scores = 2*4*16*32 = 4096; MACs = 4096*8 + 4096*8; FLOPs = 2*MACs + scale + softmax
>>> scaled_dot_product_attention(None, q, kv, kv)
Cost(macs=65536, flops=139264)
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from .activation import activation_flops, softmax_flops
from .dropout import dropout_flops
from .elementwise import elementwise_flops
from .matmul import linear_cost
from .norm import layer_norm_flops
from .reduction import mean_flops
from .registry import REGISTRY, Cost
from .shapes import broadcast_shape, numel, prod

__all__ = [
    "attention_cost",
    "scaled_dot_product_attention",
    "multi_head_attention",
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
    heads, e, ev = query.shape[-2], query.shape[-1], value.shape[-1]
    max_q = int(max_q) if max_q is not None else total_q
    max_k = int(max_k) if max_k is not None else (total_k or 0)
    if total_k is None:
        q_len, kv_len = total_q, max_k
    elif total_q * max_k <= total_k * max_q:
        q_len, kv_len = total_q, max_k
    else:
        q_len, kv_len = max_q, total_k
    return attention_cost(heads, q_len, kv_len, e, ev, masked=masked, dropout_p=dropout_p or 0.0, is_causal=is_causal)


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
    batched = query.dim() == 3
    q_len, kv_len = query.shape[0], key.shape[0]
    batch = query.shape[1] if batched else 1
    embed_dim = query.shape[-1]
    head_dim = embed_dim // num_heads
    batch_heads = batch * num_heads

    cost = _in_projection(batch, q_len, kv_len, embed_dim, query.shape[-1], key.shape[-1], value.shape[-1],
                          in_proj_bias is not None)

    attended = static_k.shape[1] if static_k is not None else kv_len
    if bias_k is not None:
        attended += 1
    if add_zero_attn:
        attended += 1
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
