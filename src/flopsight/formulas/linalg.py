"""Dense linear algebra: factorizations, solves, inverses, determinants, SVD, eigensolvers.

Each ``torch.linalg`` function reaches dispatch as one kernel (the same on CPU and meta);
these are counted with the standard operation counts of numerical linear algebra (Golub &
Van Loan, *Matrix Computations*; LAPACK Working Note 41, "Installation Guide for LAPACK",
whose appendix tabulates the flops of every LAPACK routine), leading terms only. FLOPs are
those counts, in the operations of the input's dtype (a complex multiply-add is one, as in
:mod:`.matmul`); the work is multiply-add dominated (blocked LAPACK runs it as GEMMs), so
MACs are half the FLOPs, rounded down. A batch of matrices costs the batch times one.

For an ``n x n`` matrix ``A``, ``k`` right-hand sides, an ``m x n`` matrix with ``p =
min(m, n)`` and ``q = max(m, n)``:

============================================  =====================================
op                                            FLOPs (per matrix)
============================================  =====================================
triangular solve                              ``n^2 k``
Cholesky                                      ``n^3 / 3``
LU (``m x n``)                                ``q p^2 - p^3 / 3`` (``2/3 n^3``)
solve (LU + two triangular solves)            ``2/3 n^3 + 2 n^2 k``
inverse                                       ``2 n^3``
det, slogdet (LU)                             ``2/3 n^3``
QR (Householder, R)                           ``2 q p^2 - 2/3 p^3``
   + Q (``m x c``, ``c = p`` or ``m``)        ``+ 4 m c p - 2 (m + c) p^2 + 4/3 p^3``
SVD (Golub-Reinsch, ``m >= n``)               ``4mn^2 - 4/3 n^3`` values only;
                                              ``14mn^2 + 8n^3`` thin U, V;
                                              ``4m^2 n + 8mn^2 + 9n^3`` full U, V
symmetric eigensolver (``eigh``)              ``4/3 n^3`` values; ``9 n^3`` with vectors
general eigensolver (``eig``)                 ``25 n^3``
LDL^T (Bunch-Kaufman)                         ``n^3 / 3``
least squares (QR)                            ``QR + 4 q k p - 2 k p^2 + p^2 k``
============================================  =====================================

docs/conventions/fft_linalg.md derives each one and names its source.

>>> import torch
>>> from flopsight.formulas.linalg import linalg_cholesky_ex
>>> linalg_cholesky_ex(None, torch.ones(6, 6))  # 6^3 / 3 = 72 FLOPs
Stats(macs=36, flops=72)
"""

from __future__ import annotations

import torch

from .registry import REGISTRY, Cost, OpNames

aten = OpNames("aten")  # names: an op this torch lacks is skipped (registry.builtins_loading)
from .shapes import broadcast_shape, numel, prod

__all__ = [
    "trsm_flops", "potrf_flops", "getrf_flops", "geqrf_flops", "orgqr_flops", "ormqr_flops", "svd_flops",
    "linalg_solve_triangular", "triangular_solve", "linalg_solve", "linalg_cholesky_ex", "cholesky_solve",
    "cholesky_inverse", "linalg_lu", "linalg_lu_solve", "linalg_qr", "geqrf",
    "linalg_householder_product", "ormqr", "linalg_svd", "linalg_eigh", "linalg_eig", "linalg_ldl_factor_ex",
    "linalg_ldl_solve", "linalg_inv_ex",
    "linalg_det", "linalg_lstsq", "linalg_pinv", "linalg_cross",
]  # fmt: skip


# -- standard counts (FLOPs of one matrix) ------------------------------------------------
def trsm_flops(n: int, k: int) -> int:
    """Triangular ``n x n`` solve with ``k`` right-hand sides (LAWN 41 TRSM: ``k n^2``)."""
    return n * n * k


def potrf_flops(n: int) -> int:
    """Cholesky of an ``n x n`` matrix (LAWN 41 POTRF: ``n^3 / 3``)."""
    return n**3 // 3


def getrf_flops(m: int, n: int) -> int:
    """LU with partial pivoting of ``m x n`` (LAWN 41 GETRF: ``q p^2 - p^3 / 3``).

    >>> getrf_flops(6, 6), getrf_flops(12, 6), getrf_flops(6, 12)  # 2/3 * 216; 12*36 - 216/3
    (144, 360, 360)
    """
    p, q = min(m, n), max(m, n)
    return (3 * q * p * p - p**3) // 3


def geqrf_flops(m: int, n: int) -> int:
    """Householder QR of ``m x n``, R only (LAWN 41 GEQRF: ``2 q p^2 - 2/3 p^3``; the LQ of a
    wide matrix is the same with the roles swapped)."""
    p, q = min(m, n), max(m, n)
    return (6 * q * p * p - 2 * p**3) // 3


def orgqr_flops(m: int, n: int, k: int) -> int:
    """Forming the ``m x n`` Q of ``k`` reflectors (LAWN 41 ORGQR: ``4mnk - 2(m + n)k^2 + 4/3 k^3``)."""
    return (12 * m * n * k - 6 * (m + n) * k * k + 4 * k**3) // 3


def ormqr_flops(m: int, n: int, k: int, left: bool = True) -> int:
    """Applying ``k`` reflectors to an ``m x n`` matrix (LAWN 41 ORMQR: ``4nmk - 2nk^2`` from
    the left, ``4nmk - 2mk^2`` from the right)."""
    return 4 * m * n * k - 2 * (n if left else m) * k * k


def svd_flops(m: int, n: int, compute_uv: bool, full_matrices: bool) -> int:
    """Golub-Reinsch SVD of ``m x n`` (Golub & Van Loan's SVD work table), ``m >= n`` after
    transposing a wide matrix."""
    m, n = max(m, n), min(m, n)
    if not compute_uv:
        return (12 * m * n * n - 4 * n**3) // 3
    if full_matrices:
        return 4 * m * m * n + 8 * m * n * n + 9 * n**3
    return 14 * m * n * n + 8 * n**3


def _cost(flops: int) -> Cost:
    """A factorization's cost: its FLOPs, half of them multiply-adds."""
    return Cost(flops // 2, flops)


def _batch(t: torch.Tensor, core: int = 2) -> int:
    return prod(t.shape[:-core])


def _batch_of(*shapes) -> int:
    return prod(broadcast_shape(*shapes) or ())


# -- triangular, Cholesky and LU solves ---------------------------------------------------
@REGISTRY.register(aten.linalg_solve_triangular)
def linalg_solve_triangular(out, self, B, **_) -> Cost:
    """``solve_triangular(A, B)``: ``n^2`` per right-hand side. ``A`` is ``n x n``; every
    column (``left=True``) or row (``left=False``) of the result is one right-hand side, so
    over the broadcast batch it is ``n * numel(result)``."""
    return _cost(self.shape[-1] * numel(out))


@REGISTRY.register(aten.triangular_solve)
def triangular_solve(out, self, A, **_) -> Cost:
    """Deprecated ``torch.triangular_solve(B, A)``: as :func:`linalg_solve_triangular`."""
    solution = out[0]
    return _cost(A.shape[-1] * numel(solution))


def _solve(A, B, result, lu: bool) -> Cost:
    n = A.shape[-1]
    flops = (getrf_flops(n, n) * _batch(A) if lu else 0) + 2 * n * numel(result)
    return _cost(flops)


@REGISTRY.register("aten::_linalg_solve_ex")
def linalg_solve(out, A, B, **_) -> Cost:
    """``linalg.solve``/``solve_ex``: LU of ``A`` (once per matrix of ``A``'s batch), then a
    forward and a back substitution per right-hand side: ``2/3 n^3 + 2 n^2 k``."""
    return _solve(A, B, out[0], lu=True)


@REGISTRY.register(aten.linalg_lu_solve)
def linalg_lu_solve(out, LU, pivots, B, **_) -> Cost:
    """Solve with a factorization already computed: ``2 n^2`` per right-hand side (the
    row permutation is free)."""
    return _solve(LU, B, out, lu=False)


@REGISTRY.register(aten.cholesky_solve)
def cholesky_solve(out, self, input2, **_) -> Cost:
    """``cholesky_solve(B, L)``: two triangular solves, ``2 n^2`` per right-hand side."""
    return _solve(input2, self, out, lu=False)


@REGISTRY.register(aten.linalg_cholesky_ex, aten.cholesky)
def linalg_cholesky_ex(out, self, **_) -> Cost:
    """``linalg.cholesky``/``cholesky_ex`` (and the deprecated ``torch.cholesky``): ``n^3 / 3``."""
    return _cost(potrf_flops(self.shape[-1]) * _batch(self))


@REGISTRY.register(aten.cholesky_inverse)
def cholesky_inverse(out, self, **_) -> Cost:
    """Inverse from a Cholesky factor (LAWN 41 POTRI = TRTRI + LAUUM): ``2/3 n^3``."""
    n = self.shape[-1]
    return _cost(2 * n**3 // 3 * _batch(self))


@REGISTRY.register(aten.linalg_lu, aten.linalg_lu_factor_ex)
def linalg_lu(out, A, **_) -> Cost:
    """``linalg.lu``, ``lu_factor``/``lu_factor_ex`` (``torch.lu``): LU of ``m x n``,
    ``2/3 n^3`` when square. Unpacking P, L and U is a copy."""
    return _cost(getrf_flops(A.shape[-2], A.shape[-1]) * _batch(A))


@REGISTRY.register(aten.linalg_inv_ex)
def linalg_inv_ex(out, A, **_) -> Cost:
    """``linalg.inv``/``inv_ex``, ``torch.inverse``: LU (``2/3 n^3``) then the inverse from
    it (LAWN 41 GETRI, ``4/3 n^3``): ``2 n^3``."""
    return _cost(2 * A.shape[-1] ** 3 * _batch(A))


@REGISTRY.register("aten::_linalg_det", "aten::_linalg_slogdet")
def linalg_det(out, A, **_) -> Cost:
    """``linalg.det``, ``slogdet``, ``logdet``: the LU, ``2/3 n^3`` (the product or log-sum
    of the ``n`` diagonal entries is a lower-order term)."""
    n = A.shape[-1]
    return _cost(getrf_flops(n, n) * _batch(A))


# -- orthogonal factorizations ------------------------------------------------------------
@REGISTRY.register(aten.linalg_qr)
def linalg_qr(out, A, mode="reduced", **_) -> Cost:
    """``linalg.qr``: Householder QR (``2 q p^2 - 2/3 p^3``), plus forming Q from the ``p``
    reflectors: ``m x p`` (``mode="reduced"``), ``m x m`` (``"complete"``), none (``"r"``)."""
    m, n = A.shape[-2], A.shape[-1]
    p = min(m, n)
    flops = geqrf_flops(m, n)
    if mode != "r":
        flops += orgqr_flops(m, m if mode == "complete" else p, p)
    return _cost(flops * _batch(A))


@REGISTRY.register(aten.geqrf)
def geqrf(out, self, **_) -> Cost:
    """``torch.geqrf``: the reflectors and R only."""
    return _cost(geqrf_flops(self.shape[-2], self.shape[-1]) * _batch(self))


@REGISTRY.register(aten.linalg_householder_product)
def linalg_householder_product(out, input, tau, **_) -> Cost:
    """``linalg.householder_product`` (``orgqr``): the ``m x n`` Q of ``k = tau.shape[-1]``
    reflectors."""
    return _cost(orgqr_flops(input.shape[-2], input.shape[-1], tau.shape[-1]) * _batch(input))


@REGISTRY.register(aten.ormqr)
def ormqr(out, self, input2, input3, left=True, **_) -> Cost:
    """``torch.ormqr(A, tau, C)``: ``k = tau.shape[-1]`` reflectors applied to ``C``."""
    m, n = input3.shape[-2], input3.shape[-1]
    return _cost(ormqr_flops(m, n, input2.shape[-1], left) * _batch(out))


@REGISTRY.register("aten::_linalg_svd")
def linalg_svd(out, A, full_matrices=False, compute_uv=True, **_) -> Cost:
    """``linalg.svd``, ``svdvals``, ``torch.svd``, ``matrix_norm(ord=2)``, ``matrix_rank``:
    Golub-Reinsch SVD, by what is computed (values only, thin or full singular vectors)."""
    return _cost(svd_flops(A.shape[-2], A.shape[-1], compute_uv, full_matrices) * _batch(A))


@REGISTRY.register("aten::_linalg_eigh")
def linalg_eigh(out, A, UPLO="L", compute_v=True, **_) -> Cost:
    """``linalg.eigh``/``eigvalsh``: symmetric QR algorithm (Golub & Van Loan §8.3),
    ``4/3 n^3`` for the eigenvalues (tridiagonalization), ``9 n^3`` with the eigenvectors."""
    n = A.shape[-1]
    flops = 9 * n**3 if compute_v else 4 * n**3 // 3
    return _cost(flops * _batch(A))


@REGISTRY.register(aten.linalg_eig)
def linalg_eig(out, self, **_) -> Cost:
    """``linalg.eig``/``eigvals`` (torch computes the vectors in both): the real Schur
    decomposition with Q by the Francis QR step, ``25 n^3`` (Golub & Van Loan §7.5.6)."""
    return _cost(25 * self.shape[-1] ** 3 * _batch(self))


@REGISTRY.register(aten.linalg_ldl_factor_ex)
def linalg_ldl_factor_ex(out, self, **_) -> Cost:
    """``linalg.ldl_factor``/``ldl_factor_ex`` (Bunch-Kaufman, LAWN 41 SYTRF): ``n^3 / 3``."""
    return _cost(potrf_flops(self.shape[-1]) * _batch(self))


@REGISTRY.register(aten.linalg_ldl_solve)
def linalg_ldl_solve(out, LD, pivots, B, **_) -> Cost:
    """``linalg.ldl_solve``: two triangular solves, ``2 n^2`` per right-hand side (the
    block-diagonal D is a lower-order term)."""
    return _solve(LD, B, out, lu=False)


@REGISTRY.register(aten.linalg_lstsq)
def linalg_lstsq(out, self, b, **_) -> Cost:
    """``linalg.lstsq(A, B)`` (LAPACK GELS: QR of a tall ``A``, LQ of a wide one): the
    factorization, the ``p`` reflectors applied to the ``k`` right-hand sides, a triangular
    solve: ``2 q p^2 - 2/3 p^3 + 4 q k p - 2 k p^2 + p^2 k``. Counted so for every
    ``driver`` (the CPU default, gelsy, pivots its QR; gelsd/gelss use an SVD)."""
    m, n = self.shape[-2], self.shape[-1]
    p, q = min(m, n), max(m, n)
    vector_b = b.dim() == self.dim() - 1  # (*, m): one right-hand side per matrix
    k = 1 if vector_b else b.shape[-1]
    batch = _batch_of(self.shape[:-2], b.shape[:-1] if vector_b else b.shape[:-2])
    flops = geqrf_flops(m, n) + ormqr_flops(q, k, p) + trsm_flops(p, k)
    return _cost(flops * batch)


@REGISTRY.register(aten.linalg_pinv)
def linalg_pinv(out, self, hermitian=False, **_) -> Cost:
    """``linalg.pinv``: a thin SVD (``eigh`` with vectors when ``hermitian``) and the
    product ``V diag(1/s) U^H``, ``m n p`` multiply-adds."""
    m, n = self.shape[-2], self.shape[-1]
    p = min(m, n)
    decomposition = 9 * n**3 if hermitian else svd_flops(m, n, compute_uv=True, full_matrices=False)
    return _cost((decomposition + 2 * m * n * p) * _batch(self))


@REGISTRY.register(aten.linalg_cross)
def linalg_cross(out, self, other, **_) -> Cost:
    """Cross product of 3-vectors: each output element is ``a_j b_k - a_k b_j``, 3 FLOPs
    (not a matrix product: 0 MACs)."""
    return Cost.of_flops(3 * numel(out))
