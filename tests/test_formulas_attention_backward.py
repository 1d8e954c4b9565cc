"""Attention backward: SDPA (which operands require grad, GQA, masks, dropout), its fused
backward kernels, nn.MultiheadAttention and nn.TransformerEncoderLayer training steps, and HF
BERT with SDPA vs eager attention -- hand-derived counts, identical on the CPU flash kernel,
the CPU math path and meta.

Notation as in test_formulas_attention.py: B batch, H (query) heads, L query length, S key
length, E query/key head dim, Ev value head dim, scores = B*H*L*S. The backward convention
(model FLOPs, dense; a flash kernel's recomputation of the scores is not counted):

* dV = P^T dO              scores*Ev MACs      if V requires grad
* dP = dO V^T              scores*Ev MACs      if Q, K or the mask requires grad
* dropout backward         1 FLOP per score    (same condition, training with p > 0)
* softmax backward         4 FLOPs per score   (same condition)
* scale backward           1 FLOP per score    if Q or K requires grad
* dQ = dS K, dK = dS^T Q   scores*E MACs each  if Q (K) requires grad
* gradients summed over broadcast dims (GQA's shared KV heads, a broadcast mask): 1 FLOP
  per element summed.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import accumulate_op, kernel_cost, meta, to_device
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

import flopsight

aten = torch.ops.aten


def sdpa_backward_hand(bh, L, S, E, Ev, *, q=True, k=True, v=True, mask_grad=False, dropout=False, summed=0):
    """(MACs, FLOPs) of one dense attention backward, written out from the convention."""
    scores = bh * L * S
    macs, extra = 0, summed  # summed: gradient elements reduced over broadcast dims, 1 add each
    if v:
        macs += scores * Ev  # dV = P^T dO
    if q or k or mask_grad:
        macs += scores * Ev  # dP = dO V^T
        extra += scores * bool(dropout)  # dropout backward: dP * mask * scale
        extra += 4 * scores  # softmax backward
    if q or k:
        extra += scores  # scale backward
    if q:
        macs += scores * E  # dQ = dS K
    if k:
        macs += scores * E  # dK = dS^T Q
    return macs, 2 * macs + extra


def backward_profile(fn):
    """Profile ``fn()`` then ``.sum().backward()`` of its (first) output, with every op on a bare
    root module; the backward phase is what ``fn``'s autograd nodes cost."""
    with flopsight.Profiler() as prof:
        out = fn()
        (out[0] if isinstance(out, tuple) else out).sum().backward()
    return prof.result


def backward_of(fn) -> tuple[int, int]:
    stats = backward_profile(fn).total.backward
    return stats.macs, stats.flops


def costly_backward_ops(result) -> dict[str, tuple[int, int, int]]:
    return {name: (o.calls, o.macs, o.flops) for name, o in result.ops("backward").items() if o.macs or o.flops}


class _Ops(TorchDispatchMode):
    """Records which aten ops the backward ran (no counting)."""

    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if torch._C._current_autograd_node() is not None:
            self.names.add(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


# -- F.scaled_dot_product_attention ---------------------------------------------------------
B, H, L, S, E, EV = 2, 4, 5, 7, 8, 6
BH = B * H

# name: (key/value heads, value head dim, SDPA kwargs, mask shape or None, mask requires grad,
# dropout). The CPU flash kernel needs Ev == E, no mask gradient and no dropout: the other
# variants take the math path on CPU too.
SDPA_VARIANTS = {
    "plain": (H, E, {}, None, False, False),
    "Ev_ne_E": (H, EV, {}, None, False, False),
    "gqa": (2, E, {"enable_gqa": True}, None, False, False),  # 2 KV heads shared by 4 query heads
    "mask": (H, E, {}, (L, S), False, False),  # a float mask without grad: nothing to do for it
    "causal": (H, E, {"is_causal": True}, None, False, False),  # dense: the same as plain
    "mask_grad": (H, E, {}, (L, S), True, False),  # broadcast over B, H: its gradient sums them
    "full_mask_grad": (H, E, {}, (B, H, L, S), True, False),  # full size: passed through
    "dropout": (H, E, {"dropout_p": 0.2}, None, False, True),
}
GRADS = ["qkv", "q", "k", "v", "qk", "kv", ""]
SDPA_CASES = [(g, v) for g in GRADS for v in SDPA_VARIANTS if g or SDPA_VARIANTS[v][4]]  # something needs grad


def sdpa_case(device, grads, variant):
    hkv, ev, kwargs, mask_shape, mask_grad, _ = SDPA_VARIANTS[variant]
    q = torch.randn(B, H, L, E, device=device).requires_grad_("q" in grads)
    k = torch.randn(B, hkv, S, E, device=device).requires_grad_("k" in grads)
    v = torch.randn(B, hkv, S, ev, device=device).requires_grad_("v" in grads)
    if mask_shape is not None:
        kwargs = {**kwargs, "attn_mask": torch.randn(mask_shape, device=device).requires_grad_(mask_grad)}
    return lambda: F.scaled_dot_product_attention(q, k, v, **kwargs)


def sdpa_expected(grads, variant):
    hkv, ev, _, mask_shape, mask_grad, dropout = SDPA_VARIANTS[variant]
    summed = 0
    if hkv < H:  # dK, dV computed per query head, summed over the group of 2
        summed += B * H * S * E * ("k" in grads) + B * H * S * ev * ("v" in grads)
    if mask_grad and mask_shape == (L, S):
        summed += BH * L * S  # the (B, H, L, S) score gradient summed to (L, S)
    return sdpa_backward_hand(BH, L, S, E, ev, q="q" in grads, k="k" in grads, v="v" in grads,
                              mask_grad=mask_grad, dropout=dropout, summed=summed)


@pytest.mark.parametrize("grads, variant", SDPA_CASES)
def test_sdpa_backward_is_the_same_on_every_kernel(grads, variant):
    expected = sdpa_expected(grads, variant)
    assert backward_of(sdpa_case("cpu", grads, variant)) == expected  # flash kernel where it applies
    with sdpa_kernel(SDPBackend.MATH):
        assert backward_of(sdpa_case("cpu", grads, variant)) == expected  # the bmm decomposition
    assert backward_of(sdpa_case("meta", grads, variant)) == expected


def test_sdpa_backward_literal_counts():
    # Ev = 6: scores = 2*4*5*7 = 280; dV, dP: 280*6 MACs each; dQ, dK: 280*8 each -> 7840 MACs;
    # FLOPs = 2*7840 + 4*280 (softmax backward) + 280 (scale backward) = 17080
    assert sdpa_expected("qkv", "Ev_ne_E") == (7840, 17080)
    assert backward_of(sdpa_case("cpu", "qkv", "Ev_ne_E")) == (7840, 17080)
    # only V: dV alone = 280*6 = 1680 MACs, 3360 FLOPs
    assert backward_of(sdpa_case("meta", "v", "Ev_ne_E")) == (1680, 3360)
    # GQA (Ev = 8), all grads: 280*32 = 8960 MACs, 2*8960 + 1400 FLOPs, + dK and dV summed
    # over the query group: 2*4*7*8 * 2 = 896 adds
    assert backward_of(sdpa_case("cpu", "qkv", "gqa")) == (8960, 17920 + 1400 + 896)


def test_sdpa_backward_is_one_unit_whatever_kernels_run():
    """The CPU flash backward kernel, or the decomposition's bmm/_softmax_backward_data/mul ops,
    all fold into one ``scaled_dot_product_attention.backward`` entry."""
    expected = {"scaled_dot_product_attention.backward": (1, *sdpa_expected("qkv", "plain"))}
    for device, backend in (("cpu", None), ("cpu", SDPBackend.MATH), ("meta", None)):
        fn = sdpa_case(device, "qkv", "plain")
        if backend is None:
            result = backward_profile(fn)
        else:
            with sdpa_kernel(backend):
                result = backward_profile(fn)
        assert costly_backward_ops(result) == expected, (device, backend)
        assert result.unsupported_ops == {}


def test_cpu_backward_really_runs_different_kernels():
    """The comparison above is meaningful: the flash backward kernel on CPU, bmm elsewhere."""

    def kernels(device, backend=None):
        fn = sdpa_case(device, "qkv", "plain")
        out = fn() if backend is None else None
        if backend is not None:
            with sdpa_kernel(backend):
                out = fn()
        with _Ops() as mode:
            out.sum().backward()
        return mode.names

    assert "aten._scaled_dot_product_flash_attention_for_cpu_backward" in kernels("cpu")
    assert "aten._scaled_dot_product_flash_attention_for_cpu_backward" not in kernels("cpu", SDPBackend.MATH)
    assert {"aten.bmm", "aten._softmax_backward_data"} <= kernels("cpu", SDPBackend.MATH)
    assert {"aten.bmm", "aten._softmax_backward_data"} <= kernels("meta")


def test_sdpa_without_grad_has_no_backward():
    q = torch.randn(B, H, L, E, requires_grad=True)
    kv = torch.randn(B, H, S, E)

    def fn():
        with torch.no_grad():
            o = F.scaled_dot_product_attention(q, kv, kv)
        return q * 1 + o  # a backward pass runs, not through the attention

    result = backward_profile(fn)
    assert "scaled_dot_product_attention.backward" not in {name for name, o in result.ops("backward").items()}


# -- the fused backward kernels, at dispatch -------------------------------------------------
def test_cpu_flash_backward_kernel_reached_without_the_unit():
    """The fused CPU kernel called directly: its backward kernel is counted at dispatch,
    with dQ, dK and dV (it computes all three)."""
    q = torch.randn(B, H, L, E, requires_grad=True)
    k = torch.randn(B, H, S, E, requires_grad=True)
    v = torch.randn(B, H, S, E, requires_grad=True)
    result = backward_profile(lambda: aten._scaled_dot_product_flash_attention_for_cpu(q, k, v))
    assert costly_backward_ops(result) == {
        "aten._scaled_dot_product_flash_attention_for_cpu_backward": (1, *sdpa_backward_hand(BH, L, S, E, E)),
    }


BHLE = (meta(B, H, L, E), meta(B, H, S, E), meta(B, H, S, EV))
BLHE = (meta(B, L, H, E), meta(B, S, H, E), meta(B, S, H, EV))
GQA_BHLE = (meta(B, H, L, E), meta(B, 2, S, E), meta(B, 2, S, EV))
GQA_BLHE = (meta(B, L, H, E), meta(B, S, 2, E), meta(B, S, 2, EV))
BIAS = meta(B, H, L, S)
OUT, LSE, SEED = meta(B, H, L, EV), meta(B, H, L), meta(2)
GQA_SUM = B * H * S * (E + EV)  # dK and dV of 2 shared heads summed over groups of 2
KERNEL_CASES = {
    # name: (op, args after grad_out, kwargs, expected)
    "flash_cpu": (aten._scaled_dot_product_flash_attention_for_cpu_backward, (*BHLE, OUT, LSE, 0.0, False), {},
                  sdpa_backward_hand(BH, L, S, E, EV)),
    "flash_cpu_gqa": (aten._scaled_dot_product_flash_attention_for_cpu_backward, (*GQA_BHLE, OUT, LSE, 0.0, True),
                      {"attn_mask": meta(L, S)}, sdpa_backward_hand(BH, L, S, E, EV, summed=GQA_SUM)),
    "flash": (aten._scaled_dot_product_flash_attention_backward,
              (*BHLE, OUT, LSE, None, None, L, S, 0.1, False, SEED, SEED), {"scale": 0.3},
              sdpa_backward_hand(BH, L, S, E, EV, dropout=True)),
    "efficient_all": (aten._scaled_dot_product_efficient_attention_backward,
                      (*BHLE, BIAS, OUT, LSE, SEED, SEED, 0.1, [True, True, True, True]), {},
                      sdpa_backward_hand(BH, L, S, E, EV, mask_grad=True, dropout=True)),  # full-size bias
    "efficient_q_only": (aten._scaled_dot_product_efficient_attention_backward,
                         (*BHLE, None, OUT, LSE, SEED, SEED, 0.0, [True, False, False, False]), {},
                         sdpa_backward_hand(BH, L, S, E, EV, k=False, v=False)),
    "efficient_broadcast_bias": (aten._scaled_dot_product_efficient_attention_backward,
                                 (*BHLE, meta(L, S), OUT, LSE, SEED, SEED, 0.0, [False, False, True, True]), {},
                                 sdpa_backward_hand(BH, L, S, E, EV, q=False, k=False, mask_grad=True,
                                                    summed=BH * L * S)),
    "cudnn": (aten._scaled_dot_product_cudnn_attention_backward,
              (*BHLE, OUT, LSE, SEED, SEED, BIAS, None, None, L, S, 0.1, False), {},
              sdpa_backward_hand(BH, L, S, E, EV, dropout=True)),  # no bias gradient
    "overrideable": (aten._scaled_dot_product_fused_attention_overrideable_backward,
                     (*BHLE, BIAS, [True, True, False, False], OUT, LSE, None, None, L, S, 0.0, False, SEED, SEED),
                     {}, sdpa_backward_hand(BH, L, S, E, EV, v=False)),
    "flash_kernel": (aten._flash_attention_backward,
                     (*BLHE, OUT, LSE, None, None, L, S, 0.1, True, SEED, SEED), {},
                     sdpa_backward_hand(BH, L, S, E, EV, dropout=True)),
    "flash_kernel_gqa": (aten._flash_attention_backward,
                         (*GQA_BLHE, OUT, LSE, None, None, L, S, 0.0, True, SEED, SEED), {},
                         sdpa_backward_hand(BH, L, S, E, EV, summed=GQA_SUM)),
    "efficient_kernel": (aten._efficient_attention_backward,
                         (*BLHE, None, OUT, None, None, L, S, LSE, 0.0, SEED, SEED, 0, False), {},
                         sdpa_backward_hand(BH, L, S, E, EV)),
    "efficient_kernel_bias": (aten._efficient_attention_backward,
                              (*BLHE, BIAS, OUT, None, None, L, S, LSE, 0.1, SEED, SEED, 1, True), {},
                              sdpa_backward_hand(BH, L, S, E, EV, mask_grad=True, dropout=True)),
    "cudnn_kernel": (aten._cudnn_attention_backward,
                     (*BHLE, OUT, LSE, SEED, SEED, None, None, None, L, S, 0.0, True), {},
                     sdpa_backward_hand(BH, L, S, E, EV)),
}


@pytest.mark.parametrize("name", list(KERNEL_CASES))
def test_fused_backward_kernels(name):
    op, args, kwargs, expected = KERNEL_CASES[name]
    grad_out = meta(B, H, L, EV)
    assert kernel_cost(op, grad_out, *args, **kwargs) == expected


# Packed sequences: 2 sequences of 5 queries and 7 keys (exact: 2*H*5*7 scores, as forward)
VQ, VK, VV, CUM = meta(2 * L, H, E), meta(2 * S, H, E), meta(2 * S, H, EV), meta(3)
VARLEN_CASES = {
    "flash": (aten._flash_attention_backward,
              (meta(2 * L, H, EV), VQ, VK, VV, meta(2 * L, H, EV), LSE, CUM, CUM, L, S, 0.0, False, SEED, SEED), 0),
    "flash_gqa": (aten._flash_attention_backward,  # 2 KV heads: dK, dV of 2*S keys summed over H heads
                  (meta(2 * L, H, EV), VQ, meta(2 * S, 2, E), meta(2 * S, 2, EV), meta(2 * L, H, EV), LSE, CUM, CUM,
                   L, S, 0.0, False, SEED, SEED), H * 2 * S * (E + EV)),
    "efficient": (aten._efficient_attention_backward,
                  (meta(1, 2 * L, H, EV), VQ[None], VK[None], VV[None], None, meta(1, 2 * L, H, EV), CUM, CUM, L, S,
                   LSE, 0.0, SEED, SEED, 0, False), 0),
    "cudnn": (aten._scaled_dot_product_cudnn_attention_backward,
              (meta(2 * L, H, EV), VQ, VK, VV, meta(2 * L, H, EV), LSE, SEED, SEED, None, CUM, CUM, L, S, 0.0,
               False), 0),
}


@pytest.mark.parametrize("name", list(VARLEN_CASES))
def test_packed_backward_kernels(name):
    op, args, summed = VARLEN_CASES[name]
    assert kernel_cost(op, *args) == sdpa_backward_hand(2 * H, L, S, E, EV, summed=summed)


# -- nn.MultiheadAttention training step -----------------------------------------------------
def mha_backward_hand(*, N, L, S, D, H, kdim=None, vdim=None, x_grad=(True, True, True), in_proj=True,
                      out_proj=True, dropout=False):
    """(MACs, FLOPs) of one MultiheadAttention backward (bias everywhere), the loss on the
    attention output only.

    x_grad: which of query/key/value (the module inputs) require grad; in_proj / out_proj:
    whether those weights and biases are trainable.
    """
    kdim, vdim, hd = kdim or D, vdim or D, D // H
    # a projected q/k/v needs a gradient if its input or the in-projection params do
    needs = [x or in_proj for x in x_grad]
    macs = flops = 0
    # out-projection (N*L rows, D -> D): dX if the core needs a gradient, dW, db
    macs += N * L * D * D * any(needs) + N * L * D * D * out_proj
    flops += N * L * D * out_proj  # bias grad: sum over N*L rows
    core = sdpa_backward_hand(N * H, L, S, hd, hd, q=needs[0], k=needs[1], v=needs[2], dropout=dropout)
    macs += core[0]
    flops += core[1] - 2 * core[0]  # its non-product FLOPs (the 2*MACs are added at the end)
    for rows, din, need, xg in ((N * L, D, needs[0], x_grad[0]), (N * S, kdim, needs[1], x_grad[1]),
                                (N * S, vdim, needs[2], x_grad[2])):
        if need:
            macs += rows * din * D * xg  # dX = dY W
            macs += rows * din * D * in_proj  # dW = dY^T X
            flops += rows * D * in_proj  # db
    return macs, 2 * macs + flops


def test_mha_backward_literal():
    # N=2, L=5, S=7, D=8, H=2 (hd=4), query requires grad, key/value not, all params trainable,
    # dropout 0.1 in training; scores = 2*2*5*7 = 140.
    # out-proj: dX 10*8*8 = 640, dW 640, db 80 FLOPs
    # core: dV, dP, dQ, dK 140*4 each = 2240 MACs; dropout 140 + softmax 560 + scale 140 = 840
    # in-proj q: dX 640, dW 640, db 80; k, v: dW 14*8*8 = 896 each, db 112 each
    # MACs = 640*4 + 2240 + 896*2 = 6592; FLOPs = 2*6592 + 80 + 840 + 80 + 224 = 14408
    expected = (6592, 14408)
    assert mha_backward_hand(N=2, L=5, S=7, D=8, H=2, x_grad=(True, False, False), dropout=True) == expected
    mha = nn.MultiheadAttention(8, 2, dropout=0.1, batch_first=True)
    q, kv = torch.randn(2, 5, 8, requires_grad=True), torch.randn(2, 7, 8)
    with flopsight.Profiler(mha) as prof:
        mha(q, kv, kv)[0].sum().backward()
    assert costly_backward_ops(prof.result) == {"multi_head_attention.backward": (1, *expected)}


MHA_GRADS = {
    # name: (query/key/value require grad, in-proj trainable, out-proj trainable)
    "all": ((True, True, True), True, True),
    "first_layer": ((False, False, False), True, True),  # inputs need no grad
    "frozen_in_proj": ((True, False, False), False, True),  # q gets dX, k/v nothing
    "frozen_projections": ((False, True, True), False, False),
}


def _mha_inputs(device, batch_first, self_attention, kdim, vdim, x_grad, N=2, L=5, S=7, D=8):
    def make(length, dim, grad):
        shape = (N, length, dim) if batch_first else (length, N, dim)
        return torch.randn(shape, device=device).requires_grad_(grad)

    if self_attention:  # one tensor for q, k and v: torch runs one packed (3D x D) product
        x = make(L, D, x_grad[0])
        return x, x, x
    return make(L, D, x_grad[0]), make(S, kdim or D, x_grad[1]), make(S, vdim or D, x_grad[2])


@pytest.mark.parametrize("grads", list(MHA_GRADS))
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("proj", ["packed", "self", "kdim_vdim"])
def test_mha_training_step(grads, batch_first, need_weights, proj):
    x_grad, in_proj, out_proj = MHA_GRADS[grads]
    kdim, vdim = (6, 4) if proj == "kdim_vdim" else (None, None)
    if proj == "self":  # one input tensor: it requires grad or not
        x_grad = (any(x_grad),) * 3
    N, L, S, D, Hh = 2, 5, 5 if proj == "self" else 7, 8, 2
    mha = nn.MultiheadAttention(D, Hh, dropout=0.1, batch_first=batch_first, kdim=kdim, vdim=vdim).train()
    for p in (mha.in_proj_weight, mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight, mha.in_proj_bias):
        if p is not None:
            p.requires_grad_(in_proj)
    mha.out_proj.requires_grad_(out_proj)
    expected = mha_backward_hand(N=N, L=L, S=S, D=D, H=Hh, kdim=kdim, vdim=vdim, x_grad=x_grad, in_proj=in_proj,
                                 out_proj=out_proj, dropout=True)
    for device in ("cpu", "meta"):
        model = to_device(mha, device)
        q, k, v = _mha_inputs(device, batch_first, proj == "self", kdim, vdim, x_grad, N=N, L=L, S=S, D=D)
        with flopsight.Profiler(model) as prof:
            out, weights = model(q, k, v, need_weights=need_weights)
            out.sum().backward()
        result = prof.result
        assert costly_backward_ops(result) == {"multi_head_attention.backward": (1, *expected)}, device
        assert result.unsupported_ops == {}


def test_mha_backward_with_masks_and_extra_positions():
    """Masks without grad add nothing to the backward; add_bias_kv appends a key position
    (S+1 in the core) and its bias_k/bias_v gradients sum the batch (N*D each)."""
    N, L, S, D, Hh = 3, 5, 7, 8, 2
    mha = nn.MultiheadAttention(D, Hh, add_bias_kv=True).eval()  # eval: no dropout
    q, kv = torch.randn(L, N, D, requires_grad=True), torch.randn(S, N, D, requires_grad=True)
    kpm = torch.zeros(N, S, dtype=torch.bool)
    kpm[:, -1] = True
    with flopsight.Profiler(mha) as prof:
        mha(q, kv, kv, attn_mask=torch.zeros(L, S, dtype=torch.bool), key_padding_mask=kpm)[0].sum().backward()
    hd, Sa = D // Hh, S + 1
    core_macs, core_flops = sdpa_backward_hand(N * Hh, L, Sa, hd, hd)
    proj = N * L * D * D * 2 + N * S * D * D * 2 * 2  # q, k, v in-proj: dX and dW each
    out = N * L * D * D * 2  # out-proj dX, dW
    macs = core_macs + proj + out
    flops = 2 * macs + (core_flops - 2 * core_macs) + N * L * D + 2 * N * S * D + N * L * D  # + bias grads
    flops += 2 * N * D  # bias_k, bias_v
    assert costly_backward_ops(prof.result) == {"multi_head_attention.backward": (1, macs, flops)}


# -- nn.TransformerEncoderLayer training step: per-child attribution -------------------------
def encoder_layer_backward_hand(*, N, L, D, H, F, x_grad, add="aten.add"):
    """Per-child costly backward ops {op: (calls, MACs, FLOPs)} of a training
    TransformerEncoderLayer (dropout 0.1, norm_first=False, so self_attn reads the layer
    input x): T = N*L tokens.

    A tensor used twice (x by the attention and the first residual, norm1's output by
    linear1 and the second residual) gets two gradients, which the autograd engine adds
    (T*D FLOPs, with ``add``: see helpers.accumulate_op); the add is attributed to the module
    whose node produced the second one.
    """
    T = N * L
    accumulate = {add: (1, 0, T * D)}
    self_attn = {"multi_head_attention.backward": (1, *mha_backward_hand(N=N, L=L, S=L, D=D, H=H,
                                                                         x_grad=(x_grad,) * 3, dropout=True))}
    return {
        "self_attn": {**self_attn, **(accumulate if x_grad else {})},  # x's two gradients
        "linear1": {"aten.mm": (2, 2 * T * D * F, 4 * T * D * F),  # dX, dW (its input requires grad)
                    "aten.sum": (1, 0, T * F), **accumulate},  # db; norm1's output's two gradients
        "linear2": {"aten.mm": (2, 2 * T * F * D, 4 * T * F * D), "aten.sum": (1, 0, T * D)},
        "dropout": {"dropout.backward": (1, 0, T * F)},  # 1 multiply per element
        "dropout1": {"dropout.backward": (1, 0, T * D)},
        "dropout2": {"dropout.backward": (1, 0, T * D)},
    }


def costly_self_backward(result, name) -> dict[str, tuple[int, int, int]]:
    ops = result.module(name).ops.get("backward", {})
    return {op: (s.calls, s.macs, s.flops) for op, s in ops.items() if s.macs or s.flops}


@pytest.mark.parametrize("x_grad", [True, False])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer_encoder_layer_training_step(x_grad, activation, backend):
    N, L, D, Hh, Ff = 2, 6, 8, 2, 16
    tel = nn.TransformerEncoderLayer(D, Hh, Ff, dropout=0.1, activation=activation, batch_first=True).train()
    for device in ("cpu", "meta"):
        expected = encoder_layer_backward_hand(N=N, L=L, D=D, H=Hh, F=Ff, x_grad=x_grad,
                                               add=accumulate_op(backend, device))
        model = to_device(tel, device)
        x = torch.randn(N, L, D, device=device).requires_grad_(x_grad)
        with flopsight.Profiler(model) as prof:
            model(x).sum().backward()
        result = prof.result
        assert result.unsupported_ops == {}
        for name, ops in expected.items():
            assert (device, name, costly_self_backward(result, name)) == (device, name, ops)
        # the norms run their own backward kernel (its cost is the norm family's)
        for norm in ("norm1", "norm2"):
            assert result.module(norm).ops["backward"]["aten.native_layer_norm_backward"].calls == 1


# -- HF BERT: SDPA vs eager attention in training ----------------------------------------------
def _bert_training_step(impl, ids):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, attn_implementation=impl)
    model = transformers.BertModel(config).train()
    with flopsight.Profiler(model) as prof:
        model(ids, attention_mask=torch.ones_like(ids)).last_hidden_state.sum().backward()
    return prof.result


def test_hf_bert_backward_is_the_same_with_sdpa_and_eager_attention():
    """SDPA's core backward is one unit; eager's is counted op by op (bmm x4, the scale's mul,
    _softmax_backward_data, the dropout unit's backward). The convention counts the scale on
    the scores, where eager applies it, and the mask (no grad) costs nothing in either: the
    counts are identical, per attention module and in total."""
    ids = torch.randint(0, 100, (2, 12))
    sdpa = _bert_training_step("sdpa", ids)
    eager = _bert_training_step("eager", ids)
    assert sdpa.unsupported_ops == eager.unsupported_ops == {}
    # per layer: B=2, H=4, L=S=12, head dim 8, dropout 0.1 in training
    core = sdpa_backward_hand(2 * 4, 12, 12, 8, 8, dropout=True)
    for layer in range(2):
        name = f"encoder.layer.{layer}.attention.self"
        s, e = sdpa.module(name).self.backward, eager.module(name).self.backward
        assert (s.macs, s.flops) == (e.macs, e.flops) == core
        costly = {op for op, stats in sdpa.module(name).ops["backward"].items() if stats.flops}
        assert costly == {"scaled_dot_product_attention.backward"}
        costly = {op for op, stats in eager.module(name).ops["backward"].items() if stats.flops}
        assert costly == {"aten.bmm", "aten.mul", "aten._softmax_backward_data", "dropout.backward"}
    assert (sdpa.total.backward.macs, sdpa.total.backward.flops) == (eager.total.backward.macs,
                                                                      eager.total.backward.flops)


def test_hf_llama_backward_is_the_same_with_sdpa_and_eager_attention():
    """Llama (GQA: 2 KV heads for 4 query heads, attention dropout 0.1): the forward counts
    differ by eager's float causal-mask add (see test_formulas_attention.py), but that mask
    needs no gradient, so the backward counts are identical. Eager's repeat_kv is an expand
    whose backward sums dK and dV over the query group (aten.sum, 1 per element summed):
    exactly the GQA sums of the SDPA unit's backward."""
    transformers = pytest.importorskip("transformers")
    ids = torch.randint(0, 100, (2, 12))
    results = {}
    for impl in ("sdpa", "eager"):
        torch.manual_seed(0)
        config = transformers.LlamaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                          num_key_value_heads=2, intermediate_size=64, attention_dropout=0.1,
                                          attn_implementation=impl)
        model = transformers.LlamaForCausalLM(config).train()
        with flopsight.Profiler(model) as prof:
            model(ids, attention_mask=torch.ones_like(ids)).logits.sum().backward()
        results[impl] = prof.result
    sdpa, eager = results["sdpa"], results["eager"]
    assert sdpa.unsupported_ops == eager.unsupported_ops == {}
    assert sdpa.total.forward.flops != eager.total.forward.flops
    assert (sdpa.total.backward.macs, sdpa.total.backward.flops) == (eager.total.backward.macs,
                                                                      eager.total.backward.flops)
    # per layer: B=2, H=4, L=S=12, head dim 8; dK, dV of 2 KV heads summed over groups of 2
    core = sdpa_backward_hand(2 * 4, 12, 12, 8, 8, dropout=True, summed=2 * 4 * 12 * 8 * 2)
    unit = sdpa.module("model.layers.0.self_attn").ops["backward"]["scaled_dot_product_attention.backward"]
    assert (unit.calls, unit.macs, unit.flops) == (1, *core)
