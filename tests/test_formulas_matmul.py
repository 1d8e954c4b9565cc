"""Matrix products: every product op and the composite forms users write (``@``,
``F.linear``, ``nn.Linear``, ``einsum``, ``tensordot``), hand-derived, CPU == meta.

MACs = the multiply-adds of the dense product, FLOPs = 2 * MACs + one add per output
element of an added ``input``/bias term (none when ``beta == 0``). Composite forms are
counted as the ops they dispatch; each case also names the op that must run.
"""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn.functional as F
from helpers import formula_of, measure_cpu_meta, meta, ops_on
from torch import nn

from flopsight.formulas import Cost

aten = torch.ops.aten


def R(*shape):
    return torch.randn(*shape)


def I(*shape):  # noqa: E743  integer operands
    return torch.randint(0, 5, shape)


def case(name, fn, inputs, macs, flops, op):
    return pytest.param(fn, inputs, (macs, flops), op, id=name)


CASES = [
    # -- the product ops, called directly ----------------------------------------------------
    # (3, 4) x (4, 6): M*K*N = 3*4*6
    case("mm", torch.mm, lambda: (R(3, 4), R(4, 6)), 3 * 4 * 6, 2 * 3 * 4 * 6, "aten.mm"),
    # + the (6,) bias broadcast to the (3, 6) output: 3*6 adds
    case("addmm", torch.addmm, lambda: (R(6), R(3, 4), R(4, 6)), 3 * 4 * 6, 2 * 3 * 4 * 6 + 3 * 6, "aten.addmm"),
    # beta=0: the input is ignored, no adds
    case("addmm beta=0", lambda c, a, b: torch.addmm(c, a, b, beta=0), lambda: (R(3, 6), R(3, 4), R(4, 6)),
         3 * 4 * 6, 2 * 3 * 4 * 6, "aten.addmm"),
    # B*M*K*N = 2*3*4*5
    case("bmm", torch.bmm, lambda: (R(2, 3, 4), R(2, 4, 5)), 2 * 3 * 4 * 5, 2 * 2 * 3 * 4 * 5, "aten.bmm"),
    # + (2, 3, 5) input: 2*3*5 adds
    case("baddbmm", torch.baddbmm, lambda: (R(2, 3, 5), R(2, 3, 4), R(2, 4, 5)),
         2 * 3 * 4 * 5, 2 * 2 * 3 * 4 * 5 + 2 * 3 * 5, "aten.baddbmm"),
    # the sum over the batch is part of the MACs; + (3, 5) input: 3*5 adds
    case("addbmm", torch.addbmm, lambda: (R(3, 5), R(2, 3, 4), R(2, 4, 5)),
         2 * 3 * 4 * 5, 2 * 2 * 3 * 4 * 5 + 3 * 5, "aten.addbmm"),
    # (3, 4) x (4,): M*K
    case("mv", torch.mv, lambda: (R(3, 4), R(4)), 3 * 4, 2 * 3 * 4, "aten.mv"),
    case("addmv", torch.addmv, lambda: (R(3), R(3, 4), R(4)), 3 * 4, 2 * 3 * 4 + 3, "aten.addmv"),
    # K multiply-adds
    case("dot", torch.dot, lambda: (R(4), R(4)), 4, 2 * 4, "aten.dot"),
    case("vdot", torch.vdot, lambda: (R(4), R(4)), 4, 2 * 4, "aten.vdot"),
    # input + v1 (x) v2: one multiply-add per output element, the add into the input included
    case("addr", torch.addr, lambda: (R(3, 4), R(3), R(4)), 3 * 4, 2 * 3 * 4, "aten.addr"),
    # -- linear layers: rows = prod(leading dims) = 2*3 ------------------------------------
    # rows*in*out = 6*4*6, + bias on the (6, 6) output
    case("F.linear 3-D bias", F.linear, lambda: (R(2, 3, 4), R(6, 4), R(6)),
         6 * 4 * 6, 2 * 6 * 4 * 6 + 6 * 6, "aten.addmm"),
    case("F.linear 3-D no bias", F.linear, lambda: (R(2, 3, 4), R(6, 4)), 6 * 4 * 6, 2 * 6 * 4 * 6, "aten.mm"),
    case("nn.Linear 3-D", nn.Linear(4, 6), lambda: (R(2, 3, 4),), 6 * 4 * 6, 2 * 6 * 4 * 6 + 6 * 6, "aten.addmm"),
    case("nn.Linear no bias", nn.Linear(4, 6, bias=False), lambda: (R(2, 3, 4),), 6 * 4 * 6, 2 * 6 * 4 * 6, "aten.mm"),
    # -- matmul / @ in every form -----------------------------------------------------------
    case("1-D @ 1-D", operator.matmul, lambda: (R(4), R(4)), 4, 2 * 4, "aten.dot"),
    # (4,) @ (4, 6): a (1, 4) x (4, 6) product
    case("1-D @ 2-D", operator.matmul, lambda: (R(4), R(4, 6)), 4 * 6, 2 * 4 * 6, "aten.mm"),
    case("2-D @ 1-D", operator.matmul, lambda: (R(3, 4), R(4)), 3 * 4, 2 * 3 * 4, "aten.mv"),
    # (2, 3, 4) @ (4,): the batch folds into M = 2*3
    case("batched @ 1-D", operator.matmul, lambda: (R(2, 3, 4), R(4)), 2 * 3 * 4, 2 * 2 * 3 * 4, "aten.mv"),
    # (4,) @ (2, 4, 6): 2 batches of (1, 4) x (4, 6)
    case("1-D @ batched", operator.matmul, lambda: (R(4), R(2, 4, 6)), 2 * 4 * 6, 2 * 2 * 4 * 6, "aten.bmm"),
    # (2, 3, 4) @ (4, 6): folds into (6, 4) x (4, 6)
    case("batched @ 2-D", operator.matmul, lambda: (R(2, 3, 4), R(4, 6)), 6 * 4 * 6, 2 * 6 * 4 * 6, "aten.mm"),
    # (2, 1, 3, 4) @ (5, 4, 6): batch dims broadcast to (2, 5): 10 products of 3*4*6
    case("broadcast batch", operator.matmul, lambda: (R(2, 1, 3, 4), R(5, 4, 6)),
         2 * 5 * 3 * 4 * 6, 2 * 2 * 5 * 3 * 4 * 6, "aten.bmm"),
    # integer products count like float ones: a multiply-add is a MAC whatever its dtype
    case("int @ int", operator.matmul, lambda: (I(3, 4), I(4, 6)), 3 * 4 * 6, 2 * 3 * 4 * 6, "aten.mm"),
    # -- einsum and tensordot ----------------------------------------------------------------
    case("einsum bij,bjk->bik", lambda a, b: torch.einsum("bij,bjk->bik", a, b), lambda: (R(2, 3, 4), R(2, 4, 5)),
         2 * 3 * 4 * 5, 2 * 2 * 3 * 4 * 5, "aten.bmm"),
    # a dot product, run as a (1, 1, 4) x (1, 4, 1) bmm
    case("einsum i,i->", lambda a, b: torch.einsum("i,i->", a, b), lambda: (R(4), R(4)), 4, 2 * 4, "aten.bmm"),
    # an outer product sums over no index: it runs as an elementwise mul, 1 FLOP per output
    # element and no MACs (the elementwise family's count)
    case("einsum i,j->ij", lambda a, b: torch.einsum("i,j->ij", a, b), lambda: (R(4), R(5)), 0, 4 * 5, "aten.mul"),
    # attention scores: B*H*Q*K*D = 2*3*4*5*8
    case("einsum bhqd,bhkd->bhqk", lambda a, b: torch.einsum("bhqd,bhkd->bhqk", a, b),
         lambda: (R(2, 3, 4, 8), R(2, 3, 5, 8)), 2 * 3 * 4 * 5 * 8, 2 * 2 * 3 * 4 * 5 * 8, "aten.bmm"),
    # 3 operands, contracted pairwise left to right, which is also the cheapest path here (so
    # opt_einsum, when installed, picks it too): (2x3 @ 3x4) = 2*3*4, then (2x4 @ 4x5) = 2*4*5
    case("einsum ij,jk,kl->il", lambda a, b, c: torch.einsum("ij,jk,kl->il", a, b, c),
         lambda: (R(2, 3), R(3, 4), R(4, 5)), 2 * 3 * 4 + 2 * 4 * 5, 2 * (2 * 3 * 4 + 2 * 4 * 5), "aten.bmm"),
    # contracts dims (3, 4): a (2, 12) x (12, 5) product
    case("tensordot", lambda a, b: torch.tensordot(a, b, dims=([1, 2], [0, 1])), lambda: (R(2, 3, 4), R(3, 4, 5)),
         2 * 12 * 5, 2 * 2 * 12 * 5, "aten.mm"),
]


@pytest.mark.parametrize("fn, inputs, expected, op", CASES)
def test_products(fn, inputs, expected, op):
    args = inputs()
    assert measure_cpu_meta(fn, *args) == expected
    assert op in ops_on("cpu", fn, *args)


# -- grouped GEMM (MoE experts) ---------------------------------------------------------------
needs_grouped_mm = pytest.mark.skipif(not hasattr(aten, "_grouped_mm"), reason="aten._grouped_mm needs torch >= 2.8")


def BF(*shape):
    # the kernels (the meta one mirrors CUDA's checks) take bf16 with 16-byte aligned rows
    return torch.randn(*shape, dtype=torch.bfloat16)


def OFFS(*ends):
    """Cumulative group ends along the split dimension (int32, as the kernels require)."""
    return torch.tensor(ends, dtype=torch.int32)


GROUPED = [
    # 32 token rows (K=16) routed to 3 experts' (16, 8) matrices, 8/8/16 tokens each: every
    # row meets exactly one expert: tokens*K*N = 32*16*8
    pytest.param((BF(32, 16), BF(3, 16, 8), OFFS(8, 16, 32)), 32 * 16 * 8, id="2d-3d experts"),
    # the routing does not change the count: all 32 tokens to the last expert
    pytest.param((BF(32, 16), BF(3, 16, 8), OFFS(0, 0, 32)), 32 * 16 * 8, id="2d-3d one expert"),
    # 3-D x 3-D (no offs): a batched product, G*M*K*N = 3*8*16*8
    pytest.param((BF(3, 8, 16), BF(3, 16, 8), None), 3 * 8 * 16 * 8, id="3d-3d"),
    # 2-D x 2-D: K = 32 split into 3 groups, output (3, 8, 8): M*K*N = 8*32*8
    pytest.param((BF(8, 32), BF(32, 8), OFFS(8, 16, 32)), 8 * 32 * 8, id="2d-2d"),
    # 3-D x 2-D: the 32 output columns split into 3 groups, output (8, 32): M*K*N = 8*16*32
    pytest.param((BF(3, 8, 16), BF(16, 32), OFFS(8, 16, 32)), 8 * 16 * 32, id="3d-2d"),
]


@needs_grouped_mm
@pytest.mark.parametrize("inputs, macs", GROUPED)
def test_grouped_mm(inputs, macs):
    a, b, offs = inputs
    grouped = lambda a, b, offs: torch._grouped_mm(a, b, offs=offs)  # noqa: E731
    assert measure_cpu_meta(grouped, a, b, offs) == (macs, 2 * macs)
    assert ops_on("cpu", grouped, a, b, offs) == {"aten._grouped_mm": (1, macs, 2 * macs)}


@needs_grouped_mm
@pytest.mark.skipif(not hasattr(F, "grouped_mm"), reason="F.grouped_mm needs torch >= 2.10")
def test_functional_grouped_mm():
    a, b, offs = BF(32, 16), BF(3, 16, 8), OFFS(8, 16, 32)
    call = lambda a, b, offs: F.grouped_mm(a, b, offs=offs)  # noqa: E731
    assert measure_cpu_meta(call, a, b, offs) == (32 * 16 * 8, 2 * 32 * 16 * 8)


@needs_grouped_mm
def test_grouped_mm_bias_adds_one_flop_per_output_element():
    """torch's kernels reject ``bias`` so far: the formula is checked through the registry."""
    bf = torch.bfloat16
    out, a, b, offs = meta(32, 8, dtype=bf), meta(32, 16, dtype=bf), meta(3, 16, 8, dtype=bf), OFFS(8, 16, 32)
    formula = formula_of(aten._grouped_mm)
    # (32, 16) x (3, 16, 8) -> (32, 8), + a (3, 8) per-expert bias on every output element
    assert formula(out, a, b, offs.to("meta"), meta(3, 8, dtype=bf)) == Cost(32 * 16 * 8, 2 * 32 * 16 * 8 + 32 * 8)
    assert formula(out, a, b, offs.to("meta"), bias=None) == Cost(32 * 16 * 8, 2 * 32 * 16 * 8)


@needs_grouped_mm
def test_moe_experts_count_the_same_with_every_implementation():
    """transformers' Mixtral experts: grouped GEMM (``_grouped_mm``), a per-expert loop
    (``mm``) or gathered per-token weights (``bmm``) all do the same products."""
    transformers = pytest.importorskip("transformers")
    import flopsight

    T, H, FF, top_k = 2 * 8, 32, 64, 2
    config = transformers.MixtralConfig(vocab_size=100, hidden_size=H, intermediate_size=FF, num_hidden_layers=1,
                                        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                        num_experts_per_tok=top_k)
    ids = torch.randint(0, 100, (2, 8))
    # T*top_k token-expert rows, each through gate+up (H -> 2*FF) and down (FF -> H)
    expected = T * top_k * (H * 2 * FF + FF * H)
    kernels = {"grouped_mm": "aten._grouped_mm", "eager": "aten.mm", "batched_mm": "aten.bmm"}
    for implementation, kernel in kernels.items():
        torch.manual_seed(0)
        model = transformers.MixtralForCausalLM(config).eval()
        model.set_experts_implementation(implementation)
        with torch.no_grad():
            result = flopsight.profile(model, (ids,), warm_up=0)
        experts = result.module("model.layers.0.mlp.experts")
        assert experts.forward.macs == expected, implementation
        assert experts.ops["forward"][kernel].macs == expected, implementation
