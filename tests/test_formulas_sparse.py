"""Sparse matrix products, hand-derived: ``torch.sparse.mm``/``addmm``/``sampled_addmm`` and
``mm``/``@``/``mv``/``bmm`` with a COO, CSR, CSC or BSR operand, a GCN layer, their backward.

One MAC per stored entry of the sparse operand per column of the dense one (``stored · N``
for ``(M, K)`` sparse by ``(K, N)`` dense, ``M · stored`` for dense by sparse); sparse by
sparse, one per stored ``a[i, k]`` times stored ``b[k, j]``. FLOPs = 2 · MACs, plus one add
per output element of an added input unless ``beta == 0`` (per stored entry of a sparse
input). torch runs no sparse product on meta, so the cases run on CPU (on both backends:
the native one keeps sparse tensors' values) and the meta formulas are called directly.
"""

from __future__ import annotations

import pytest
import torch
from helpers import formula_of, layer_backward, ops_of
from torch import nn

import flopsight
from flopsight.formulas import Cost

aten = torch.ops.aten

pytestmark = pytest.mark.filterwarnings("ignore:Sparse (CSR tensor support|invariant checks):UserWarning")

# A 4 x 4 adjacency with 5 stored entries: (0,0) (0,1) (1,2) (2,3) (3,0).
ROWS, COLS = [0, 0, 1, 2, 3], [0, 1, 2, 3, 0]
NNZ = 5
# Sparse @ sparse (A @ A) forms one product per stored a[i, k] and stored a[k, j]: the stored
# entries per row are row 0: 2, rows 1-3: 1 each; the columns k of the 5 entries are
# 0, 1, 2, 3, 0, so 2 + 1 + 1 + 1 + 2 = 7 products.
A_AT_A = 7


def adjacency() -> torch.Tensor:
    return torch.sparse_coo_tensor(torch.tensor([ROWS, COLS]), torch.ones(NNZ), (4, 4)).coalesce()


def csr() -> torch.Tensor:
    return adjacency().to_sparse_csr()


def R(*shape):
    return torch.randn(*shape)


def case(name, fn, inputs, macs, flops, op):
    return pytest.param(fn, inputs, (macs, flops), op, id=name)


CASES = [
    # -- sparse (4, 4) x dense (4, 3): 5 stored entries x N = 3 columns = 15 MACs ---------------
    case("sparse.mm coo", torch.sparse.mm, lambda: (adjacency(), R(4, 3)), NNZ * 3, 2 * NNZ * 3, "aten._sparse_addmm"),
    case("sparse.mm csr", torch.sparse.mm, lambda: (csr(), R(4, 3)), NNZ * 3, 2 * NNZ * 3, "aten._sparse_addmm"),
    # + the (4, 3) input added: 4*3 adds (beta=1; the alpha/beta scales are free, as for dense addmm)
    case("sparse.addmm coo", torch.sparse.addmm, lambda: (R(4, 3), adjacency(), R(4, 3)),
         NNZ * 3, 2 * NNZ * 3 + 4 * 3, "aten._sparse_addmm"),
    case("sparse.addmm csr beta=2", lambda c, a, b: torch.sparse.addmm(c, a, b, beta=2, alpha=3),
         lambda: (R(4, 3), csr(), R(4, 3)), NNZ * 3, 2 * NNZ * 3 + 4 * 3, "aten._sparse_addmm"),
    case("mm coo", torch.mm, lambda: (adjacency(), R(4, 3)), NNZ * 3, 2 * NNZ * 3, "aten.mm"),
    case("@ coo", lambda a, b: a @ b, lambda: (adjacency(), R(4, 3)), NNZ * 3, 2 * NNZ * 3, "aten.mm"),
    case("matmul csr", torch.matmul, lambda: (csr(), R(4, 3)), NNZ * 3, 2 * NNZ * 3, "aten.mm"),
    case("@ csc", lambda a, b: a.to_sparse_csc() @ b, lambda: (adjacency(), R(4, 3)), NNZ * 3, 2 * NNZ * 3, "aten.mm"),
    # 2 x 2 blocks: all four blocks of A hold an entry, so 4 blocks x 4 = 16 stored entries x 3
    case("@ bsr", lambda a, b: a.to_dense().to_sparse_bsr((2, 2)) @ b, lambda: (adjacency(), R(4, 3)),
         16 * 3, 2 * 16 * 3, "aten.mm"),
    case("addmm csr", torch.addmm, lambda: (R(4, 3), csr(), R(4, 3)), NNZ * 3, 2 * NNZ * 3 + 4 * 3, "aten.addmm"),
    case("addmm coo beta=0", lambda c, a, b: torch.addmm(c, a, b, beta=0), lambda: (R(4, 3), adjacency(), R(4, 3)),
         NNZ * 3, 2 * NNZ * 3, "aten.addmm"),
    # dense (3, 4) x sparse (4, 4): each stored entry meets M = 3 rows: 3 x 5
    case("dense @ coo", lambda x, a: x @ a, lambda: (R(3, 4), adjacency()), 3 * NNZ, 2 * 3 * NNZ, "aten.mm"),
    case("dense @ csr (linear)", lambda x, a: torch.nn.functional.linear(x, a), lambda: (R(3, 4), csr()),
         3 * NNZ, 2 * 3 * NNZ, "aten.mm"),
    # matrix-vector: one MAC per stored entry
    case("coo @ vector", lambda a, v: a @ v, lambda: (adjacency(), R(4)), NNZ, 2 * NNZ, "aten.mv"),
    case("addmv csr", torch.addmv, lambda: (R(4), csr(), R(4)), NNZ, 2 * NNZ + 4, "aten.addmv"),
    # a batch of two COO (4, 4) matrices: 10 stored entries x 3 columns
    case("bmm coo", lambda a, b: torch.bmm(torch.stack([a, a]), b), lambda: (adjacency(), R(2, 4, 3)),
         2 * NNZ * 3, 2 * 2 * NNZ * 3, "aten.bmm"),
    # -- sparse x sparse: the 7 products of A @ A --------------------------------------------------
    case("sparse.mm coo @ coo", torch.sparse.mm, lambda: (adjacency(), adjacency()),
         A_AT_A, 2 * A_AT_A, "aten._sparse_sparse_matmul"),
    case("sparse.mm csr @ csr", torch.sparse.mm, lambda: (csr(), csr()), A_AT_A, 2 * A_AT_A, "aten._sparse_addmm"),
    case("csr @ csr", lambda a, b: a @ b, lambda: (csr(), csr()), A_AT_A, 2 * A_AT_A, "aten.mm"),
    # -- the other sparse products ----------------------------------------------------------------
    case("hspmm", torch.hspmm, lambda: (adjacency(), R(4, 3)), NNZ * 3, 2 * NNZ * 3, "aten.hspmm"),
    # smm runs sspaddmm with beta=0 into a sparse result
    case("smm", torch.smm, lambda: (adjacency(), R(4, 3)), NNZ * 3, 2 * NNZ * 3, "aten.sspaddmm"),
    # + the sparse (4, 3) input's 2 stored entries added
    case("sspaddmm", torch.sspaddmm,
         lambda: (torch.sparse_coo_tensor(torch.tensor([[0, 3], [1, 2]]), torch.ones(2), (4, 3)), adjacency(), R(4, 3)),
         NNZ * 3, 2 * NNZ * 3 + 2, "aten.sspaddmm"),
    # (4, 2) @ (2, 4) at A's 5 entries only: a K = 2 dot product each, + 5 adds into the values
    case("sampled_addmm", torch.sparse.sampled_addmm, lambda: (csr(), R(4, 2), R(2, 4)),
         NNZ * 2, 2 * NNZ * 2 + NNZ, "aten.sparse_sampled_addmm"),
    case("sparse.mm reduce sum", lambda a, b: torch.sparse.mm(a, b, "sum"), lambda: (csr(), R(4, 3)),
         NNZ * 3, 2 * NNZ * 3, "aten._sparse_mm_reduce_impl"),
    # + one divide per (4, 3) output element
    case("sparse.mm reduce mean", lambda a, b: torch.sparse.mm(a, b, "mean"), lambda: (csr(), R(4, 3)),
         NNZ * 3, 2 * NNZ * 3 + 4 * 3, "aten._sparse_mm_reduce_impl"),
    # an uncoalesced COO matrix: each of its 3 stored entries (two at (0, 1)) is multiplied
    case("uncoalesced coo", torch.sparse.mm,
         lambda: (torch.sparse_coo_tensor(torch.tensor([[0, 0, 2], [1, 1, 3]]), torch.ones(3), (4, 4)), R(4, 3)),
         3 * 3, 2 * 3 * 3, "aten._sparse_addmm"),
]


@pytest.mark.parametrize("fn, inputs, expected, op", CASES)
def test_sparse_products(fn, inputs, expected, op):
    result = flopsight.profile(_Call(fn), inputs(), warm_up=0)
    assert (result.total.forward.macs, result.total.forward.flops) == expected
    assert op in {name for name in result.ops()}
    assert result.unsupported_ops == {}


class _Call(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def test_layout_conversions_are_free():
    ops = ops_of(lambda a: a.to_sparse_csr().to_dense().to_sparse_csc().to_dense().to_sparse_bsr((2, 2)),
                 adjacency())
    assert ops, "the call dispatched no aten op: the case tests nothing"
    assert {name: (macs, flops) for name, (_, macs, flops) in ops.items()} == {name: (0, 0) for name in ops}


# -- meta: the stored entries come from the layout, which a meta sparse tensor has ------------------
def meta_adjacency() -> torch.Tensor:
    return torch.sparse_coo_tensor(torch.tensor([ROWS, COLS], device="meta"), torch.ones(NNZ, device="meta"), (4, 4))


def meta_csr() -> torch.Tensor:
    a = csr()
    return torch.sparse_csr_tensor(a.crow_indices().to("meta"), a.col_indices().to("meta"), a.values().to("meta"),
                                   (4, 4))


@pytest.mark.any_backend
@pytest.mark.parametrize("matrix", [meta_adjacency, meta_csr], ids=["coo", "csr"])
def test_meta_sparse_operands_count_their_stored_entries(matrix):
    a, x, out = matrix(), torch.empty(4, 3, device="meta"), torch.empty(4, 3, device="meta")
    assert a.device.type == "meta"
    # 5 stored entries x 3 columns; + 4*3 adds with beta=1
    assert formula_of(aten._sparse_addmm)(out, out, a, x, beta=0) == Cost(NNZ * 3, 2 * NNZ * 3)
    assert formula_of(aten._sparse_addmm)(out, out, a, x, beta=1) == Cost(NNZ * 3, 2 * NNZ * 3 + 4 * 3)
    assert formula_of(aten.mm)(out, a, x) == Cost(NNZ * 3, 2 * NNZ * 3)
    # sparse x sparse on meta: the indices cannot be read, so b counts as dense: 5 x N = 4
    assert formula_of(aten._sparse_sparse_matmul)(out, a, a) == Cost(NNZ * 4, 2 * NNZ * 4)


# -- a GCN layer: A_hat (n x n sparse) @ X (n x f) and a Linear(f, h), in both orders -----------------
N_NODES, F_IN, H_OUT = 6, 5, 4
# A_hat: a ring of 6 nodes, both directions, with self loops: 6 + 2*6 = 18 stored entries
GCN_NNZ = N_NODES + 2 * N_NODES


def ring_adjacency() -> torch.Tensor:
    nodes = torch.arange(N_NODES)
    rows = torch.cat([nodes, nodes, nodes])
    cols = torch.cat([nodes, (nodes + 1) % N_NODES, (nodes - 1) % N_NODES])
    a = torch.sparse_coo_tensor(torch.stack([rows, cols]), torch.full((GCN_NNZ,), 1 / 3), (N_NODES, N_NODES))
    return a.coalesce()


class GCNLayer(nn.Module):
    def __init__(self, aggregate_first: bool, product=torch.sparse.mm):
        super().__init__()
        self.lin = nn.Linear(F_IN, H_OUT)
        self.aggregate_first, self.product = aggregate_first, product

    def forward(self, a_hat, x):
        if self.aggregate_first:
            return self.lin(self.product(a_hat, x))  # (A X) W
        return self.product(a_hat, self.lin(x))  # A (X W)


# the Linear: n*f*h = 6*5*4 = 120 MACs, FLOPs 2*120 + the bias on the (6, 4) output = 264
LINEAR = Cost(N_NODES * F_IN * H_OUT, 2 * N_NODES * F_IN * H_OUT + N_NODES * H_OUT)


@pytest.mark.parametrize("product", [torch.sparse.mm, torch.mm], ids=["sparse.mm", "mm"])
@pytest.mark.parametrize("aggregate_first", [True, False], ids=["(A X) W", "A (X W)"])
def test_gcn_layer(aggregate_first, product):
    model = GCNLayer(aggregate_first, product)
    result = flopsight.profile(model, (ring_adjacency(), torch.randn(N_NODES, F_IN)), warm_up=0)
    # the sparse product: 18 stored entries x the dense operand's columns, f = 5 when it comes
    # first ((A X) W: 18*5 = 90), h = 4 after the Linear (A (X W): 18*4 = 72)
    columns = F_IN if aggregate_first else H_OUT
    sparse = Cost(GCN_NNZ * columns, 2 * GCN_NNZ * columns)
    assert _cost(result.module("lin").forward) == LINEAR
    assert _cost(result.total.forward) == LINEAR + sparse
    assert result.unsupported_ops == {}


def _cost(stats) -> Cost:
    return Cost(stats.macs, stats.flops)


# -- backward ---------------------------------------------------------------------------------------
def test_sparse_mm_backward_to_the_dense_operand():
    """``torch.sparse.mm(A, X).sum().backward()`` with ``X`` requiring grad: X's gradient is
    ``A^T @ grad``, an ``mm`` of the sparse transpose: 5 stored entries x 3 columns (the
    transpose is a free view; ``.sum()`` and its backward are the root's)."""
    total, ops = layer_backward("cpu", torch.sparse.mm, adjacency(), torch.randn(4, 3, requires_grad=True))
    assert ops["aten.mm"] == (1, NNZ * 3, 2 * NNZ * 3)
    assert total == (NNZ * 3, 2 * NNZ * 3)


def test_sparse_mm_backward_to_a_csr_matrix():
    """A CSR matrix requiring grad: its gradient is ``grad @ X^T`` sampled at its 5 stored
    entries (``sparse_sampled_addmm``, K = 3, beta=1: + 5 adds), and X's is ``A^T @ grad``
    (an ``mm`` of the CSC transpose: 5 x 3)."""
    a = csr().requires_grad_(True)
    total, ops = layer_backward("cpu", torch.sparse.mm, a, torch.randn(4, 3, requires_grad=True))
    assert ops["aten.sparse_sampled_addmm"] == (1, NNZ * 3, 2 * NNZ * 3 + NNZ)
    assert ops["aten.mm"] == (1, NNZ * 3, 2 * NNZ * 3)
    assert total == (2 * NNZ * 3, (2 * NNZ * 3 + NNZ) + 2 * NNZ * 3)


def test_sparse_mm_backward_to_a_coo_matrix_runs_a_dense_product():
    """A COO matrix requiring grad: torch computes ``grad @ X^T`` dense, (4, 3) x (3, 4) =
    4*3*4 MACs, and masks it to A's pattern (``sparse_mask``, free): counted as it runs."""
    a = adjacency().requires_grad_(True)
    _, ops = layer_backward("cpu", torch.sparse.mm, a, torch.randn(4, 3))
    assert ops["aten.mm"] == (1, 4 * 3 * 4, 2 * 4 * 3 * 4)
    assert ops["aten.sparse_mask"][1:] == (0, 0)


# the gradients of torch.sparse.mm(csr, X, reduce), (4, 4) with 5 stored entries by X (4, 3): with
# sum/mean, each gradient asked for (X's; the matrix's when it requires grad) is a product over the
# 5 stored entries, 5*3 MACs; mean divides once per stored entry and gradient (the row counts); with
# amax/amin each of the 4*3 output elements' gradients goes to the entry that won: 4*3 MACs each
@pytest.mark.parametrize("reduce, matrix_grad, macs, flops", [
    ("sum", False, NNZ * 3, 2 * NNZ * 3),
    ("sum", True, 2 * NNZ * 3, 2 * 2 * NNZ * 3),
    ("mean", False, NNZ * 3, 2 * NNZ * 3 + NNZ),
    ("mean", True, 2 * NNZ * 3, 2 * 2 * NNZ * 3 + 2 * NNZ),
    ("amax", True, 2 * 4 * 3, 2 * 2 * 4 * 3),
    ("amin", False, 4 * 3, 2 * 4 * 3),
])
def test_sparse_mm_reduce_backward(reduce, matrix_grad, macs, flops):
    a = csr().requires_grad_(matrix_grad)
    total, ops = layer_backward("cpu", lambda a, x: torch.sparse.mm(a, x, reduce), a,
                                torch.randn(4, 3, requires_grad=True))
    assert ops == {"aten._sparse_mm_reduce_impl_backward": (1, macs, flops)}
    assert total == (macs, flops)
