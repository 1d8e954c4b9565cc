"""Dense linear algebra: every ``torch.linalg`` function through the kernel it dispatches,
hand-derived from the standard operation counts, CPU == meta where torch has a meta kernel.

FLOPs are the leading-order counts of Golub & Van Loan and LAPACK Working Note 41 (see
docs/conventions/fft_linalg.md), MACs half of them. Sizes are picked so that the ``1/3``
and ``2/3`` terms are whole numbers (n = 6, p = 6). Only the linear-algebra kernels' own
counts are compared (the ``mm`` building a test matrix, an ``abs`` or ``where`` around a
result, belong to other families).
"""

from __future__ import annotations

import pytest
import torch
from conftest import DISPATCH_MODE_BRANCH
from helpers import layer_backward, meta, ops_on, require, torch_op

from flopsight.formulas import REGISTRY, Cost

aten = torch.ops.aten
linalg = torch.linalg

# the deprecated torch.cholesky / lu_solve / triangular_solve are counted too; they warn
pytestmark = pytest.mark.filterwarnings("ignore:torch.* is deprecated in favor of:UserWarning")


def R(*shape):
    return torch.randn(*shape, dtype=torch.float64)


def SPD(n, *batch):
    """A well-conditioned symmetric positive definite matrix."""
    a = R(*batch, n, n)
    return a @ a.transpose(-1, -2) + n * torch.eye(n, dtype=torch.float64)


def UPPER(n):
    return torch.triu(R(n, n)) + n * torch.eye(n, dtype=torch.float64)


def kernel_cost(fn, args, op, devices=("cpu", "meta")):
    """(calls, macs, flops) of kernel ``op`` when ``fn(*args)`` runs, equal on ``devices``."""
    seen = [ops_on(d, fn, *args).get(op) for d in devices]
    assert all(s == seen[0] for s in seen), dict(zip(devices, seen))
    return seen[0]


def case(name, fn, args, op, flops, devices=("cpu", "meta"), marks=()):
    return pytest.param(fn, args, op, flops, devices, id=name, marks=marks)


#: counted with the vectors: the branch torch takes under a dispatch mode (a plain run, which
#: the native backend sees, computes the values alone; see test_native.py)
WITH_VECTORS = pytest.mark.python_backend(DISPATCH_MODE_BRANCH)


CPU = ("cpu",)  # torch has no meta kernel for these (lstsq, geqrf): checked on CPU here

CASES = [
    # -- triangular solves: n^2 per right-hand side ---------------------------------------
    # 4x4 upper, 3 right-hand sides: 16 * 3
    case("solve_triangular", lambda a, b: linalg.solve_triangular(a, b, upper=True), lambda: (UPPER(4), R(4, 3)),
         "aten.linalg_solve_triangular", 4 * 4 * 3),
    # a batch of 2 A's and B's: 2 * 48
    case("solve_triangular batched", lambda a, b: linalg.solve_triangular(a, b, upper=True),
         lambda: (UPPER(4).expand(2, 4, 4), R(2, 4, 3)), "aten.linalg_solve_triangular", 2 * 48),
    # X A = B with B (3, 4): 3 right-hand sides (rows) of length 4: 16 * 3
    case("solve_triangular left=False", lambda a, b: linalg.solve_triangular(a, b, upper=True, left=False),
         lambda: (UPPER(4), R(3, 4)), "aten.linalg_solve_triangular", 48),
    # deprecated triangular_solve(B, A): the same 48
    case("triangular_solve", lambda b, a: torch.triangular_solve(b, a), lambda: (R(4, 3), UPPER(4)),
         "aten.triangular_solve", 48),
    # -- LU-based ---------------------------------------------------------------------------
    # LU 2/3 * 6^3 = 144, + 2 * 6^2 * 2 right-hand sides = 144
    case("solve", linalg.solve, lambda: (SPD(6), R(6, 2)), "aten._linalg_solve_ex", 144 + 144),
    case("solve_ex", linalg.solve_ex, lambda: (SPD(6), R(6, 2)), "aten._linalg_solve_ex", 288),
    # a vector right-hand side: 144 + 2 * 36
    case("solve vector", linalg.solve, lambda: (SPD(6), R(6)), "aten._linalg_solve_ex", 144 + 72),
    # 2 A's, one B broadcast to both: LU 2 * 144, solves 2 * (2 * 36 * 2)
    case("solve batched A", linalg.solve, lambda: (SPD(6, 2), R(6, 2)), "aten._linalg_solve_ex", 2 * 144 + 2 * 144),
    # LU of 6x6: 2/3 * 216 = 144
    case("lu", linalg.lu, lambda: (R(6, 6),), "aten.linalg_lu", 144),
    case("lu_factor", linalg.lu_factor, lambda: (R(6, 6),), "aten.linalg_lu_factor_ex", 144),
    # LU of a tall 12x6 (q=12, p=6): 12 * 36 - 216 / 3 = 360
    case("lu tall", linalg.lu_factor_ex, lambda: (R(12, 6),), "aten.linalg_lu_factor_ex", 360),
    # with the factorization given: two triangular solves, 2 * 36 * 2
    case("lu_solve", lambda a, b: linalg.lu_solve(*linalg.lu_factor(a), b), lambda: (SPD(6), R(6, 2)),
         "aten.linalg_lu_solve", 144),
    # inverse: LU + GETRI = 2 * 216
    case("inv", linalg.inv, lambda: (SPD(6),), "aten.linalg_inv_ex", 432),
    case("torch.inverse", torch.inverse, lambda: (SPD(6),), "aten.linalg_inv_ex", 432),
    # determinants: the LU, 144
    case("det", linalg.det, lambda: (SPD(6),), "aten._linalg_det", 144),
    case("slogdet", linalg.slogdet, lambda: (SPD(6),), "aten._linalg_slogdet", 144),
    case("logdet", torch.logdet, lambda: (SPD(6),), "aten._linalg_slogdet", 144),
    # -- Cholesky and LDL^T ------------------------------------------------------------------
    # 6^3 / 3 = 72
    case("cholesky", linalg.cholesky, lambda: (SPD(6),), "aten.linalg_cholesky_ex", 72),
    case("torch.cholesky", torch.cholesky, lambda: (SPD(6),), "aten.cholesky", 72),
    case("torch.lu_solve", lambda a, b: torch.lu_solve(b, *linalg.lu_factor(a)), lambda: (SPD(6), R(6, 2)),
         "aten.linalg_lu_solve", 144),
    case("cholesky batched", linalg.cholesky_ex, lambda: (SPD(6, 3),), "aten.linalg_cholesky_ex", 3 * 72),
    # two triangular solves: 2 * 36 * 2
    case("cholesky_solve", lambda b, a: torch.cholesky_solve(b, linalg.cholesky(a)), lambda: (R(6, 2), SPD(6)),
         "aten.cholesky_solve", 144),
    # POTRI: 2/3 * 216
    case("cholesky_inverse", lambda a: torch.cholesky_inverse(linalg.cholesky(a)), lambda: (SPD(6),),
         "aten.cholesky_inverse", 144),
    # Bunch-Kaufman: 216 / 3; its solve 2 * 36 * 2
    case("ldl_factor", linalg.ldl_factor, lambda: (SPD(6),), "aten.linalg_ldl_factor_ex", 72, CPU),
    case("ldl_solve", lambda a, b: linalg.ldl_solve(*linalg.ldl_factor(a), b), lambda: (SPD(6), R(6, 2)),
         "aten.linalg_ldl_solve", 144, CPU),
    # -- QR ------------------------------------------------------------------------------------
    # 12x6: R = 2*12*36 - 2/3*216 = 720, thin Q (12x6 from 6 reflectors) =
    # 4*12*6*6 - 2*(12+6)*36 + 4/3*216 = 1728 - 1296 + 288 = 720
    case("qr tall", linalg.qr, lambda: (R(12, 6),), "aten.linalg_qr", 720 + 720),
    # R only
    case("qr mode=r", lambda a: linalg.qr(a, mode="r"), lambda: (R(12, 6),), "aten.linalg_qr", 720),
    # full Q 12x12 from 6 reflectors: 4*12*12*6 - 2*24*36 + 288 = 3456 - 1728 + 288 = 2016
    case("qr complete", lambda a: linalg.qr(a, mode="complete"), lambda: (R(12, 6),), "aten.linalg_qr", 720 + 2016),
    # a wide 6x12: R = 2*12*36 - 144 = 720 (p=6, q=12), Q 6x6 from 6 reflectors: 4/3*216 = 288
    case("qr wide", linalg.qr, lambda: (R(6, 12),), "aten.linalg_qr", 720 + 288),
    # square 6x6: 2/3 of... R = 2*216 - 144 = 288, Q = 4/3 * 216 = 288
    case("qr square", linalg.qr, lambda: (R(6, 6),), "aten.linalg_qr", 576),
    # geqrf alone: 720 (no meta kernel)
    case("geqrf", torch.geqrf, lambda: (R(12, 6),), "aten.geqrf", 720, CPU),
    # Q (12x6) from 6 given reflectors: 720
    case("householder_product", linalg.householder_product, lambda: (R(12, 6), R(6)),
         "aten.linalg_householder_product", 720),
    # 6 reflectors applied from the left to C (12x2): 4*12*2*6 - 2*2*36 = 576 - 144 = 432
    case("ormqr", torch.ormqr, lambda: (R(12, 6), R(6), R(12, 2)), "aten.ormqr", 432, CPU),
    # -- SVD (Golub-Reinsch, m=12 >= n=6) --------------------------------------------------
    # values only: 4*12*36 - 4/3*216 = 1728 - 288 (through the registry below: under a dispatch
    # mode torch treats every input as one that may need a gradient, so svdvals, eigvalsh
    # and matrix_norm(ord=2) run the kernel *with* the vectors, and that is what is counted)
    case("svdvals", linalg.svdvals, lambda: (R(12, 6),), "aten._linalg_svd", 7776, marks=WITH_VECTORS),
    # thin U, V: 14*12*36 + 8*216 = 6048 + 1728
    case("svd thin", lambda a: linalg.svd(a, full_matrices=False), lambda: (R(12, 6),), "aten._linalg_svd", 7776),
    # full U (12x12), V: 4*144*6 + 8*12*36 + 9*216 = 3456 + 3456 + 1944
    case("svd full", linalg.svd, lambda: (R(12, 6),), "aten._linalg_svd", 8856),
    # a wide matrix counts as its transpose
    case("svd wide", lambda a: linalg.svd(a, full_matrices=False), lambda: (R(6, 12),), "aten._linalg_svd", 7776),
    # torch.svd(some=True): thin
    case("torch.svd", torch.svd, lambda: (R(12, 6),), "aten._linalg_svd", 7776),
    # the spectral norm is the largest singular value (computed with the vectors, see svdvals)
    case("matrix_norm ord=2", lambda a: linalg.matrix_norm(a, ord=2), lambda: (R(12, 6),), "aten._linalg_svd", 7776,
         marks=WITH_VECTORS),
    # -- eigensolvers ----------------------------------------------------------------------------
    # symmetric, with vectors: 9 * 216 (eigvalsh too: the vectors are computed, see svdvals)
    case("eigh", linalg.eigh, lambda: (SPD(6),), "aten._linalg_eigh", 1944),
    case("eigvalsh", linalg.eigvalsh, lambda: (SPD(6),), "aten._linalg_eigh", 1944, marks=WITH_VECTORS),
    # general: Schur form with Q, 25 * 216 (eigvals runs the same kernel)
    case("eig", linalg.eig, lambda: (SPD(6),), "aten.linalg_eig", 5400),
    case("eigvals", linalg.eigvals, lambda: (SPD(6),), "aten.linalg_eig", 5400, marks=WITH_VECTORS),
    # -- least squares and pseudo-inverse -----------------------------------------------------
    # 12x6, 2 right-hand sides: QR 720 + Q^T B 4*12*2*6 - 2*2*36 = 432 + R solve 36*2 = 72
    case("lstsq", linalg.lstsq, lambda: (R(12, 6), R(12, 2)), "aten.linalg_lstsq", 720 + 432 + 72, CPU),
    # thin SVD 7776 + V diag(1/s) U^T: 2 * 12*6*6
    case("pinv", linalg.pinv, lambda: (R(12, 6),), "aten.linalg_pinv", 7776 + 864),
    # hermitian: eigh with vectors 1944 + 2 * 6*6*6
    case("pinv hermitian", lambda a: linalg.pinv(a, hermitian=True), lambda: (SPD(6),), "aten.linalg_pinv",
         1944 + 432),
]


@pytest.mark.parametrize("fn, args, op, flops, devices", CASES)
def test_linalg(fn, args, op, flops, devices):
    require(torch_op(op))  # torch.cholesky's aten::cholesky is gone from 2.15
    assert kernel_cost(fn, args(), op, devices) == (1, flops // 2, flops)


def test_cross_product_is_three_flops_per_output_element():
    # (4, 3) x (4, 3): 12 outputs, each a_j b_k - a_k b_j
    assert kernel_cost(linalg.cross, (R(4, 3), R(4, 3)), "aten.linalg_cross") == (1, 0, 36)


def test_values_only_svd_and_eigh():
    """The kernels asked for values only (what torch does outside a dispatch mode)."""
    svd, eigh = REGISTRY.resolve(aten._linalg_svd.default), REGISTRY.resolve(aten._linalg_eigh.default)
    # 4*12*36 - 4/3*216 = 1728 - 288 = 1440
    assert svd.cost(None, (meta(12, 6),), {"compute_uv": False}) == Cost(720, 1440)
    # tridiagonalization only: 4/3 * 216 = 288; a batch of 2: 576
    assert eigh.cost(None, (meta(2, 6, 6), "L", False), {}) == Cost(288, 576)


def test_lstsq_formula_on_meta_tensors():
    """lstsq has no meta kernel: its formula, through the registry, reads shapes only."""
    solve = REGISTRY.resolve(aten.linalg_lstsq.default)
    out = (meta(6, 2), meta(0), meta(0), meta(0))
    assert solve.cost(out, (meta(12, 6), meta(12, 2)), {}) == Cost(612, 1224)  # as the CPU case
    # a wide 6x12 (LQ): the same counts with p = 6, q = 12
    assert solve.cost(out, (meta(6, 12), meta(6, 2)), {}) == Cost(612, 1224)
    # a batch of 3: 3 * 1224
    assert solve.cost(out, (meta(3, 12, 6), meta(3, 12, 2)), {}) == Cost(3 * 612, 3 * 1224)
    # a batch of 3 vector right-hand sides (3, 12): k = 1, QR 720 + Q^T b 4*12*1*6 - 2*1*36 = 216
    # + R solve 36 = 972 per matrix
    assert solve.cost(out, (meta(3, 12, 6), meta(3, 12)), {}) == Cost(3 * 486, 3 * 972)


def test_backward_of_a_triangular_solve_solves_again():
    """The gradient of X = A^-1 B w.r.t. B is A^-T G: one more triangular solve, 4*4*3 = 48
    (the gradient w.r.t. A is then an mm, counted by the matmul family)."""
    a, b = UPPER(4).requires_grad_(), R(4, 3).requires_grad_()
    _, ops = layer_backward("cpu", lambda a, b: linalg.solve_triangular(a, b, upper=True), a, b)
    assert ops["aten.linalg_solve_triangular"] == (1, 24, 48)
