"""Matrix products: mm, addmm, bmm, baddbmm, addbmm, mv, addmv, dot, addr, linear.

``torch.matmul``/``@``, ``F.linear``, ``einsum`` and ``tensordot`` are composite: at
dispatch they arrive as the ops below (1-D operands as ``mv``/``dot`` or ``mm`` on an
unsqueezed view, broadcast batches as ``bmm``), so they are counted exactly as executed.

MACs are the full dense product; FLOPs are 2 per MAC plus one per output element for an
added ``input`` term (bias), skipped when ``beta == 0``.

>>> import torch
>>> from flopsight.formulas.matmul import mm, addmm
>>> mm(None, torch.ones(8, 16), torch.ones(16, 4))
Cost(macs=512, flops=1024)
>>> addmm(torch.ones(8, 4), torch.ones(4), torch.ones(8, 16), torch.ones(16, 4))
Cost(macs=512, flops=1056)
"""

from __future__ import annotations

import torch

from .registry import REGISTRY, Cost
from .shapes import numel, prod

aten = torch.ops.aten


def _bias_flops(out, beta) -> int:
    return 0 if beta == 0 else numel(out)


@REGISTRY.register(aten.mm, aten._int_mm)
def mm(out, a, b, *args, **kwargs) -> Cost:
    m, k = a.shape
    return Cost.of_product(m * k * b.shape[-1])


@REGISTRY.register(aten.addmm)
def addmm(out, bias, a, b, *, beta=1, alpha=1, **kwargs) -> Cost:
    m, k = a.shape
    return Cost.of_product(m * k * b.shape[-1], _bias_flops(out, beta))


@REGISTRY.register(aten._addmm_activation)
def addmm_activation(out, bias, a, b, *, beta=1, alpha=1, use_gelu=False, **kwargs) -> Cost:
    """addmm fused with a ReLU/GELU: the activation adds one FLOP per output element."""
    return addmm(out, bias, a, b, beta=beta).plus(Cost.of_flops(numel(out)))


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
    return Cost.of_product(rows * prod(weight.shape), numel(out) if bias is not None else 0)
