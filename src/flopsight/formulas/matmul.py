"""Matrix products: mm, addmm, bmm, baddbmm, addbmm, mv, addmv, dot, addr, linear, grouped mm.

``torch.matmul``/``@``, ``F.linear``, ``einsum`` and ``tensordot`` are composite: at
dispatch they arrive as the ops below (1-D operands as ``mv``/``dot`` or ``mm`` on an
unsqueezed view, broadcast batches as ``bmm``), so they are counted exactly as executed.
``einsum`` contracts pairwise through ``bmm`` (a 3-operand einsum is two products, in the
order of its contraction path); an einsum that sums over no index (``'i,j->ij'``, an outer
product) runs as an elementwise ``mul``: 0 MACs, 1 FLOP per output element (elementwise
family).

MACs are the full dense product; FLOPs are 2 per MAC plus one per output element for an
added ``input`` term (bias), skipped when ``beta == 0``. Integer products (``int @ int``,
``aten._int_mm``) are counted like float ones: a multiply-add is a MAC whatever its dtype.
A sparse operand (``torch.mm``/``@`` with a COO or CSR matrix) is counted by :mod:`.sparse`:
one MAC per stored entry per column of the dense operand.

>>> import torch
>>> from flopsight.formulas.matmul import mm, addmm, grouped_mm
>>> mm(None, torch.ones(8, 16), torch.ones(16, 4))
Stats(macs=512, flops=1024)
>>> addmm(torch.ones(8, 4), torch.ones(4), torch.ones(8, 16), torch.ones(16, 4), beta=1)
Stats(macs=512, flops=1056)
>>> # MoE experts: 10 tokens (K=16) routed among 3 experts' (16, 8) matrices: 10*16*8
>>> grouped_mm(torch.ones(10, 8), torch.ones(10, 16), torch.ones(3, 16, 8), torch.ones(3, dtype=torch.int32))
Stats(macs=1280, flops=2560)
"""

from __future__ import annotations

import torch

from .activation import activation_flops
from .registry import REGISTRY, Cost, OpNames
from .shapes import numel, prod
from .sparse import added_flops, product_macs

_STRIDED = torch.strided  # a product with an operand of another layout is sparse (formulas/sparse.py)

aten = OpNames("aten")  # names: an op this torch lacks is skipped (registry.builtins_loading)

__all__ = ["linear_cost", "mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "addr", "linear",
           "grouped_mm"]  # fmt: skip


def _bias_flops(out, beta) -> int:
    return 0 if beta == 0 else numel(out)


def linear_cost(rows: int, in_features: int, out_features: int, bias: bool) -> Cost:
    """``rows`` vectors through an ``in_features -> out_features`` linear map: what ``mm``
    (no bias) or ``addmm`` (bias: one add per output element) count for it. Shared with the
    formulas of fused kernels that contain linear layers (attention fast paths).

    >>> linear_cost(rows=8, in_features=16, out_features=4, bias=True)
    Stats(macs=512, flops=1056)
    """
    return Cost.of_product(rows * in_features * out_features, rows * out_features if bias else 0)


@REGISTRY.register(aten.mm, aten._int_mm)
def mm(out, self, mat2, **_) -> Cost:
    if self.layout is not _STRIDED or mat2.layout is not _STRIDED:
        return Cost.of_product(product_macs(self, mat2))
    m, k = self.shape
    return linear_cost(m, k, mat2.shape[-1], bias=False)


@REGISTRY.register(aten.addmm)
def addmm(out, self, mat1, mat2, *, beta, **_) -> Cost:
    if mat1.layout is not _STRIDED or mat2.layout is not _STRIDED:
        return Cost.of_product(product_macs(mat1, mat2), added_flops(out, self, beta))
    m, k = mat1.shape
    return linear_cost(m, k, mat2.shape[-1], bias=beta != 0)


@REGISTRY.register(aten._addmm_activation)
def addmm_activation(out, self, mat1, mat2, *, beta, **_) -> Cost:
    """addmm fused with a ReLU/GELU: the activation adds one FLOP per output element."""
    return addmm(out, self, mat1, mat2, beta=beta) + Cost.of_flops(activation_flops(numel(out)))


@REGISTRY.register(aten.bmm)
def bmm(out, self, mat2, **_) -> Cost:
    if self.layout is not _STRIDED or mat2.layout is not _STRIDED:
        return Cost.of_product(product_macs(self, mat2))
    batch, m, k = self.shape
    return Cost.of_product(batch * m * k * mat2.shape[-1])


@REGISTRY.register(aten.baddbmm)
def baddbmm(out, self, batch1, batch2, *, beta, **_) -> Cost:
    batch, m, k = batch1.shape
    return Cost.of_product(batch * m * k * batch2.shape[-1], _bias_flops(out, beta))


@REGISTRY.register(aten.addbmm)
def addbmm(out, self, batch1, batch2, *, beta, **_) -> Cost:
    """Sum over the batch of products, added to ``self``: the batch sum is in the MACs."""
    batch, m, k = batch1.shape
    return Cost.of_product(batch * m * k * batch2.shape[-1], _bias_flops(out, beta))


@REGISTRY.register(aten.mv)
def mv(out, self, vec, **_) -> Cost:
    return Cost.of_product(product_macs(self, vec) if self.layout is not _STRIDED else prod(self.shape))


@REGISTRY.register(aten.addmv)
def addmv(out, self, mat, vec, *, beta, **_) -> Cost:
    macs = product_macs(mat, vec) if mat.layout is not _STRIDED else prod(mat.shape)
    return Cost.of_product(macs, _bias_flops(out, beta))


@REGISTRY.register(aten.dot, aten.vdot)
def dot(out, self, **_) -> Cost:
    return Cost.of_product(numel(self))


@REGISTRY.register(aten.addr)
def addr(out, self, vec1, vec2, **_) -> Cost:
    """``self + vec1 ⊗ vec2``: one multiply-add per output element."""
    return Cost.of_product(numel(vec1) * numel(vec2))


@REGISTRY.register(aten.linear)
def linear(out, input, weight, bias=None, **_) -> Cost:
    """Seen only where a backend keeps ``linear`` whole (it usually decomposes to addmm)."""
    rows = numel(input) // input.shape[-1] if input.dim() else 1
    # weight is (out_features, in_features), or (in_features,) for a single output
    return linear_cost(rows, weight.shape[-1], prod(weight.shape[:-1]), bias is not None)


@REGISTRY.register("aten::_grouped_mm", missing_ok=True)  # torch >= 2.8
def grouped_mm(out, self, mat2, offs=None, bias=None, **_) -> Cost:
    """``torch._grouped_mm`` / ``F.grouped_mm``: one GEMM per group, the groups delimited by
    ``offs`` along one dimension (MoE experts: transformers' ``grouped_mm`` experts).

    The groups *partition* the split dimension, so the MACs follow from shapes alone,
    without reading ``offs`` (meta tensors have no values):

    ===========  ============  =================================  ==============
    ``self``     ``mat2``      split by ``offs``                  MACs
    ===========  ============  =================================  ==============
    (M, K)       (G, K, N)     rows of ``self`` (tokens/expert)  M * K * N
    (G, M, K)    (K, N)        columns of ``mat2`` / the output  M * K * N
    (M, K)       (K, N)        K (output (G, M, N))               M * K * N
    (G, M, K)    (G, K, N)     nothing (``offs`` is None): bmm    G * M * K * N
    ===========  ============  =================================  ==============

    e.g. every token row meets exactly one expert's ``(K, N)`` matrix: ``tokens * K * N``,
    whatever the routing. Rows (columns) past ``offs[-1]`` belong to no group; the dense
    count includes them. ``bias`` (not yet accepted by torch's kernels) would add one FLOP
    per output element.
    """
    macs = self.shape[-2] * self.shape[-1] * mat2.shape[-1]
    if self.dim() == 3 and mat2.dim() == 3:
        macs *= self.shape[0]
    return Cost.of_product(macs, numel(out) if bias is not None else 0)
