"""Attention: SDPA on every kernel, multi-head attention, the native fast paths, and eager
attention written by hand -- hand-derived counts, identical on CPU (flash and math
kernels) and meta.

Notation: B batch, H (query) heads, L query length, S key length, E query/key head dim,
Ev value head dim, scores = B*H*L*S. The dense convention:
MACs = scores*E (Q K^T) + scores*Ev (P V);
FLOPs = 2*MACs + scores (scale) + scores (softmax) [+ scores (mask)] [+ scores (dropout)].
For multi-head attention, D is the embedding dim, N the batch, hd = D/H.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from background import early_script
from helpers import (
    kernel_cost,
    measure,
    measure_cpu_meta,
    measure_on,
    meta,
    ops_of,
    require,
    require_meta_kernel,
    to_device,
    torch_op,
)
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

import flopsight
from flopsight.formulas.binding import Binder

aten = torch.ops.aten


def bound_cost(formula, op, *args, out=None, **kwargs) -> tuple[int, int]:
    """(MACs, FLOPs) of ``formula`` called with ``op``'s arguments bound by its schema."""
    cost = formula(out, **Binder.of_op(op).bind(args, kwargs))
    return cost.macs, cost.flops


def sdpa_hand(bh, L, S, E, Ev, *, mask=False, dropout=False):
    """(MACs, FLOPs) of one dense attention, written out from the convention."""
    scores = bh * L * S
    macs = scores * E + scores * Ev  # Q K^T + P V
    flops = 2 * macs + scores + scores  # + scale + softmax
    flops += scores * bool(mask) + scores * bool(dropout)  # + mask add + dropout multiply
    return macs, flops


class _Ops(TorchDispatchMode):
    """Records which aten ops ran (no counting): shows which kernel a call reached."""

    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def aten_ops(fn, *args, **kwargs) -> set[str]:
    with _Ops() as mode:
        fn(*args, **kwargs)
    return mode.names


# -- F.scaled_dot_product_attention --------------------------------------------------------
def _bool_mask(*shape):
    return torch.rand(*shape) > 0.3


SDPA_CASES = {
    # name: (q shape, k shape, v shape, kwargs, expected (MACs, FLOPs) by hand)
    "plain": ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8), {}, sdpa_hand(2 * 4, 5, 7, 8, 8)),
    # literal check of the same shapes: scores = 2*4*5*7 = 280; MACs = 280*8*2; FLOPs = 2*4480 + 2*280
    "plain_literal": ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8), {}, (4480, 9520)),
    "Ev_ne_E": ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 6), {}, sdpa_hand(8, 5, 7, 8, 6)),
    "gqa": ((2, 4, 5, 8), (2, 2, 7, 8), (2, 2, 7, 8), {"enable_gqa": True}, sdpa_hand(2 * 4, 5, 7, 8, 8)),
    "float_mask": ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8), {"attn_mask": torch.randn(5, 7)},
                   sdpa_hand(8, 5, 7, 8, 8, mask=True)),
    "bool_mask": ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8), {"attn_mask": torch.ones(5, 7, dtype=torch.bool)},
                  sdpa_hand(8, 5, 7, 8, 8, mask=True)),
    "broadcast_bool_mask": ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8),
                            {"attn_mask": torch.ones(2, 1, 5, 7, dtype=torch.bool)},
                            sdpa_hand(8, 5, 7, 8, 8, mask=True)),
    "causal": ((2, 4, 6, 8), (2, 4, 6, 8), (2, 4, 6, 8), {"is_causal": True}, sdpa_hand(8, 6, 6, 8, 8)),
    "dropout": ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8), {"dropout_p": 0.2},
                sdpa_hand(8, 5, 7, 8, 8, dropout=True)),
    "scale": ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8), {"scale": 0.5}, sdpa_hand(8, 5, 7, 8, 8)),
    "five_dims": ((3, 2, 4, 5, 8), (3, 2, 4, 7, 8), (3, 2, 4, 7, 8), {}, sdpa_hand(3 * 2 * 4, 5, 7, 8, 8)),
    "no_heads": ((3, 5, 8), (3, 7, 8), (3, 7, 8), {}, sdpa_hand(3, 5, 7, 8, 8)),
    # leading dims broadcast as in matmul: one query set against 2 batches of keys -> 2*4 heads
    "broadcast_query": ((1, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8), {}, sdpa_hand(2 * 4, 5, 7, 8, 8)),
    "broadcast_heads": ((2, 1, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8), {}, sdpa_hand(2 * 4, 5, 7, 8, 8)),
}


@pytest.mark.parametrize("name", list(SDPA_CASES))
def test_sdpa_counts_the_same_on_every_kernel(name):
    q_shape, k_shape, v_shape, kwargs, expected = SDPA_CASES[name]
    q, k, v = torch.randn(q_shape), torch.randn(k_shape), torch.randn(v_shape)
    assert measure_cpu_meta(F.scaled_dot_product_attention, q, k, v, **kwargs) == expected
    with sdpa_kernel(SDPBackend.MATH):
        assert measure_on("cpu", F.scaled_dot_product_attention, q, k, v, **kwargs) == expected


def test_sdpa_is_one_unit_whatever_it_decomposes_into():
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 7, 8), torch.randn(2, 4, 7, 6)
    m = torch.randn(5, 7)
    macs, flops = sdpa_hand(8, 5, 7, 8, 6, mask=True, dropout=True)
    expected = {"scaled_dot_product_attention": (1, macs, flops)}
    # Ev != E and dropout send CPU to the math path (bmm, _safe_softmax, dropout ops): none
    # of those is counted again.
    assert ops_of(F.scaled_dot_product_attention, q, k, v, attn_mask=m, dropout_p=0.1) == expected
    # all by keyword, as some callers do
    assert ops_of(F.scaled_dot_product_attention, query=q, key=k, value=v, attn_mask=m, dropout_p=0.1) == expected


def test_cpu_really_runs_two_different_kernels():
    """The CPU comparison above is meaningful: flash by default, the decomposition under MATH."""
    q = torch.randn(2, 4, 5, 8)
    default = aten_ops(F.scaled_dot_product_attention, q, q, q)
    with sdpa_kernel(SDPBackend.MATH):
        math_path = aten_ops(F.scaled_dot_product_attention, q, q, q)
    meta = aten_ops(F.scaled_dot_product_attention, q.to("meta"), q.to("meta"), q.to("meta"))
    assert "aten._scaled_dot_product_flash_attention_for_cpu" in default
    assert "aten._scaled_dot_product_flash_attention_for_cpu" not in math_path
    assert {"aten.bmm", "aten._safe_softmax"} <= math_path
    assert "aten._scaled_dot_product_flash_attention_for_cpu" not in meta


# -- the fused kernels, at dispatch --------------------------------------------------------
def test_cpu_flash_kernel_called_directly_counts_like_sdpa():
    """Reached without the unit (called directly): the same formula, mask and causal included."""
    q, k = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 7, 8)
    flash = aten._scaled_dot_product_flash_attention_for_cpu
    assert measure_on("cpu", flash, q, k, k) == sdpa_hand(8, 5, 7, 8, 8)
    mask = torch.randn(5, 7)
    assert measure_on("cpu", flash, q, k, k, attn_mask=mask) == sdpa_hand(8, 5, 7, 8, 8, mask=True)
    qs = torch.randn(2, 4, 6, 8)
    assert measure_on("cpu", flash, qs, qs, qs, 0.0, True) == sdpa_hand(8, 6, 6, 8, 8)  # is_causal
    gqa_k = torch.randn(2, 2, 7, 8)  # 2 KV heads for 4 query heads
    assert measure_on("cpu", flash, q, gqa_k, gqa_k) == sdpa_hand(8, 5, 7, 8, 8)
    expected = {"aten._scaled_dot_product_flash_attention_for_cpu": (1, *sdpa_hand(8, 5, 7, 8, 8))}
    assert ops_of(flash, q, k, k) == expected


# B=2, H=4, L=5, S=7, E=8, Ev=6 in every layout; the CUDA kernels cannot run here, so their
# formulas are called through the registry with their schema's argument positions.
B, H, L, S, E, EV = 2, 4, 5, 7, 8, 6
BHLE = (meta(B, H, L, E), meta(B, H, S, E), meta(B, H, S, EV))
BLHE = (meta(B, L, H, E), meta(B, S, H, E), meta(B, S, H, EV))
BIAS = meta(B, H, L, S)
KERNEL_CASES = {
    "flash": (aten._scaled_dot_product_flash_attention, (*BHLE, 0.1, True), {}, dict(dropout=True)),
    "flash_defaults": (aten._scaled_dot_product_flash_attention, BHLE, {}, {}),
    "flash_quantized": (torch_op("aten._scaled_dot_product_flash_attention.quantized"),  # not in 2.9
                        (*BHLE, None, None, None, 0.1), {},
                        dict(dropout=True)),
    "efficient": (aten._scaled_dot_product_efficient_attention, (*BHLE, BIAS, True, 0.1), {},
                  dict(mask=True, dropout=True)),
    "efficient_no_bias": (aten._scaled_dot_product_efficient_attention, (*BHLE, None, False), {}, {}),
    "cudnn": (aten._scaled_dot_product_cudnn_attention, (*BHLE, None, True, 0.0, True), {"scale": 0.3}, {}),
    "cudnn_bias": (aten._scaled_dot_product_cudnn_attention, (*BHLE, BIAS, True, 0.1), {},
                   dict(mask=True, dropout=True)),
    "overrideable": (aten._scaled_dot_product_fused_attention_overrideable, BHLE, {"attn_bias": BIAS}, dict(mask=True)),
    "flash_forward": (aten._flash_attention_forward, (*BLHE, None, None, L, S, 0.1, False, False), {},
                      dict(dropout=True)),
    "flash_forward_alibi": (aten._flash_attention_forward, (*BLHE, None, None, L, S, 0.0, True, False),
                            {"alibi_slopes": meta(H)}, dict(mask=True)),
    "efficient_forward": (aten._efficient_attention_forward, (*BLHE, None, None, None, None, None, 0.0, 1), {}, {}),
    "efficient_forward_bias": (aten._efficient_attention_forward, (*BLHE, BIAS, None, None, L, S, 0.1, 0), {},
                               dict(mask=True, dropout=True)),
    "cudnn_forward": (aten._cudnn_attention_forward, (*BHLE, None, None, None, L, S, True, 0.1), {},
                      dict(dropout=True)),
    "sdpa_math": (aten._scaled_dot_product_attention_math, (*BHLE, BIAS, 0.1), {}, dict(mask=True, dropout=True)),
}


@pytest.mark.parametrize("name", list(KERNEL_CASES))
def test_every_fused_kernel_counts_like_sdpa(name):
    op, args, kwargs, flags = KERNEL_CASES[name]
    require(op)
    assert kernel_cost(op, *args, **kwargs) == sdpa_hand(B * H, L, S, E, EV, **flags)


# Packed variable-length sequences: two sequences of length 5 (queries) and 7 (keys), so
# total_q = 10, total_k = 14 and the exact count is 2 sequences * H * 5 * 7 scores.
VARLEN_Q, VARLEN_K, VARLEN_V = meta(2 * L, H, E), meta(2 * S, H, E), meta(2 * S, H, EV)
CUM_Q, CUM_K = meta(3), meta(3)
VARLEN_CASES = {
    "flash_forward": (aten._flash_attention_forward,
                      (VARLEN_Q, VARLEN_K, VARLEN_V, CUM_Q, CUM_K, L, S, 0.0, True, False)),
    "cudnn_forward": (aten._cudnn_attention_forward, (VARLEN_Q, VARLEN_K, VARLEN_V, None, CUM_Q, CUM_K, L, S, True)),
    "efficient_forward": (aten._efficient_attention_forward,
                          (VARLEN_Q[None], VARLEN_K[None], VARLEN_V[None], None, CUM_Q, CUM_K, L, S, 0.0, 0)),
}


@pytest.mark.parametrize("name", list(VARLEN_CASES))
def test_packed_sequences_of_equal_length_count_exactly(name):
    op, args = VARLEN_CASES[name]
    assert kernel_cost(op, *args) == sdpa_hand(2 * H, L, S, E, EV)


def test_packed_sequences_of_unequal_length_are_bounded_without_reading_offsets():
    """Lengths (2, 8) for queries and keys: exact = H*(2*2 + 8*8) = 68*H scores. The offsets'
    values are never read (meta has none): the bound is min(total_q*max_k, total_k*max_q)
    = min(10*8, 10*8) = 80 per head."""
    q, kv = meta(10, H, E), meta(10, H, E)
    assert kernel_cost(aten._flash_attention_forward, q, kv, kv, CUM_Q, CUM_K, 8, 8, 0.0, False, False) == sdpa_hand(
        H, 10, 8, E, E)


def _varlen_ops():
    """torch.nn.attention.varlen's custom ops (registered only when that module was imported
    before flopsight: importing it costs ~1 s), skipping on a torch without the module."""
    require("torch.nn.attention.varlen")
    import torch.nn.attention.varlen  # noqa: F401  (defines the torch_attn ops)

    return torch.ops.torch_attn


def test_varlen_attn_custom_ops():
    """torch.nn.attention.varlen's forward op: the same packed-sequence count."""
    from flopsight.formulas.attention import varlen_attn

    ops = _varlen_ops()
    args = (VARLEN_Q, VARLEN_K, VARLEN_V, CUM_Q, CUM_K, L, S)
    assert bound_cost(varlen_attn, ops._varlen_attn.default, *args, True) == sdpa_hand(2 * H, L, S, E, EV)


def test_varlen_attn_out_custom_op():
    from flopsight.formulas.attention import varlen_attn

    _varlen_ops()
    out_op = torch_op("torch_attn._varlen_attn_out.default")  # 2.11 has none
    require(out_op)
    args = (VARLEN_Q, VARLEN_K, VARLEN_V, CUM_Q, CUM_K, L, S)
    assert bound_cost(varlen_attn, out_op, meta(2 * L, H, EV), *args) == sdpa_hand(2 * H, L, S, E, EV)


def test_varlen_attn_paged_kv_cache():
    """A paged KV cache (block_table, no key offsets): bounded by total_q * max_k."""
    from flopsight.formulas.attention import varlen_attn

    op = _varlen_ops()._varlen_attn.default
    if "block_table" not in [a.name for a in op._schema.arguments]:  # 2.11's has none
        pytest.skip(f"torch {torch.__version__}'s torch_attn::_varlen_attn has no block_table argument")
    assert bound_cost(varlen_attn, op, VARLEN_Q, meta(4, 16, H, E), meta(4, 16, H, EV), CUM_Q, None, L, S,
                      block_table=meta(2, 2)) == sdpa_hand(H, 2 * L, S, E, EV)


# each torch_attn op this torch defines (2.11 has no _varlen_attn_out), as name=registered
VARLEN_FIRST = early_script("varlen imported before flopsight", (
    "import torch, torch.nn.attention.varlen, flopsight; "
    "from flopsight.formulas import REGISTRY; ops = torch.ops.torch_attn; "
    "print(*(f'{n}={REGISTRY.is_registered(getattr(ops, n))}' for n in "
    "('_varlen_attn', '_varlen_attn_out', '_varlen_attn_backward') if hasattr(ops, n)))"))


@pytest.mark.any_backend
def test_varlen_ops_registered_when_imported_first(scripts):
    require("torch.nn.attention.varlen")
    run = scripts[VARLEN_FIRST]  # (in an interpreter of its own, run in the background)
    registered = dict(word.split("=") for word in run.stdout.split())
    assert "_varlen_attn" in registered and set(registered.values()) == {"True"}, (run.stdout, run.stderr)


def test_efficient_forward_takes_maxima_from_its_outputs_when_not_given():
    out = (None, None, None, None, L, S)  # (output, lse, seed, offset, max_seqlen_q, max_seqlen_k)
    args = (VARLEN_Q[None], VARLEN_K[None], VARLEN_V[None], None, CUM_Q, CUM_K, None, None, 0.0, 0)
    assert kernel_cost(aten._efficient_attention_forward, *args, out=out) == sdpa_hand(2 * H, L, S, E, EV)


# -- nn.MultiheadAttention / F.multi_head_attention_forward --------------------------------
def mha_hand(*, N, L, S, D, H, kdim=None, vdim=None, bias=True, mask=False, both_masks=False, dropout=False,
             need_weights=True, average=True, extra_kv=0):
    """(MACs, FLOPs) of one multi-head attention, from its hyperparameters.

    extra_kv: key positions appended by add_bias_kv / add_zero_attn (1 each).
    """
    kdim, vdim, hd = kdim or D, vdim or D, D // H
    macs = N * L * D * D + N * S * kdim * D + N * S * vdim * D  # q, k, v in-projections
    extra = (N * L * D + 2 * N * S * D) if bias else 0  # their bias adds
    Sa = S + extra_kv
    scores = N * H * L * Sa
    macs += scores * hd + scores * hd  # Q K^T, P V
    extra += 2 * scores  # scale + softmax
    extra += scores * bool(mask) + scores * bool(both_masks)  # mask add (+ merging two masks)
    extra += scores * bool(dropout)
    if need_weights and average:
        extra += N * H * L * Sa + N * L * Sa  # mean over heads: adds + divides
    macs += N * L * D * D  # out-projection
    extra += N * L * D if bias else 0
    return macs, 2 * macs + extra


def test_mha_literal_counts():
    # N=3, L=S=5, D=8, H=2: in-proj 15*8*24 = 2880 MACs + 360 bias; scores 3*2*5*5 = 150,
    # core 150*4*2 = 1200 MACs; out-proj 15*8*8 = 960 MACs + 120 bias; need_weights mean
    # 150 + 75. FLOPs = 2*5040 + 360 + 120 + 150 (scale) + 150 (softmax) + 225.
    mha = nn.MultiheadAttention(8, 2)
    x = torch.randn(5, 3, 8)
    assert measure_on("cpu", mha, x, x, x) == (5040, 11085)
    assert mha_hand(N=3, L=5, S=5, D=8, H=2) == (5040, 11085)


MASKS = ["none", "attn_float", "attn_bool", "kpm_bool", "both"]


def _masks(kind, N, L, S):
    attn_float = torch.zeros(L, S).masked_fill(torch.rand(L, S) > 0.7, float("-inf"))
    attn_bool = torch.rand(L, S) > 0.7
    kpm = torch.zeros(N, S, dtype=torch.bool)
    kpm[:, -1] = True
    return {
        "none": {},
        "attn_float": {"attn_mask": attn_float},
        "attn_bool": {"attn_mask": attn_bool},
        "kpm_bool": {"key_padding_mask": kpm},
        "both": {"attn_mask": attn_bool, "key_padding_mask": kpm},
    }[kind]


@pytest.mark.parametrize("mode", ["train", "eval", "eval_no_grad"])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("masks", MASKS)
def test_multihead_attention_module(mode, batch_first, need_weights, masks):
    N, L, S, D, Hh = 2, 5, 7, 8, 2
    mha = nn.MultiheadAttention(D, Hh, dropout=0.1, batch_first=batch_first)
    mha.train(mode == "train")
    q = torch.randn(N, L, D) if batch_first else torch.randn(L, N, D)
    kv = torch.randn(N, S, D) if batch_first else torch.randn(S, N, D)
    kwargs = dict(_masks(masks, N, L, S), need_weights=need_weights)
    expected = mha_hand(N=N, L=L, S=S, D=D, H=Hh, mask=masks != "none", both_masks=masks == "both",
                        dropout=mode == "train", need_weights=need_weights)
    with torch.set_grad_enabled(mode != "eval_no_grad"):
        assert measure_cpu_meta(mha, q, kv, kv, **kwargs) == expected


def test_multihead_attention_is_one_unit():
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(2, 5, 8)
    with torch.no_grad():  # the fast-path condition: not taken while a function mode is active
        ops = ops_of(mha, x, x, x, need_weights=False)
    costly = {name: v for name, v in ops.items() if v[1] or v[2]}
    assert costly == {"multi_head_attention": (1, *mha_hand(N=2, L=5, S=5, D=8, H=2, need_weights=False))}


def test_mha_self_attention_with_same_tensor():
    """q is k is v: torch runs one packed (3D x D) product instead of three; same count."""
    mha = nn.MultiheadAttention(8, 2)
    x = torch.randn(6, 3, 8)
    assert measure_cpu_meta(mha, x, x, x) == mha_hand(N=3, L=6, S=6, D=8, H=2)


@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_with_kdim_vdim(need_weights):
    mha = nn.MultiheadAttention(8, 2, kdim=6, vdim=4)  # separate q/k/v projection weights
    q, k, v = torch.randn(5, 3, 8), torch.randn(7, 3, 6), torch.randn(7, 3, 4)
    expected = mha_hand(N=3, L=5, S=7, D=8, H=2, kdim=6, vdim=4, need_weights=need_weights)
    assert measure_cpu_meta(mha, q, k, v, need_weights=need_weights) == expected


@pytest.mark.parametrize("add_bias_kv, add_zero_attn, extra", [(True, False, 1), (False, True, 1), (True, True, 2)])
def test_mha_extra_key_positions(add_bias_kv, add_zero_attn, extra):
    mha = nn.MultiheadAttention(8, 2, add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn)
    q, kv = torch.randn(5, 3, 8), torch.randn(7, 3, 8)
    mask = torch.zeros(5, 7)
    expected = mha_hand(N=3, L=5, S=7, D=8, H=2, extra_kv=extra, mask=True)
    assert measure_cpu_meta(mha, q, kv, kv, attn_mask=mask) == expected


def test_mha_without_bias_unbatched_and_unaveraged():
    mha = nn.MultiheadAttention(8, 4, bias=False)
    q, kv = torch.randn(5, 8), torch.randn(7, 8)  # unbatched (L, D): N = 1
    expected = mha_hand(N=1, L=5, S=7, D=8, H=4, bias=False, average=False)
    assert measure_cpu_meta(mha, q, kv, kv, average_attn_weights=False) == expected


def test_mha_causal_hint_still_counts_the_given_mask():
    """is_causal needs attn_mask; the given mask is counted whatever torch does with the hint."""
    mha = nn.MultiheadAttention(8, 2)
    x = torch.randn(6, 3, 8)
    causal = nn.Transformer.generate_square_subsequent_mask(6)
    expected = mha_hand(N=3, L=6, S=6, D=8, H=2, mask=True, need_weights=False)
    kwargs = dict(attn_mask=causal, is_causal=True, need_weights=False)
    assert measure_cpu_meta(mha, x, x, x, **kwargs) == expected


def test_functional_mha_called_directly():
    mha = nn.MultiheadAttention(8, 2)
    q, kv = torch.randn(5, 3, 8), torch.randn(7, 3, 8)

    def mha_forward(q, kv, w, b, ow, ob):
        return F.multi_head_attention_forward(q, kv, kv, 8, 2, w, b, None, None, False, 0.0, ow, ob,
                                              training=False, need_weights=False)

    params = (mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight, mha.out_proj.bias)
    expected = mha_hand(N=3, L=5, S=7, D=8, H=2, need_weights=False)
    assert measure_cpu_meta(mha_forward, q, kv, *params) == expected
    assert set(ops_of(mha_forward, q, kv, *params)) == {"multi_head_attention"}


# -- the native fast paths, reached directly ------------------------------------------------
def _native_mha(mha, x, attn_mask, kpm, need_weights, average):
    """What nn.MultiheadAttention's fast path does: merge the masks, one fused op."""
    merged, mask_type = mha.merge_masks(attn_mask, kpm, x)
    return torch._native_multi_head_attention(
        x, x, x, mha.embed_dim, mha.num_heads, mha.in_proj_weight, mha.in_proj_bias,
        mha.out_proj.weight, mha.out_proj.bias, merged, need_weights, average, mask_type,
    )


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("masks", ["none", "attn", "kpm", "both"])
@pytest.mark.parametrize("need_weights, average", [(True, True), (True, False), (False, True)])
def test_native_mha_equals_the_slow_path(device, masks, need_weights, average):
    require_meta_kernel(device, "aten::_native_multi_head_attention")
    N, L, D, Hh = 3, 5, 8, 2
    x = torch.randn(N, L, D)
    # float masks, as nn.MultiheadAttention hands them on after _canonical_mask
    attn = torch.zeros(L, L).masked_fill(torch.rand(L, L) > 0.7, float("-inf")) if masks in ("attn", "both") else None
    kpm = torch.zeros(N, L).index_fill(1, torch.tensor([L - 1]), float("-inf")) if masks in ("kpm", "both") else None
    expected = mha_hand(N=N, L=L, S=L, D=D, H=Hh, mask=masks != "none", both_masks=masks == "both",
                        need_weights=need_weights, average=average)
    mha = nn.MultiheadAttention(D, Hh, batch_first=True).eval()
    with torch.no_grad():
        fast = measure_on(device, _native_mha, mha, x, attn, kpm, need_weights, average)
        slow = measure_on(device, mha, x, x, x, attn_mask=attn, key_padding_mask=kpm,
                          need_weights=need_weights, average_attn_weights=average)
    assert fast == expected
    assert slow == expected


def _native_layer(tel, x, mask=None, mask_type=None):
    """What nn.TransformerEncoderLayer's fast path calls."""
    sa = tel.self_attn
    return torch._transformer_encoder_layer_fwd(
        x, sa.embed_dim, sa.num_heads, sa.in_proj_weight, sa.in_proj_bias, sa.out_proj.weight, sa.out_proj.bias,
        tel.activation_relu_or_gelu == 2, tel.norm_first, tel.norm1.eps, tel.norm1.weight, tel.norm1.bias,
        tel.norm2.weight, tel.norm2.bias, tel.linear1.weight, tel.linear1.bias, tel.linear2.weight,
        tel.linear2.bias, mask, mask_type,
    )


# -- nn.TransformerEncoderLayer ---------------------------------------------------------------
def encoder_layer_hand(*, N, L, D, H, F, train, mask=False):
    """Per-child (MACs, FLOPs) of a TransformerEncoderLayer, from its hyperparameters."""
    tokens = N * L
    return {
        "self_attn": mha_hand(N=N, L=L, S=L, D=D, H=H, need_weights=False, dropout=train, mask=mask),
        "linear1": (tokens * D * F, 2 * tokens * D * F + tokens * F),  # + bias
        "linear2": (tokens * F * D, 2 * tokens * F * D + tokens * D),
        "norm1": (0, 5 * tokens * D),  # layer norm with affine: 5 per element
        "norm2": (0, 5 * tokens * D),
        "dropout": (0, tokens * F * train),  # in the feed-forward block
        "dropout1": (0, tokens * D * train),
        "dropout2": (0, tokens * D * train),
        "": (0, tokens * F + 2 * tokens * D),  # self: F.relu/F.gelu + two residual adds
    }


def _total(per_child):
    return tuple(map(sum, zip(*per_child.values())))


@pytest.mark.parametrize("mode", ["train", "eval_no_grad"])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer_encoder_layer(mode, norm_first, activation):
    N, L, D, Hh, Ff = 2, 6, 8, 2, 16
    tel = nn.TransformerEncoderLayer(D, Hh, Ff, dropout=0.1, activation=activation, batch_first=True,
                                     norm_first=norm_first)
    tel.train(mode == "train")
    x = torch.randn(N, L, D)
    expected = encoder_layer_hand(N=N, L=L, D=D, H=Hh, F=Ff, train=mode == "train")
    with torch.set_grad_enabled(mode == "train"):
        result = flopsight.profile(tel, x)
        meta = flopsight.profile(tel.to("meta"), x.to("meta"))
    for name, (macs, flops) in expected.items():
        stats = result.module(name).self.forward
        assert (name, stats.macs, stats.flops) == (name, macs, flops)
    assert (result.total.forward.macs, result.total.forward.flops) == _total(expected)
    assert (meta.total.forward.macs, meta.total.forward.flops) == _total(expected)


def test_transformer_encoder_layer_with_padding_mask():
    N, L, D, Hh, Ff = 2, 6, 8, 2, 16
    tel = nn.TransformerEncoderLayer(D, Hh, Ff, batch_first=True).eval()
    x = torch.randn(N, L, D)
    kpm = torch.zeros(N, L, dtype=torch.bool)
    kpm[0, -2:] = True
    with torch.no_grad():
        result = flopsight.profile(tel, x, {"src_key_padding_mask": kpm})
    expected = encoder_layer_hand(N=N, L=L, D=D, H=Hh, F=Ff, train=False, mask=True)
    assert (result.total.forward.macs, result.total.forward.flops) == _total(expected)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_native_encoder_layer_equals_the_slow_path(device, norm_first, activation):
    require_meta_kernel(device, "aten::_transformer_encoder_layer_fwd")
    N, L, D, Hh, Ff = 2, 6, 8, 2, 16
    tel = nn.TransformerEncoderLayer(D, Hh, Ff, activation=activation, batch_first=True, norm_first=norm_first).eval()
    x = torch.randn(N, L, D)
    expected = _total(encoder_layer_hand(N=N, L=L, D=D, H=Hh, F=Ff, train=False))
    with torch.no_grad():
        fast = measure_on(device, _native_layer, tel, x)
        slow = flopsight.profile(to_device(tel, device), x.to(device)).total.forward
    assert fast == expected
    assert (slow.macs, slow.flops) == expected


def test_native_encoder_layer_with_mask():
    N, L, D, Hh, Ff = 2, 6, 8, 2, 16
    tel = nn.TransformerEncoderLayer(D, Hh, Ff, batch_first=True).eval()
    x = torch.randn(N, L, D)
    kpm = torch.zeros(N, L).index_fill(1, torch.tensor([L - 1]), float("-inf"))

    def fast(tel, x, kpm):
        merged, mask_type = tel.self_attn.merge_masks(None, kpm, x)
        return _native_layer(tel, x, merged, mask_type)

    expected = _total(encoder_layer_hand(N=N, L=L, D=D, H=Hh, F=Ff, train=False, mask=True))
    with torch.no_grad():
        fast_stats = measure(fast, tel, x, kpm)
        slow_stats = flopsight.profile(tel, x, {"src_key_padding_mask": kpm}).total.forward
    assert (fast_stats.macs, fast_stats.flops) == expected
    assert (slow_stats.macs, slow_stats.flops) == expected


def test_fast_path_kernels_are_counted_as_one_op_each():
    """Reached whenever no function mode is active (or called directly): one fused op each."""
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    tel = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval()
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        mha_ops = ops_of(_native_mha, mha, x, None, None, False, False)
        tel_ops = ops_of(_native_layer, tel, x)
    assert mha_ops == {"aten._native_multi_head_attention": (1, *mha_hand(N=2, L=5, S=5, D=8, H=2, need_weights=False))}
    layer = _total(encoder_layer_hand(N=2, L=5, D=8, H=2, F=16, train=False))
    assert tel_ops == {"aten._transformer_encoder_layer_fwd": (1, *layer)}


# -- eager attention written by hand (HF style) ------------------------------------------
class EagerSelfAttention(nn.Module):
    """BERT/Llama-style eager attention: ``@``, ``/ sqrt(d)``, ``+ mask``, softmax, dropout."""

    def __init__(self, hidden=16, heads=4, p=0.1):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.q, self.k, self.v, self.o = (nn.Linear(hidden, hidden) for _ in range(4))
        self.dropout = nn.Dropout(p)

    def split(self, x):
        b, n, _ = x.shape
        return x.view(b, n, self.heads, self.head_dim).transpose(1, 2)

    def attend(self, q, k, v, mask):
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask
        probs = self.dropout(scores.softmax(dim=-1))
        return probs @ v

    def forward(self, x, mask=None):
        b, n, hidden = x.shape
        ctx = self.attend(self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x)), mask)
        return self.o(ctx.transpose(1, 2).reshape(b, n, hidden))


class SdpaSelfAttention(EagerSelfAttention):
    """The same module with the core in F.scaled_dot_product_attention."""

    def attend(self, q, k, v, mask):
        p = self.dropout.p if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)


def eager_attention_hand(*, N, L, D, H, mask, train):
    tokens = N * L
    linears = 4 * tokens * D * D  # q, k, v, o projections
    core_macs, core_flops = sdpa_hand(N * H, L, L, D // H, D // H, mask=mask, dropout=train)
    return linears + core_macs, 2 * linears + 4 * tokens * D + core_flops  # + 4 bias adds


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("mask", [False, True])
def test_eager_attention_counts_like_sdpa(train, mask):
    N, L, D, Hh = 2, 6, 16, 4
    x = torch.randn(N, L, D)
    m = torch.randn(L, L) if mask else None
    expected = eager_attention_hand(N=N, L=L, D=D, H=Hh, mask=mask, train=train)
    for cls in (EagerSelfAttention, SdpaSelfAttention):
        model = cls(D, Hh).train(train)
        assert measure_cpu_meta(model, x, m) == expected, cls.__name__


def test_eager_attention_op_by_op():
    """The eager core is counted through bmm, div, add, _softmax and the dropout unit."""
    N, L, D, Hh = 2, 6, 16, 4
    scores = N * Hh * L * L  # 288
    ops = ops_of(EagerSelfAttention(D, Hh).train(), torch.randn(N, L, D), torch.randn(L, L))
    assert ops["aten.bmm"] == (2, 2 * scores * 4, 4 * scores * 4)  # Q K^T and P V, head dim 4
    assert ops["aten.div"] == (1, 0, scores)  # the scale
    assert ops["aten.add"] == (1, 0, scores)  # the mask
    assert ops["aten._softmax"] == (1, 0, scores)
    assert ops["dropout"] == (1, 0, scores)


# -- transformers models built offline: eager vs SDPA attention ----------------------------
def _hf_profile(model_cls, config_cls, impl, ids, **config):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = getattr(transformers, config_cls)(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                               num_attention_heads=4, intermediate_size=64,
                                               attn_implementation=impl, **config)
    model = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():
        return flopsight.profile(model, (ids,), {"attention_mask": torch.ones_like(ids)})


def test_hf_bert_counts_the_same_with_eager_and_sdpa_attention():
    """BERT hands both implementations the same additive padding mask: identical counts."""
    ids = torch.randint(0, 100, (2, 12))
    eager = _hf_profile("BertModel", "BertConfig", "eager", ids)
    sdpa = _hf_profile("BertModel", "BertConfig", "sdpa", ids)
    name = "encoder.layer.0.attention.self"
    # per layer: q, k, v projections 3*24*32*32 MACs; core 2*(2*4*12*12)*8 MACs
    assert eager.module(name).forward.macs == sdpa.module(name).forward.macs == 3 * 24 * 32 * 32 + 2 * 1152 * 8
    assert eager.module(name).forward.flops == sdpa.module(name).forward.flops
    assert eager.total.forward.flops == sdpa.total.forward.flops
    assert eager.unsupported_ops == sdpa.unsupported_ops == {}


def test_hf_llama_eager_differs_from_sdpa_only_by_its_causal_mask_add():
    """Llama's eager path adds a float causal mask to the scores; its SDPA path passes
    is_causal=True (no mask): one add per score per layer, and nothing else, differs --
    including the GQA heads (2 KV heads for 4 query heads)."""
    ids = torch.randint(0, 100, (2, 12))
    eager = _hf_profile("LlamaForCausalLM", "LlamaConfig", "eager", ids, num_key_value_heads=2)
    sdpa = _hf_profile("LlamaForCausalLM", "LlamaConfig", "sdpa", ids, num_key_value_heads=2)
    scores = 2 * 4 * 12 * 12  # B * H * L * L per layer
    assert eager.total.forward.macs == sdpa.total.forward.macs
    assert eager.total.forward.flops - sdpa.total.forward.flops == 2 * scores  # 2 layers
