"""The attention="effective" convention (attention_registry): only the kept score entries are
counted -- hand-derived counts.

Every per-score term applies to the entries counted: forward MACs = scores*(E + Ev),
FLOPs = 2*MACs + scores (scale) + scores (softmax) [+ scores (mask)]; backward with Q, K, V
requiring grad: MACs = 2*scores*(E + Ev), FLOPs = 2*MACs + 5*scores.
"""

from __future__ import annotations

import helpers
import pytest
import torch
import torch.nn.functional as F
from helpers import measure_on, meta
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

import flopsight
from flopsight.formulas import REGISTRY, Cost, Registry
from flopsight.formulas.attention import attention_registry, band_entries

EFFECTIVE = attention_registry(REGISTRY, "effective")
aten = torch.ops.aten


def fwd(scores, E=8, Ev=8, mask=False):
    macs = scores * (E + Ev)
    return macs, 2 * macs + 2 * scores + scores * mask


def bwd(scores, E=8, Ev=8):
    macs = 2 * scores * (E + Ev)
    return macs, 2 * macs + 5 * scores


def kernel_cost(op, *args, registry=EFFECTIVE, **kwargs):
    """:func:`helpers.kernel_cost`, with the effective formulas unless told otherwise."""
    return helpers.kernel_cost(op, *args, registry=registry, **kwargs)


def sdpa(device, *shapes, **kwargs):
    q, k, v = (torch.randn(s, device=device) for s in shapes)
    return measure_on(device, F.scaled_dot_product_attention, q, k, v, registry=EFFECTIVE, **kwargs)


# -- the option itself ---------------------------------------------------------------------------
def test_dense_is_the_registry_itself_and_unknown_names_are_rejected():
    assert attention_registry(REGISTRY, "dense") is REGISTRY
    assert EFFECTIVE is not REGISTRY
    with pytest.raises(ValueError, match="'dense', 'effective'"):
        attention_registry(REGISTRY, "causal")


def test_effective_leaves_user_formulas_and_unitless_copies_alone():
    reg = REGISTRY.copy(units=False)

    @reg.register(aten._scaled_dot_product_flash_attention_for_cpu)
    def mine(out, /, **_):
        return Cost(1, 1)

    eff = attention_registry(reg, "effective")
    assert eff.lookup(aten._scaled_dot_product_flash_attention_for_cpu)[1] is mine
    assert eff.units() == {}
    assert REGISTRY.lookup(aten._flash_attention_forward)[1] is not EFFECTIVE.lookup(aten._flash_attention_forward)[1]


# -- causal ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_causal_square(device):
    """B=2, H=4, L=S=6: 6*7/2 = 21 of 36 entries per head, scores = 8*21 = 168;
    MACs = 168*16 = 2688; FLOPs = 5376 + 336 = 5712 (dense: 288 scores, 4608 MACs)."""
    assert fwd(168) == (2688, 5712)
    shapes = ((2, 4, 6, 8),) * 3
    assert sdpa(device, *shapes, is_causal=True) == (2688, 5712)
    if device == "cpu":
        with sdpa_kernel(SDPBackend.MATH):
            assert sdpa(device, *shapes, is_causal=True) == (2688, 5712)


def test_causal_is_top_left_aligned_as_sdpa():
    """Query i sees keys j <= i. L=3, S=5: 1+2+3 = 6 per head; L=5, S=3: 1+2+3+3+3 = 12."""
    assert band_entries(3, 5, upper=0) == 6 and band_entries(5, 3, upper=0) == 12
    assert sdpa("cpu", (1, 2, 3, 8), (1, 2, 5, 8), (1, 2, 5, 8), is_causal=True) == fwd(2 * 6)
    assert sdpa("meta", (1, 2, 5, 8), (1, 2, 3, 8), (1, 2, 3, 8), is_causal=True) == fwd(2 * 12)


def test_causal_backward():
    """scores = 168 as in test_causal_square: MACs = 2*168*16 = 5376; FLOPs = 10752 + 840."""
    for device in ("cpu", "meta"):
        q, k, v = (torch.randn(2, 4, 6, 8, device=device, requires_grad=True) for _ in range(3))
        with flopsight.Profiler(registry=EFFECTIVE) as prof:
            F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
        b = prof.result.total.backward
        # + the .sum()'s backward (an expand, free)
        assert (b.macs, b.flops) == bwd(168) == (5376, 11592), device


# -- explicit masks ----------------------------------------------------------------------------------
def test_bool_mask_counts_its_true_entries_when_readable():
    """A (5, 7) lower-triangular bool mask keeps 1+2+3+4+5 = 15 entries, broadcast to B*H = 8
    score matrices: 120 scores; the mask add is counted on them: FLOPs = 2*1920 + 3*120.
    On meta the values are unknown: dense, 8*35 = 280 scores."""
    mask = torch.ones(5, 7).tril().bool()
    shapes = ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8))
    assert sdpa("cpu", *shapes, attn_mask=mask) == fwd(120, mask=True) == (1920, 4200)
    assert sdpa("meta", *shapes, attn_mask=mask) == fwd(280, mask=True)
    float_mask = torch.zeros(5, 7).masked_fill(~mask, float("-inf"))  # -inf entries are dropped
    assert sdpa("cpu", *shapes, attn_mask=float_mask) == fwd(120, mask=True)


def test_causal_bias_variants():
    """torch.nn.attention.bias: upper-left = SDPA's is_causal; lower-right for L=3, S=5:
    query i sees j <= i + 2: 3+4+5 = 12 per head (2 heads)."""
    from torch.nn.attention.bias import causal_lower_right, causal_upper_left

    shapes = ((1, 2, 3, 8), (1, 2, 5, 8), (1, 2, 5, 8))
    assert sdpa("cpu", *shapes, attn_mask=causal_upper_left(3, 5)) == fwd(2 * 6, mask=True)
    assert sdpa("cpu", *shapes, attn_mask=causal_lower_right(3, 5)) == fwd(2 * 12, mask=True)


# -- fused kernels: sliding windows, packed batches ----------------------------------------------------
def test_flash_sliding_window():
    """_flash_attention_forward, BLHE, B=2, H=4, L=S=6, window (left 2, right 0): each query
    sees itself and up to 2 keys before: 1+2+3+3+3+3 = 15 per head, 120 scores.
    Backward (dQ, dK, dV always): the same entries."""
    q = meta(2, 6, 4, 8)
    args = (q, q, q, None, None, 6, 6, 0.0, False, False)
    kw = dict(window_size_left=2, window_size_right=0)
    assert kernel_cost(aten._flash_attention_forward.default, *args, **kw) == fwd(120)
    assert kernel_cost(aten._flash_attention_forward.default, *args, registry=REGISTRY, **kw) == fwd(288)
    bargs = (q, q, q, q, q, meta(2, 4, 6), None, None, 6, 6, 0.0, False, meta(2), meta(2))
    assert kernel_cost(aten._flash_attention_backward.default, *bargs, **kw) == bwd(120)
    # causal and a window: right bounded by 0 anyway
    assert kernel_cost(aten._flash_attention_forward.default, *args[:8], True, False, window_size_left=2) == fwd(120)


def test_packed_sequences_exact_from_offsets():
    """Lengths 2 and 8 (queries and keys), H=4: exact 4*(2*2 + 8*8) = 272 scores where the
    offsets are readable; dense bound min(10*8, 10*8) = 80 per head, 320 (meta offsets).
    Causal (bottom-right, equal lengths): 4*(3 + 36) = 156."""
    q = meta(10, 4, 8)
    cpu_offsets, meta_offsets = torch.tensor([0, 2, 10], dtype=torch.int32), meta(3, dtype=torch.int32)
    op = aten._flash_attention_forward.default
    assert kernel_cost(op, q, q, q, cpu_offsets, cpu_offsets, 8, 8, 0.0, False, False) == fwd(272)
    assert kernel_cost(op, q, q, q, meta_offsets, meta_offsets, 8, 8, 0.0, False, False) == fwd(320)
    assert kernel_cost(op, q, q, q, cpu_offsets, cpu_offsets, 8, 8, 0.0, True, False) == fwd(156)
    assert kernel_cost(op, q, q, q, cpu_offsets, cpu_offsets, 8, 8, 0.0, False, False, registry=REGISTRY) == fwd(320)
    bargs = (q, q, q, q, q, meta(4, 10), cpu_offsets, cpu_offsets, 8, 8, 0.0, False, meta(2), meta(2))
    assert kernel_cost(aten._flash_attention_backward.default, *bargs) == bwd(272)


def test_varlen_attn_exact_from_offsets():
    """torch.nn.attention.varlen's ops with the offsets above: 272 scores (forward and
    backward); window_size [-1, 0] is causal: 156."""
    helpers.require("torch.nn.attention.varlen")
    import torch.nn.attention.varlen  # noqa: F401

    effective = attention_registry(REGISTRY, "effective")  # built after the ops exist
    ops = torch.ops.torch_attn
    q, cu = meta(10, 4, 8), torch.tensor([0, 2, 10], dtype=torch.int32)
    assert kernel_cost(ops._varlen_attn.default, q, q, q, cu, cu, 8, 8, registry=effective) == fwd(272)
    assert kernel_cost(ops._varlen_attn.default, q, q, q, cu, cu, 8, 8, True, None, [-1, 0],
                       registry=effective) == fwd(156)
    bargs = (q, q, q, q, q, meta(10, 4), cu, cu, 8, 8, False, meta(2))
    assert kernel_cost(ops._varlen_attn_backward.default, *bargs, registry=effective) == bwd(272)


def test_nested_causal():
    """Jagged lengths 3, 5, 2, H=2, causal per sequence: 2*(6 + 15 + 3) = 48 scores."""
    from flopsight.formulas.attention import scaled_dot_product_attention

    nt = torch.nested.nested_tensor([torch.randn(n, 16) for n in (3, 5, 2)], layout=torch.jagged)
    q = nt.unflatten(-1, (2, 8)).transpose(1, 2)
    cost = scaled_dot_product_attention(None, q, q, q, is_causal=True, effective=True)
    assert (cost.macs, cost.flops) == fwd(48)


# -- flex_attention's BlockMask ---------------------------------------------------------------------
def test_flex_block_mask_counts_computed_blocks():
    """Causal BlockMask, L=S=200, 128 x 128 blocks: q block 0 (rows 0-127) computes kv block 0
    (128 x 128 = 16384); q block 1 (rows 128-199, 72 rows) computes kv blocks 0 and 1
    (72 x 128 + 72 x 72 = 14400): 30784 per head, B*H = 4: 123136 scores (dense 160000).
    E = 16: MACs = 123136*32 = 3940352; FLOPs = 2*MACs + 3*123136 (scale, softmax, mask_mod)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    mask = create_block_mask(lambda b, h, q, k: q >= k, None, None, 200, 200, device="cpu")
    q = torch.randn(2, 2, 200, 16)
    with flopsight.Profiler(registry=EFFECTIVE) as prof:
        flex_attention(q, q, q, block_mask=mask)
    f = prof.result.total.forward
    assert (f.macs, f.flops) == fwd(123136, E=16, Ev=16, mask=True) == (3940352, 8250112)


# -- multi-head attention --------------------------------------------------------------------------
def mha_hand(*, N, L, D, H, scores):
    """(MACs, FLOPs) of self-attention nn.MultiheadAttention (bias, need_weights=False, eval,
    a mask) whose core counts ``scores`` entries."""
    hd = D // H
    macs = 3 * N * L * D * D + N * L * D * D + scores * 2 * hd  # projections + core
    flops = 2 * macs + 3 * N * L * D + N * L * D + 3 * scores  # biases; scale, softmax, mask
    return macs, flops


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_mha_causal_mask(device):
    """N=3, H=2, L=6, D=8: a causal float mask (-inf above the diagonal) keeps 21 of 36 entries
    per head: 3*2*21 = 126 scores (dense 216). Read from the mask on CPU; on meta, from the
    is_causal hint."""
    mha = nn.MultiheadAttention(8, 2).eval()
    x = torch.randn(6, 3, 8)
    mask = nn.Transformer.generate_square_subsequent_mask(6)
    kwargs = dict(attn_mask=mask, is_causal=True, need_weights=False)
    assert measure_on(device, mha, x, x, x, registry=EFFECTIVE, **kwargs) == mha_hand(N=3, L=6, D=8, H=2, scores=126)
    assert measure_on("cpu", mha, x, x, x, **kwargs) == mha_hand(N=3, L=6, D=8, H=2, scores=216)  # dense


def test_mha_key_padding_mask():
    """N=2, H=2, L=S=5: batch 0 pads its last 2 keys, batch 1 none: kept entries
    2 heads * 5 rows * (3 + 5) keys = 80 scores (dense 100)."""
    mha = nn.MultiheadAttention(8, 2).eval()
    x = torch.randn(5, 2, 8)
    kpm = torch.zeros(2, 5, dtype=torch.bool)
    kpm[0, 3:] = True
    got = measure_on("cpu", mha, x, x, x, registry=EFFECTIVE, key_padding_mask=kpm, need_weights=False)
    assert got == mha_hand(N=2, L=5, D=8, H=2, scores=80)


def test_effective_registry_is_a_copy():
    assert isinstance(EFFECTIVE, Registry)
    assert EFFECTIVE.unit(F.scaled_dot_product_attention).name == "scaled_dot_product_attention"
