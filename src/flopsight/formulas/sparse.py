"""Sparse matrix products: a sparse operand (COO, CSR, CSC, BSR, BSC) times a dense one, sparse
times sparse, and the sampled product (``torch.sparse.mm``/``addmm``/``sampled_addmm``, ``@``
with a sparse operand: graph networks' message passing).

A product does one multiply-add per *stored* entry of its sparse operand per column of the
dense one: ``stored · N`` MACs for a sparse ``(M, K)`` by a dense ``(K, N)``, ``M · stored`` for
a dense ``(M, K)`` by a sparse ``(K, N)``. The stored entries are read from the layout: the
element count of the values (COO's ``_nnz()`` with no dense dimensions, a compressed layout's
``values().numel()``, a block layout's blocks times their size); a meta sparse tensor has them
too. Sparse by sparse forms one product per stored ``a[i, k]`` and stored ``b[k, j]``, read
from the indices (on meta, where they cannot be read: ``stored(a) · N``, as if ``b`` were
dense). FLOPs are 2 per MAC plus, as for the dense ``addmm``, one add per output element of an
added ``input`` unless ``beta == 0`` (per stored entry when that input is sparse); ``alpha``
and ``beta`` scales cost nothing. ``mm``, ``addmm``, ``mv``, ``addmv`` and ``bmm`` with a
sparse operand come here from :mod:`.matmul`.

>>> import torch
>>> a = torch.tensor([[0., 1, 0], [0, 0, 1], [1, 0, 0]]).to_sparse()  # 3 stored entries
>>> sparse_addmm(torch.ones(3, 4), torch.zeros(3, 4), a, torch.ones(3, 4), beta=0)  # 3 · 4
Stats(macs=12, flops=24)
"""

from __future__ import annotations

import torch

from .attention.entries import read_values
from .registry import REGISTRY, Cost, OpNames
from .shapes import numel

aten = OpNames("aten")  # names: an op this torch lacks is skipped (registry.builtins_loading)

__all__ = ["SPARSE_LAYOUTS", "is_sparse", "stored", "product_macs", "added_flops", "sparse_addmm",
           "sparse_sampled_addmm"]

#: the layouts whose tensors store only some entries
SPARSE_LAYOUTS = frozenset({torch.sparse_coo, torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc})


def is_sparse(t) -> bool:
    return isinstance(t, torch.Tensor) and t.layout in SPARSE_LAYOUTS


def stored(t: torch.Tensor) -> int:
    """The entries a sparse tensor stores (an uncoalesced COO tensor's duplicates each count).

    >>> stored(torch.eye(3).to_sparse()), stored(torch.ones(2, 3).to_sparse(1))  # 2 rows of 3
    (3, 6)
    """
    return (t._values() if t.layout is torch.sparse_coo else t.values()).numel()


def _rows(a: torch.Tensor) -> int:
    return a.shape[-2] if a.dim() > 1 else 1


def _cols(b: torch.Tensor) -> int:
    return b.shape[-1] if b.dim() > 1 else 1


def product_macs(a: torch.Tensor, b: torch.Tensor) -> int:
    """MACs of ``a @ b`` (``(…, M, K)`` by ``(…, K, N)`` or ``(K,)``), either or both sparse.

    >>> a = torch.eye(3).to_sparse()                      # 3 stored entries
    >>> product_macs(a, torch.ones(3, 5)), product_macs(torch.ones(2, 3), a), product_macs(a, a)
    (15, 6, 3)
    """
    if is_sparse(a):
        if is_sparse(b):
            return _sparse_sparse_macs(a, b)
        return stored(a) * _cols(b)
    if is_sparse(b):
        return _rows(a) * stored(b)
    return numel(a) * _cols(b)


def _sparse_sparse_macs(a: torch.Tensor, b: torch.Tensor) -> int:
    """One product per stored ``a[i, k]`` and stored ``b[k, j]``: what the indices say, or
    ``stored(a) · N`` where they cannot be read (meta) or the operands are not plain matrices."""
    if a.dim() == b.dim() == 2 and a.dense_dim() == b.dense_dim() == 0:
        pairs = read_values(_pairs, a, b, key="sparse products")
        if pairs is not None:
            return pairs
    return stored(a) * _cols(b)


def _pairs(a: torch.Tensor, b: torch.Tensor) -> int:
    inner_a = _coo(a)._indices()[1]  # the column k of each stored a[i, k]
    per_row = torch.bincount(_coo(b)._indices()[0], minlength=b.shape[0])  # stored b[k, :] per k
    return int(per_row[inner_a].sum())


def _coo(t: torch.Tensor) -> torch.Tensor:
    return t if t.layout is torch.sparse_coo else t.to_sparse_coo()


def added_flops(out, input, beta) -> int:
    """The adds of ``beta · input + ...``: one per output element, per stored entry of a sparse
    ``input``; none when ``beta == 0``."""
    if beta == 0 or input is None:
        return 0
    return stored(input) if is_sparse(input) else numel(out)


@REGISTRY.register(aten._sparse_addmm, reads_values=True)
def sparse_addmm(out, self, mat1, mat2, *, beta, **_) -> Cost:
    """``torch.sparse.mm`` (``beta=0``) and ``torch.sparse.addmm``: ``mat1`` sparse."""
    return Cost.of_product(product_macs(mat1, mat2), added_flops(out, self, beta))


@REGISTRY.register(aten._sparse_sparse_matmul, reads_values=True)
def sparse_sparse_matmul(out, self, other, **_) -> Cost:
    """``torch.sparse.mm`` of two COO matrices."""
    return Cost.of_product(product_macs(self, other))


@REGISTRY.register(aten._sparse_mm)
def sparse_mm(out, sparse, dense, reduce=None, **_) -> Cost:
    """Composite (it runs as ``_sparse_addmm``): recorded where a backend keeps it whole.
    ``reduce="mean"`` divides each output element once."""
    return Cost.of_product(product_macs(sparse, dense), numel(out) if reduce == "mean" else 0)


@REGISTRY.register(aten.hspmm)
def hspmm(out, mat1, mat2, **_) -> Cost:
    """A sparse ``mat1`` by a dense ``mat2`` into a hybrid sparse result."""
    return Cost.of_product(product_macs(mat1, mat2))


@REGISTRY.register(aten.smm)
def smm(out, self, mat2, **_) -> Cost:
    """Composite (it runs as ``sspaddmm`` with ``beta=0``): where a backend keeps it whole."""
    return Cost.of_product(product_macs(self, mat2))


@REGISTRY.register(aten._sparse_mm_reduce_impl)
def sparse_mm_reduce(out, self, other, reduce, **_) -> Cost:
    """``torch.sparse.mm(csr, dense, reduce)``: each stored entry multiplies a row of ``other``
    into its output row by ``reduce`` (a sum, or a max/min compare: a MAC either way);
    ``"mean"`` divides each output element once. ``out`` is ``(result, argmax/argmin)``."""
    return Cost.of_product(product_macs(self, other), numel(out[0]) if reduce == "mean" else 0)


@REGISTRY.register(aten._sparse_mm_reduce_impl_backward)
def sparse_mm_reduce_backward(out, self, grad_out, weight, reduce, output_mask, **_) -> Cost:
    """The gradients of ``_sparse_mm_reduce_impl`` that ``output_mask`` asks for (``self``'s,
    ``weight``'s). With ``sum``/``mean`` each is a product over the stored entries of ``self``
    (a dot product of a ``grad_out`` row and a ``weight`` row per entry; ``self^T @ grad_out``):
    ``stored · N`` MACs, ``mean`` adding a divide by the row's count per stored entry. With
    ``amax``/``amin`` each output element's gradient goes to the one entry that won it:
    ``M · N`` MACs."""
    if reduce in ("amax", "amin"):
        each, scales = numel(grad_out), 0
    else:
        each, scales = stored(self) * _cols(grad_out), stored(self) if reduce == "mean" else 0
    gradients = sum(1 for wanted in output_mask if wanted)
    return Cost.of_product(gradients * each, gradients * scales)


@REGISTRY.register(aten.sspaddmm)
def sspaddmm(out, self, mat1, mat2, *, beta, **_) -> Cost:
    """``beta · self + alpha · (mat1 @ mat2)`` into a sparse result: ``self`` and ``mat1`` sparse."""
    return Cost.of_product(product_macs(mat1, mat2), added_flops(out, self, beta))


@REGISTRY.register(aten.sparse_sampled_addmm)
def sparse_sampled_addmm(out, self, mat1, mat2, *, beta, **_) -> Cost:
    """``mat1 @ mat2`` at the stored entries of the sparse ``self`` only: a ``K``-long dot
    product per stored entry, plus its add into ``self``'s value (``torch.sparse.mm``'s
    gradient for a CSR matrix is one).
    """
    return Cost.of_product(stored(self) * mat1.shape[-1], added_flops(out, self, beta))
