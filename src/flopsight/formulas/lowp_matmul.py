"""Low-precision and list products: FP8 ``_scaled_mm``, ``_scaled_grouped_mm``, int8/int4
weight-only GEMMs, ``_foreach_mm``.

Counted like the products of :mod:`.matmul`: a MAC is one multiply-add of the dense product
whatever the dtype (FP8, int8, packed int4), FLOPs are 2 per MAC plus one per output
element for a bias. The **scales** (``scale_a``/``scale_b`` of FP8 products, per tensor,
row, column or block; the per-channel scales and zero points of weight-only int8/int4
kernels) are the GEMM's ``alpha``: they are applied in the kernel's epilogue (or folded
into the dequantisation of a weight tile) and are not counted, as ``addmm``'s ``alpha`` is
not; neither is ``scale_result`` (quantising the output). Most of these kernels run on CUDA
only; they are registered by name and counted from shapes, so meta tensors work.

>>> import torch
>>> from flopsight.formulas.lowp_matmul import scaled_mm
>>> a, b, s = torch.ones(48, 80), torch.ones(80, 112), torch.ones(())
>>> scaled_mm(torch.ones(48, 112), a, b, s, s)  # 48 * 80 * 112
Stats(macs=430080, flops=860160)
"""

from __future__ import annotations

from .matmul import grouped_mm, linear_cost
from .registry import REGISTRY, Cost
from .shapes import numel

__all__ = ["scaled_mm", "scaled_grouped_mm", "foreach_mm", "weight_int8pack_mm", "weight_int4pack_mm",
           "dyn_quant_matmul_4bit"]  # fmt: skip


@REGISTRY.register("aten::_scaled_mm", "aten::_scaled_mm_v2", missing_ok=True)
def scaled_mm(out, self, mat2, scale_a=None, scale_b=None, bias=None, **_) -> Cost:
    """FP8 ``torch._scaled_mm(a (M, K), b (K, N), scale_a, scale_b, bias)``: ``M K N`` MACs,
    + ``M N`` FLOPs with a bias; the scales are free (see the module docstring)."""
    m, k = self.shape
    return linear_cost(m, k, mat2.shape[-1], bias=bias is not None)


@REGISTRY.register("aten::_scaled_grouped_mm", "aten::_scaled_grouped_mm_v2", missing_ok=True)
def scaled_grouped_mm(out, self, mat2, offs=None, bias=None, **_) -> Cost:
    """FP8 grouped GEMM (MoE experts): the groups partition one dimension exactly as in
    :func:`.matmul.grouped_mm`, whose count it shares; the scales are free."""
    return grouped_mm(out, self, mat2, offs=offs, bias=bias)


@REGISTRY.register("aten::_foreach_mm", missing_ok=True)
def foreach_mm(out, self, mat2, **_) -> Cost:
    """A list of independent ``mm``: the sum of their ``M K N``."""
    return sum((linear_cost(a.shape[0], a.shape[1], b.shape[-1], bias=False) for a, b in zip(self, mat2)), Cost())


@REGISTRY.register("aten::_weight_int8pack_mm", missing_ok=True)
def weight_int8pack_mm(out, self, mat2, **_) -> Cost:
    """Weight-only int8 linear: ``x (M, K) @ W^T`` with ``W (N, K)`` int8 and per-channel
    scales: ``M K N``."""
    m, k = self.shape
    return linear_cost(m, k, mat2.shape[0], bias=False)


@REGISTRY.register("aten::_weight_int4pack_mm", "aten::_weight_int4pack_mm_for_cpu",
                   "aten::_weight_int4pack_mm_with_scales_and_zeros", missing_ok=True)
def weight_int4pack_mm(out, self, **_) -> Cost:
    """Weight-only int4 linear, weights packed (their tensor's shape is a layout, not
    ``(N, K)``): ``x (M, K)`` to an ``(M, N)`` output, ``M K N``."""
    m, k = self.shape
    return linear_cost(m, k, out.shape[-1], bias=False)


@REGISTRY.register("aten::_dyn_quant_matmul_4bit", missing_ok=True)
def dyn_quant_matmul_4bit(out, inp, in_features, out_features, **_) -> Cost:
    """Dynamically quantised int4 linear (CPU KleidiAI): ``rows * in * out``."""
    return linear_cost(numel(inp) // in_features, in_features, out_features, bias=False)
