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

>>> import torch
>>> from flopsight.formulas.matmul import mm, addmm, grouped_mm
>>> mm(None, torch.ones(8, 16), torch.ones(16, 4))
Cost(macs=512, flops=1024)
>>> addmm(torch.ones(8, 4), torch.ones(4), torch.ones(8, 16), torch.ones(16, 4))
Cost(macs=512, flops=1056)
>>> # MoE experts: 10 tokens (K=16) routed among 3 experts' (16, 8) matrices: 10*16*8
>>> grouped_mm(torch.ones(10, 8), torch.ones(10, 16), torch.ones(3, 16, 8), torch.ones(3, dtype=torch.int32))
Cost(macs=1280, flops=2560)
"""

from __future__ import annotations

import torch

from .activation import activation_flops
from .registry import REGISTRY, Cost
from .shapes import numel, prod

aten = torch.ops.aten

__all__ = ["linear_cost", "mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "addr", "linear",
           "grouped_mm"]  # fmt: skip


def _bias_flops(out, beta) -> int:
    return 0 if beta == 0 else numel(out)


def linear_cost(rows: int, in_features: int, out_features: int, bias: bool) -> Cost:
    """``rows`` vectors through an ``in_features -> out_features`` linear map: what ``mm``
    (no bias) or ``addmm`` (bias: one add per output element) count for it. Shared with the
    formulas of fused kernels that contain linear layers (attention fast paths).

    >>> linear_cost(rows=8, in_features=16, out_features=4, bias=True)
    Cost(macs=512, flops=1056)
    """
    return Cost.of_product(rows * in_features * out_features, rows * out_features if bias else 0)


@REGISTRY.register(aten.mm, aten._int_mm)
def mm(out, a, b, *args, **kwargs) -> Cost:
    m, k = a.shape
    return linear_cost(m, k, b.shape[-1], bias=False)


@REGISTRY.register(aten.addmm)
def addmm(out, bias, a, b, *, beta=1, alpha=1, **kwargs) -> Cost:
    m, k = a.shape
    return linear_cost(m, k, b.shape[-1], bias=beta != 0)


@REGISTRY.register(aten._addmm_activation)
def addmm_activation(out, bias, a, b, *, beta=1, alpha=1, use_gelu=False, **kwargs) -> Cost:
    """addmm fused with a ReLU/GELU: the activation adds one FLOP per output element."""
    return addmm(out, bias, a, b, beta=beta).plus(Cost.of_flops(activation_flops(numel(out))))


@REGISTRY.register(aten.bmm)
def bmm(out, a, b, *args, **kwargs) -> Cost:
    batch, m, k = a.shape
    return Cost.of_product(batch * m * k * b.shape[-1])


@REGISTRY.register(aten.baddbmm)
def baddbmm(out, bias, a, b, *, beta=1, alpha=1, **kwargs) -> Cost:
    batch, m, k = a.shape
    return Cost.of_product(batch * m * k * b.shape[-1], _bias_flops(out, beta))


@REGISTRY.register(aten.addbmm)
def addbmm(out, bias, a, b, *, beta=1, alpha=1, **kwargs) -> Cost:
    """Sum over the batch of products, added to ``bias``: the batch sum is in the MACs."""
    batch, m, k = a.shape
    return Cost.of_product(batch * m * k * b.shape[-1], _bias_flops(out, beta))


@REGISTRY.register(aten.mv)
def mv(out, a, v, *args, **kwargs) -> Cost:
    return Cost.of_product(prod(a.shape))


@REGISTRY.register(aten.addmv)
def addmv(out, bias, a, v, *, beta=1, alpha=1, **kwargs) -> Cost:
    return Cost.of_product(prod(a.shape), _bias_flops(out, beta))


@REGISTRY.register(aten.dot, aten.vdot)
def dot(out, a, b, *args, **kwargs) -> Cost:
    return Cost.of_product(numel(a))


@REGISTRY.register(aten.addr)
def addr(out, bias, v1, v2, *, beta=1, alpha=1, **kwargs) -> Cost:
    """``bias + v1 ⊗ v2``: one multiply-add per output element."""
    return Cost.of_product(numel(v1) * numel(v2))


@REGISTRY.register(aten.linear)
def linear(out, x, weight, bias=None, *args, **kwargs) -> Cost:
    """Seen only where a backend keeps ``linear`` whole (it usually decomposes to addmm)."""
    rows = numel(x) // x.shape[-1] if x.dim() else 1
    # weight is (out_features, in_features), or (in_features,) for a single output
    return linear_cost(rows, weight.shape[-1], prod(weight.shape[:-1]), bias is not None)


@REGISTRY.register("aten::_grouped_mm", missing_ok=True)  # torch >= 2.8
def grouped_mm(out, a, b, offs=None, bias=None, *args, **kwargs) -> Cost:
    """``torch._grouped_mm`` / ``F.grouped_mm``: one GEMM per group, the groups delimited by
    ``offs`` along one dimension (MoE experts: transformers' ``grouped_mm`` experts).

    The groups *partition* the split dimension, so the MACs follow from shapes alone,
    without reading ``offs`` (meta tensors have no values):

    ===========  ============  =================================  ==============
    ``a``        ``b``         split by ``offs``                  MACs
    ===========  ============  =================================  ==============
    (M, K)       (G, K, N)     rows of ``a`` (tokens per expert)  M * K * N
    (G, M, K)    (K, N)        columns of ``b`` / of the output   M * K * N
    (M, K)       (K, N)        K (output (G, M, N))               M * K * N
    (G, M, K)    (G, K, N)     nothing (``offs`` is None): bmm    G * M * K * N
    ===========  ============  =================================  ==============

    e.g. every token row meets exactly one expert's ``(K, N)`` matrix: ``tokens * K * N``,
    whatever the routing. Rows (columns) past ``offs[-1]`` belong to no group; the dense
    count includes them. ``bias`` (not yet accepted by torch's kernels) would add one FLOP
    per output element.
    """
    macs = a.shape[-2] * a.shape[-1] * b.shape[-1]
    if a.dim() == 3 and b.dim() == 3:
        macs *= a.shape[0]
    return Cost.of_product(macs, numel(out) if bias is not None else 0)
