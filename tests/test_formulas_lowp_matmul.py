"""Low-precision and list products (FP8 ``_scaled_mm``, ``_scaled_grouped_mm``, weight-only
int8/int4 GEMMs, ``_foreach_mm``), hand-derived, CPU == meta where the kernel runs on CPU,
through the registry on meta tensors where it does not.

A MAC is a multiply-add of the dense product whatever the dtype; FLOPs = 2 * MACs + one add
per output element with a bias. Scales (FP8 ``scale_a``/``scale_b``, int8/int4 per-channel
scales and zero points) are the GEMM's alpha: not counted.
"""

from __future__ import annotations

import pytest
import torch
from helpers import meta, ops_on

from flopsight.formulas import REGISTRY, Cost

aten = torch.ops.aten
F8 = getattr(torch, "float8_e4m3fn", None)
needs_fp8 = pytest.mark.skipif(F8 is None or not hasattr(aten, "_scaled_mm"), reason="FP8 needs torch >= 2.1")


def kernel_cost(fn, args, op):
    """(calls, macs, flops) of kernel ``op`` when ``fn(*args)`` runs, the same on CPU and meta."""
    cpu, on_meta = (ops_on(d, fn, *args).get(op) for d in ("cpu", "meta"))
    assert cpu == on_meta
    return cpu


def fp8(*shape):
    return torch.randn(*shape).to(F8)


def col_major(rows, cols):
    """An FP8 (rows, cols) operand in the column-major layout the kernels require."""
    return fp8(cols, rows).t()


@needs_fp8
def test_scaled_mm_tensorwise():
    # (48, 80) @ (80, 112): 48*80*112 = 430,080 MACs; the two scalar scales are free
    one = torch.tensor(1.0)
    call = lambda a, b, sa, sb: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)  # noqa: E731
    assert kernel_cost(call, (fp8(48, 80), col_major(80, 112), one, one), "aten._scaled_mm") == (1, 430_080, 860_160)


def cpu_takes_rowwise_scales() -> bool:
    """Whether the CPU ``_scaled_mm`` takes per-row/per-column scales: 2.9's and 2.11's take
    per-tensor ones only (an internal assert otherwise). Tried on a tiny product."""
    try:
        torch._scaled_mm(fp8(16, 16), col_major(16, 16), torch.ones(16, 1), torch.ones(1, 16), out_dtype=torch.bfloat16)
    except RuntimeError:
        return False
    return True


@needs_fp8
def test_scaled_mm_rowwise_scales_and_bias():
    # per-row (48, 1) and per-column (1, 112) scales: still free; the (112,) bias adds one
    # FLOP per output element: 2 * 430,080 + 48*112
    call = lambda a, b, sa, sb, bias: torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16)  # noqa: E731
    args = (fp8(48, 80), col_major(80, 112), torch.ones(48, 1), torch.ones(1, 112), torch.randn(112).bfloat16())
    expected = (1, 430_080, 860_160 + 48 * 112)
    if cpu_takes_rowwise_scales():
        assert kernel_cost(call, args, "aten._scaled_mm") == expected
    else:  # only the meta kernel takes these scales: counted there
        assert ops_on("meta", call, *args).get("aten._scaled_mm") == expected


@pytest.mark.skipif(not hasattr(aten, "_scaled_mm_v2"), reason=f"torch {torch.__version__} has no aten._scaled_mm_v2")
def test_scaled_mm_v2_through_the_registry():
    # list-of-scales variant (no CPU kernel): the same (48, 80) @ (80, 112), no bias
    f8 = torch.float8_e4m3fn
    a, b = meta(48, 80, dtype=f8), meta(80, 112, dtype=f8)
    args = (a, b, [meta(())], [0], [0], [meta(())], [0], [0], None, torch.bfloat16)
    assert REGISTRY.resolve(aten._scaled_mm_v2.default).cost(meta(48, 112), args, {}) == Cost(430_080, 860_160)


@pytest.mark.skipif(not hasattr(aten, "_scaled_grouped_mm"), reason="needs torch >= 2.8")
def test_scaled_grouped_mm_partitions_tokens_like_grouped_mm():
    """No CPU kernel: counted on meta, where the kernel runs (shapes only)."""
    # 32 tokens (K=16) among 3 experts' (16, 8) matrices: every token meets one expert,
    # 32*16*8 = 4096, whatever the offsets; the per-token and per-expert scales are free
    a, b = fp8(32, 16).to("meta"), fp8(3, 8, 16).to("meta").transpose(-2, -1)
    offs = torch.tensor([8, 16, 32], dtype=torch.int32, device="meta")
    call = lambda a, b, sa, sb, offs: torch._scaled_grouped_mm(a, b, sa, sb, offs=offs, out_dtype=torch.bfloat16)  # noqa: E731
    ops = ops_on("meta", call, a, b, meta(32), meta(3, 8), offs)
    assert ops["aten._scaled_grouped_mm"] == (1, 4096, 8192)
    # 3-D x 3-D without offsets: a batched product, 3 * 8*16*8
    formula = REGISTRY.resolve(aten._scaled_grouped_mm.default)
    out = meta(3, 8, 8)
    assert formula.cost(out, (meta(3, 8, 16), meta(3, 16, 8), meta(3, 8), meta(3, 8)), {}) == Cost(3072, 6144)
    # with a bias: + one FLOP per output element, 3*8*8
    kwargs = {"bias": meta(3, 8)}
    assert formula.cost(out, (meta(3, 8, 16), meta(3, 16, 8), meta(3, 8), meta(3, 8)), kwargs) == Cost(3072, 6336)


@pytest.mark.skipif(not hasattr(aten, "_grouped_mm"), reason="needs torch >= 2.8")
def test_grouped_mm_counts_on_cpu_in_float32():
    """The CPU kernel also takes float32 (meta mirrors CUDA: bf16 only): 32*16*8 on both."""
    offs = torch.tensor([8, 16, 32], dtype=torch.int32)
    call = lambda a, b, offs: torch._grouped_mm(a, b, offs=offs)  # noqa: E731
    assert ops_on("cpu", call, torch.randn(32, 16), torch.randn(3, 16, 8), offs)["aten._grouped_mm"] == (1, 4096, 8192)
    bf = torch.bfloat16
    args = (torch.randn(32, 16, dtype=bf), torch.randn(3, 16, 8, dtype=bf), offs)
    assert kernel_cost(call, args, "aten._grouped_mm") == (1, 4096, 8192)


@pytest.mark.skipif(not hasattr(aten, "_foreach_mm"), reason=f"torch {torch.__version__} has no aten._foreach_mm")
def test_foreach_mm_is_the_sum_of_its_products():
    # (2, 3) @ (3, 4) + (4, 5) @ (5, 6): 24 + 120 = 144 MACs
    call = lambda a, b: aten._foreach_mm(a, b)  # noqa: E731
    args = ([torch.randn(2, 3), torch.randn(4, 5)], [torch.randn(3, 4), torch.randn(5, 6)])
    assert kernel_cost(call, args, "aten._foreach_mm") == (1, 144, 288)


def test_weight_int8pack_mm():
    # x (4, 16) @ W^T, W (8, 16) int8 with per-channel scales: 4*16*8 = 512
    call = lambda x, w, s: aten._weight_int8pack_mm(x, w, s)  # noqa: E731
    args = (torch.randn(4, 16), torch.randint(-8, 8, (8, 16), dtype=torch.int8), torch.ones(8))
    assert kernel_cost(call, args, "aten._weight_int8pack_mm") == (1, 512, 1024)


def test_weight_int4pack_mm_for_cpu():
    # x (4, 64) to 16 outputs through packed int4 weights (group size 32): 4*64*16 = 4096
    bf = torch.bfloat16
    packed = aten._convert_weight_to_int4pack_for_cpu(torch.randint(0, 15, (16, 64), dtype=torch.int32), 2)
    call = lambda x, w, z: aten._weight_int4pack_mm_for_cpu(x, w, 32, z)  # noqa: E731
    args = (torch.randn(4, 64, dtype=bf), packed, torch.ones(2, 16, 2, dtype=bf))
    assert kernel_cost(call, args, "aten._weight_int4pack_mm_for_cpu") == (1, 4096, 8192)


def test_dyn_quant_matmul_4bit_through_the_registry():
    # (2, 3, 64) activations -> 16 outputs: rows = 6, 6*64*16 = 6144
    formula = REGISTRY.resolve(aten._dyn_quant_matmul_4bit.default)
    assert formula.cost(meta(2, 3, 16), (meta(2, 3, 64), meta(512, dtype=torch.uint8), 32, 64, 16), {}) == Cost(
        6144, 12288
    )
