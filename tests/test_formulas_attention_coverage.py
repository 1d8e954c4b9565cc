"""Attention reached by less common routes: torch.nn.attention.varlen's backward, SDPA on
jagged nested tensors, and flex_attention -- hand-derived counts (dense convention).

Notation as in test_formulas_attention.py: scores = the score entries; forward
MACs = scores*(E + Ev), FLOPs = 2*MACs + scores (scale) + scores (softmax) [+ scores (mask)];
backward with Q, K and V requiring grad: MACs = 2*scores*(E + Ev), FLOPs = 2*MACs + 5*scores
(softmax backward 4, scale backward 1).
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from background import early_script
from helpers import meta, require

import flopsight
from flopsight.formulas.attention.flex import flex_attention as flex_formula
from flopsight.formulas.attention.flex import flex_attention_backward as flex_backward_formula


def profile_ops(fn, phase="forward"):
    with flopsight.Profiler() as prof:
        fn()
    result = prof.result
    return {name: (o.calls, o.macs, o.flops) for name, o in result.ops(phase).items() if o.macs or o.flops}, result


# -- torch.nn.attention.varlen: forward and backward ------------------------------------------
def test_varlen_attn_forward_and_backward_on_meta():
    """Two sequences of 5 queries and 7 keys, H=2, E=Ev=8 (the flash kernel behind it runs
    only on CUDA; meta runs the custom ops' fake kernels).
    scores = 2 heads * (5*7 + 5*7) = 140
    forward: MACs = 140*16 = 2240; FLOPs = 2*2240 + 140 + 140 = 4760
    backward (dQ, dK, dV; no dropout): dV, dP = 140*8 each, dQ, dK = 140*8 each -> 4480 MACs;
    FLOPs = 2*4480 + 4*140 (softmax backward) + 140 (scale backward) = 9660"""
    require("torch.nn.attention.varlen")
    from torch.nn.attention.varlen import varlen_attn

    q = torch.randn(10, 2, 8, device="meta", requires_grad=True)
    k = torch.randn(14, 2, 8, device="meta", requires_grad=True)
    v = torch.randn(14, 2, 8, device="meta", requires_grad=True)
    cu_q = torch.tensor([0, 5, 10], dtype=torch.int32, device="meta")
    cu_k = torch.tensor([0, 7, 14], dtype=torch.int32, device="meta")
    with flopsight.Profiler() as prof:
        varlen_attn(q, k, v, cu_q, cu_k, 5, 7).sum().backward()
    result = prof.result
    assert result.unsupported_ops == {}
    ops = {name: (o.calls, o.macs, o.flops) for name, o in result.ops("forward").items() if o.macs}
    assert ops == {"torch_attn._varlen_attn": (1, 2240, 4760)}
    ops = {name: (o.calls, o.macs, o.flops) for name, o in result.ops("backward").items() if o.macs or o.flops}
    assert ops == {"torch_attn._varlen_attn_backward": (1, 4480, 9660)}


def test_varlen_backward_formula_with_shared_kv_heads():
    """GQA: 4 query heads, 2 KV heads; two sequences of 5 queries / 7 keys, E=Ev=8.
    scores = 4 * 2 * 35 = 280: MACs = 280*32 = 8960; FLOPs = 2*8960 + 5*280 = 19320, plus dK
    and dV of the 14 key positions computed per query head and summed: 4*14*(8+8) = 896."""
    require("torch.nn.attention.varlen")
    import torch.nn.attention.varlen  # noqa: F401

    from flopsight.formulas import REGISTRY

    op = torch.ops.torch_attn._varlen_attn_backward.default
    q, kv, cum = meta(10, 4, 8), meta(14, 2, 8), meta(3)
    args = (meta(10, 4, 8), q, kv, kv, meta(10, 4, 8), meta(4, 10), cum, cum, 5, 7, False, meta(2))
    cost = REGISTRY.resolve(op).cost(None, args, {})
    assert (cost.macs, cost.flops) == (8960, 19320 + 896)


# each torch_attn op this torch defines (2.11 has no _varlen_attn_out), as name=registered:
# flopsight's formulas loaded first, then the user's import; registered when a profile starts
VARLEN_AFTER = early_script("varlen imported after flopsight", (
    "import flopsight, torch; from flopsight.formulas import REGISTRY; "
    "import torch.nn.attention.varlen; flopsight.profile(torch.nn.Linear(2, 2), torch.ones(1, 2)); "
    "ops = torch.ops.torch_attn; "
    "print(*(f'{n}={REGISTRY.is_registered(getattr(ops, n))}' for n in "
    "('_varlen_attn', '_varlen_attn_out', '_varlen_attn_backward') if hasattr(ops, n)))"))


@pytest.mark.any_backend
def test_varlen_ops_registered_when_imported_after_flopsight(scripts):
    require("torch.nn.attention.varlen")
    run = scripts[VARLEN_AFTER]  # (in an interpreter of its own, run in the background)
    registered = dict(word.split("=") for word in run.stdout.split())
    assert {"_varlen_attn", "_varlen_attn_backward"} <= set(registered), (run.stdout, run.stderr)
    assert set(registered.values()) == {"True"}, (run.stdout, run.stderr)


# -- jagged nested tensors --------------------------------------------------------------------
H, E = 2, 8


def njt(lengths, *, grad=False, device="cpu"):
    """(leaf, (B, H, j, E) view) of a jagged nested tensor, as in torch's NJT SDPA tutorial."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        leaf = torch.nested.nested_tensor([torch.randn(n, H * E) for n in lengths], layout=torch.jagged,
                                          requires_grad=grad)
    leaf = leaf if device == "cpu" else leaf.to(device)
    return leaf, leaf.unflatten(-1, (H, E)).transpose(1, 2)


def test_sdpa_on_nested_tensors_sums_each_sequence():
    """Lengths 3, 5, 2: scores = H * (3*3 + 5*5 + 2*2) = 2*38 = 76 (padding to 5 would be 150).
    MACs = 76*16 = 1216; FLOPs = 2*1216 + 76 + 76 = 2584."""
    _, q = njt([3, 5, 2])
    ops, result = profile_ops(lambda: F.scaled_dot_product_attention(q, q, q))
    assert ops == {"scaled_dot_product_attention": (1, 1216, 2584)}
    assert result.unsupported_ops == {}


def test_sdpa_on_nested_tensors_cross_attention():
    """Queries 3, 5, 2 against keys 4, 4, 6: scores = 2 * (12 + 20 + 12) = 88;
    MACs = 88*16 = 1408; FLOPs = 2*1408 + 2*88 = 2992."""
    _, q = njt([3, 5, 2])
    _, kv = njt([4, 4, 6])
    ops, _ = profile_ops(lambda: F.scaled_dot_product_attention(q, kv, kv))
    assert ops == {"scaled_dot_product_attention": (1, 1408, 2992)}


def test_sdpa_on_nested_tensors_backward():
    """All of Q, K, V require grad (one tensor): scores = 76 as in the forward;
    MACs = 2*76*16 = 2432; FLOPs = 2*2432 + 5*76 = 5244."""
    with flopsight.Profiler() as prof:
        _, q = njt([3, 5, 2], grad=True)  # its views' autograd nodes made while profiling
        F.scaled_dot_product_attention(q, q, q).values().sum().backward()
    result = prof.result
    ops = {name: (o.calls, o.macs, o.flops) for name, o in result.ops("backward").items() if o.macs or o.flops}
    assert ops == {"scaled_dot_product_attention.backward": (1, 2432, 5244)}
    assert result.unsupported_ops == {}


def test_nested_tensors_on_meta_are_bounded():
    """torch cannot run SDPA on meta nested tensors; the formula, given them, cannot read the
    offsets and uses the packed bound from the cached maximum length (5) and the total (10):
    min(10*5, 10*5) = 50 per head, 100 scores (exact: 76). MACs = 1600; FLOPs = 3200 + 200."""
    from flopsight.formulas.attention import scaled_dot_product_attention

    _, q = njt([3, 5, 2], device="meta")
    cost = scaled_dot_product_attention(None, q, q, q)
    assert (cost.macs, cost.flops) == (1600, 3400)


# -- flex_attention ------------------------------------------------------------------------------
# Eager flex_attention goes through torch.compile(fullgraph=True), which raises when it
# compiled nothing -- as under any dispatch mode -- unless the compiler stance is not the
# default: the profiler counts under the "force_eager" stance, and puts the stance back.
B, FH, FL, FE = 2, 2, 200, 16
DENSE_SCORES = B * FH * FL * FL  # 160000


def flex_ops(*args, **kwargs):
    from torch.nn.attention.flex_attention import flex_attention

    return profile_ops(lambda: flex_attention(*args, **kwargs))


def test_flex_attention_dense():
    """B=2, H=2, L=S=200, E=16: scores = 160000; MACs = 160000*32 = 5120000;
    FLOPs = 2*5120000 + 160000 (scale) + 160000 (softmax) = 10560000."""
    q = torch.randn(B, FH, FL, FE)
    ops, result = flex_ops(q, q, q)
    assert ops == {"flex_attention": (1, 5120000, 10560000)}
    assert result.unsupported_ops == {}


def test_flex_attention_with_block_mask_and_score_mod_dense():
    """A causal BlockMask's mask_mod is a mask (+1 per score), a score_mod an elementwise
    modification (+1 per score); the dense count keeps every score:
    FLOPs = 10560000 + 160000 = 10720000 with either, 10880000 with both."""
    from torch.nn.attention.flex_attention import create_block_mask

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def bias(score, b, h, q_idx, kv_idx):
        return score + (q_idx - kv_idx)

    q = torch.randn(B, FH, FL, FE)
    mask = create_block_mask(causal, None, None, FL, FL, device="cpu")
    assert flex_ops(q, q, q, block_mask=mask)[0] == {"flex_attention": (1, 5120000, 10720000)}
    assert flex_ops(q, q, q, score_mod=bias)[0] == {"flex_attention": (1, 5120000, 10720000)}
    assert flex_ops(q, q, q, score_mod=bias, block_mask=mask)[0] == {"flex_attention": (1, 5120000, 10880000)}


def test_flex_attention_gqa():
    """4 query heads sharing 2 KV heads (enable_gqa): what 4 full heads cost.
    scores = 1*4*64*64 = 16384; MACs = 16384*16 = 262144; FLOPs = 2*262144 + 2*16384."""
    q, kv = torch.randn(1, 4, 64, 8), torch.randn(1, 2, 64, 8)
    ops, _ = flex_ops(q, kv, kv, enable_gqa=True)
    assert ops == {"flex_attention": (1, 262144, 557056)}


def test_flex_attention_runs_under_the_profiler_in_eager_mode():
    from torch.nn.attention.flex_attention import flex_attention

    q = torch.randn(1, 1, 16, 8)
    ops, _ = profile_ops(lambda: flex_attention(q, q, q))
    assert ops == {"flex_attention": (1, 16 * 16 * 16, 2 * 16 * 16 * 16 + 2 * 16 * 16)}


def test_flex_attention_formulas_on_meta():
    """flex_attention runs only on CPU/CUDA (and its backward not on CPU): the unit's formulas,
    called as the unit calls them, with meta operands. scores = 2*2*8*8 = 256, E = Ev = 4.
    forward: MACs = 256*8 = 2048, FLOPs = 4096 + 512;
    backward, Q, K, V requiring grad: MACs = 2*2048 = 4096, FLOPs = 8192 + 5*256 = 9472;
    only V: dV = 256*4 = 1024 MACs, 2048 FLOPs."""
    q = torch.empty(2, 2, 8, 4, device="meta", requires_grad=True)
    k = torch.empty(2, 2, 8, 4, device="meta", requires_grad=True)
    v = torch.empty(2, 2, 8, 4, device="meta", requires_grad=True)
    fwd = flex_formula(None, q, k, v, None, None, 0.5, {})
    assert (fwd.macs, fwd.flops) == (2048, 4608)
    bwd = flex_backward_formula(None, q, k, v, None, None, 0.5, {})
    assert (bwd.macs, bwd.flops) == (4096, 9472)
    frozen = torch.empty(2, 2, 8, 4, device="meta")
    bwd = flex_backward_formula(None, frozen, frozen, v, None, None, 0.5, {})
    assert (bwd.macs, bwd.flops) == (1024, 2048)
