"""Reductions, scans, norms and scatter reductions: hand-derived FLOPs, CPU == meta.

Every case runs on CPU and on meta and must give ``(0 MACs, expected FLOPs)`` on both.
``X()`` is (4, 6, 8): ``N = 192`` input elements. Conventions (docs/conventions/
reduction_loss_zero.md): an accumulation of n values costs n, a mean adds a divide per
output, var = 4n + 2·out, std = 4n + 3·out, logsumexp = 4n + 2·out, 2-norm = 2n + out,
1/inf/0-norms 2n, other p 3n + out; integer and bool inputs cost 0.
"""

import pytest
import torch
import torch.nn.functional as F
from helpers import measure_cpu_meta, measure_on, ops_of

from flopsight.formulas import Cost, reduction

N = 4 * 6 * 8  # elements of X()


def X():
    return torch.randn(4, 6, 8)


def I():  # noqa: E743  integer twin of X()
    return torch.randint(0, 5, (4, 6, 8))


def B():
    return torch.randn(4, 6, 8) > 0


def IDX():
    return torch.tensor([0, 3, 1])


def IDX3():  # scatter index along dim 2: 4*6*3 = 72 elements
    return torch.randint(0, 8, (4, 6, 3))


def SRC():  # source rows for index_add/index_reduce/index_put along dim 0
    return torch.randn(3, 6, 8)


CASES = [
    # -- accumulations: one add / multiply per input element --------------------------------
    ("sum_all", lambda x: x.sum(), X, N),
    ("sum_dim", lambda x: x.sum(1), X, N),
    ("sum_dims_keepdim", lambda x: x.sum((0, 2), keepdim=True), X, N),
    ("sum_dtype", lambda x: x.sum(dtype=torch.float64), X, N),
    ("sum_int", lambda i: i.sum(1), I, 0),
    ("sum_bool", lambda b: b.sum(), B, 0),
    ("sum_int_as_float", lambda i: torch.sum(i, dtype=torch.float32), I, N),  # float adds
    ("nansum", lambda x: x.nansum(1), X, 2 * N),  # NaN test + add
    ("mean_all", lambda x: x.mean(), X, N + 1),  # adds + one divide
    ("mean_dims", lambda x: x.mean((0, 2), keepdim=True), X, N + 6),  # 6 outputs
    ("mean_last", lambda x: x.mean(-1), X, N + 4 * 6),
    ("prod_all", lambda x: x.prod(), X, N),
    ("prod_dim", lambda x: x.prod(1), X, N),
    ("prod_int", lambda i: i.prod(1), I, 0),
    # -- extrema: one comparison per input element --------------------------------------------
    ("amax", lambda x: x.amax(1), X, N),
    ("amin_dims", lambda x: x.amin((0, 1)), X, N),
    ("max_all", lambda x: x.max(), X, N),
    ("max_dim_values_indices", lambda x: x.max(1), X, N),
    ("min_dim_keepdim", lambda x: x.min(1, keepdim=True), X, N),
    ("argmax_all", lambda x: x.argmax(), X, N),
    ("argmin_dim", lambda x: x.argmin(1), X, N),
    ("argmax_int", lambda i: i.argmax(-1), I, 0),
    ("max_int", lambda i: i.max(), I, 0),
    ("aminmax", lambda x: torch.aminmax(x, dim=1), X, 2 * N),
    # -- moments -----------------------------------------------------------------------------
    ("var_dim", lambda x: x.var(1), X, 4 * N + 2 * 32),  # 4*8 outputs
    ("var_all", lambda x: x.var(), X, 4 * N + 2),
    ("var_unbiased_false", lambda x: x.var(-1, unbiased=False), X, 4 * N + 2 * 24),
    ("std_correction0", lambda x: x.std(1, correction=0), X, 4 * N + 3 * 32),
    ("std_all", lambda x: x.std(), X, 4 * N + 3),
    ("var_mean", lambda x: torch.var_mean(x, 1), X, 4 * N + 2 * 32),
    ("std_mean", lambda x: torch.std_mean(x, 1), X, 4 * N + 3 * 32),
    # -- norms ---------------------------------------------------------------------------------
    ("norm_default", lambda x: x.norm(), X, 2 * N + 1),  # square, add / sqrt
    ("norm_p1_dim", lambda x: x.norm(1, dim=1), X, 2 * N),  # abs, add
    ("norm_p3_dim", lambda x: x.norm(3, dim=1), X, 3 * N + 32),  # abs, pow, add / root
    ("norm_inf", lambda x: x.norm(float("inf")), X, 2 * N),  # abs, compare
    ("torch_norm_fro_dims", lambda x: torch.norm(x, p="fro", dim=(1, 2)), X, 2 * N + 4),
    ("vector_norm_ord0", lambda x: torch.linalg.vector_norm(x, 0, dim=-1), X, 2 * N),
    ("linalg_norm_dim", lambda x: torch.linalg.norm(x, dim=-1), X, 2 * N + 24),
    ("matrix_norm_fro", lambda x: torch.linalg.matrix_norm(x), X, 2 * N + 4),
    ("dist_p2", lambda a, b: torch.dist(a, b), lambda: (X(), X()), N + 2 * N + 1),  # subtract + 2-norm
    ("dist_p1_broadcast", lambda a, b: torch.dist(a, b, 1), lambda: (X(), torch.randn(8)), N + 2 * N),
    # renorm: 2-norm of 4 slices (2N + 4), per slice compare + scale factor (3*4), rescale (N)
    ("renorm", lambda x: x.renorm(2, 0, 1.0), X, 2 * N + 4 + 3 * 4 + N),
    # -- log-sum-exp and scans -----------------------------------------------------------------
    ("logsumexp", lambda x: x.logsumexp(1), X, 4 * N + 2 * 32),
    ("cumsum", lambda x: x.cumsum(1), X, N),
    ("cumsum_", lambda x: x.clone().cumsum_(1), X, N),
    ("cumsum_int", lambda i: i.cumsum(-1), I, 0),  # position ids from a mask: free
    ("cumprod", lambda x: x.cumprod(2), X, N),
    ("cummax", lambda x: x.cummax(1), X, N),
    ("cummin", lambda x: x.cummin(0), X, N),
    ("logcumsumexp", lambda x: x.logcumsumexp(1), X, 5 * N),
    # -- counting and logical tests --------------------------------------------------------------
    ("count_nonzero", lambda x: x.count_nonzero(1), X, N),  # a float compare each
    ("count_nonzero_all", lambda x: x.count_nonzero(), X, N),
    ("count_nonzero_int", lambda i: i.count_nonzero(), I, 0),
    ("any_float", lambda x: x.any(1), X, N),
    ("all_float", lambda x: x.all(), X, N),
    ("any_bool", lambda b: b.any(), B, 0),
    ("all_bool_dim", lambda b: b.all(1), B, 0),
    ("trace", lambda x: torch.trace(x[0]), X, 6),  # min(6, 8) diagonal adds
    # -- scatter reductions: one op per accumulated element -------------------------------------
    ("scatter_add", lambda x, i: x.scatter_add(2, i, x), lambda: (X(), IDX3()), 72),
    ("scatter_add_", lambda x, i: x.clone().scatter_add_(2, i, x), lambda: (X(), IDX3()), 72),
    ("scatter_add_int", lambda x, i: x.scatter_add(2, i, x), lambda: (I(), IDX3()), 0),
    ("scatter_reduce_amax", lambda x, i: x.scatter_reduce(2, i, x, "amax"), lambda: (X(), IDX3()), 72),
    ("scatter_reduce_mean", lambda x, i: x.scatter_reduce(2, i, x, "mean"), lambda: (X(), IDX3()), 72 + N),
    ("scatter_value_multiply", lambda x, i: x.scatter(2, i, 2.0, reduce="multiply"), lambda: (X(), IDX3()), 72),
    ("scatter_plain", lambda x, i: x.scatter(2, i, x), lambda: (X(), IDX3()), 0),
    ("index_add", lambda x, i, s: x.index_add(0, i, s), lambda: (X(), IDX(), SRC()), 3 * 6 * 8),
    ("index_add_alpha", lambda x, i, s: x.index_add(0, i, s, alpha=2), lambda: (X(), IDX(), SRC()), 2 * 3 * 6 * 8),
    ("index_add_dim1", lambda x, i, s: x.clone().index_add_(1, i, s), lambda: (X(), IDX(), torch.randn(4, 3, 8)), 96),
    ("index_reduce_prod", lambda x, i, s: x.index_reduce(0, i, s, "prod"), lambda: (X(), IDX(), SRC()), 144),
    ("index_reduce_mean", lambda x, i, s: x.index_reduce(0, i, s, "mean"), lambda: (X(), IDX(), SRC()), 144 + N),
    ("index_put_accumulate", lambda x, i, s: x.clone().index_put_((i,), s, accumulate=True),
     lambda: (X(), IDX(), SRC()), 144),
    # x[i, i] addresses 3 rows of 8: 24 adds, the scalar value broadcast
    ("index_put_accumulate_2idx", lambda x, i: x.clone().index_put_((i, i), torch.ones((), device=x.device),
                                                                     accumulate=True), lambda: (X(), IDX()), 24),
    # a (4, 6) mask addresses 24 rows of 8 (dense: its true entries are data)
    ("index_put_accumulate_mask", lambda x, m: x.clone().index_put_((m,), torch.ones((), device=x.device),
                                                                     accumulate=True),
     lambda: (X(), torch.randn(4, 6) > 0), N),
    ("index_put_plain", lambda x, i, s: x.clone().index_put_((i,), s), lambda: (X(), IDX(), SRC()), 0),
    ("put_accumulate", lambda x, i: x.clone().put_(i, torch.ones(3, device=x.device), accumulate=True),
     lambda: (X(), IDX()), 3),
    # F.fold: every (1, 3*2*2, 9) column element is added into its pixel
    ("fold_col2im", lambda c: F.fold(c, (4, 4), 2), lambda: torch.randn(1, 12, 9), 108),
]


@pytest.mark.filterwarnings("ignore:index_reduce\\(\\) is in beta")
@pytest.mark.parametrize("fn, inputs, flops", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_reduction(fn, inputs, flops):
    args = inputs()
    assert measure_cpu_meta(fn, *(args if isinstance(args, tuple) else (args,))) == (0, flops)


def test_index_put_accumulate_with_a_mask_and_an_index():
    """Regression: a bool mask beside an integer index whose sizes do not broadcast made the
    formula fail (it broadcast the mask's full size, 4, with the index's 3).

    By hand: the mask selects rows 0, 2, 3 and ``idx`` columns 0, 2, 4, paired: x[0, 0],
    x[2, 2], x[3, 4] each get one add (accumulate=True: one add per indexed element) = 3.
    On meta the mask has no values; the count comes from shapes alone: torch pairs the
    mask's true entries with ``idx``, so there must be 3 of them (or 1, broadcast), and the
    selection has ``idx``'s shape (3,) either way: 3 there too, no value read.
    """
    def fn(x, mask, idx):
        return x.index_put((mask, idx), torch.ones(3, device=x.device), accumulate=True)

    inputs = (torch.zeros(4, 5), torch.tensor([True, False, True, True]), torch.tensor([0, 2, 4]))
    assert measure_cpu_meta(fn, *inputs) == (0, 3)
    assert ops_of(fn, *inputs)["aten.index_put"] == (1, 0, 3)
    assert fn(*inputs).sum() == 3  # the 3 adds really happen
    # a mask whose size fits the index is counted dense, by its full size: 4 rows x 1 column
    def fits(x, mask, idx):
        return x.index_put((mask, idx), torch.ones((), device=x.device), accumulate=True)

    assert measure_cpu_meta(fits, torch.zeros(4, 5), inputs[1], torch.tensor([1])) == (0, 4)


def test_cases_hit_reduction_ops():
    # the scatter_value_multiply case really reaches scatter.value_reduce, not a decomposition
    assert ops_of(lambda x, i: x.scatter(2, i, 2.0, reduce="multiply"), X(), IDX3()) == {"aten.scatter": (1, 0, 72)}
    assert ops_of(lambda x: x.var(1), X()) == {"aten.var": (1, 0, 4 * N + 2 * 32)}


def test_bincount_cpu():  # no meta kernel exists
    i = torch.randint(0, 5, (10,))
    assert measure_on("cpu", torch.bincount, i) == (0, 0)  # integer counting
    assert measure_on("cpu", lambda i, w: torch.bincount(i, w), i, torch.rand(10)) == (0, 10)  # one add per weight


def test_nanmean_formula_matches_its_decomposition():
    # torch decomposes nanmean before dispatch into x != x (N), nansum (2N) and a divide per
    # output (32); the formula registered for backends that keep it whole must agree
    x = X()
    assert measure_on("cpu", lambda x: x.nanmean(1), x) == (0, 3 * N + 32)
    assert reduction.nanmean(torch.empty(4, 8), x, dim=1) == Cost(0, 3 * N + 32)
    assert ops_of(lambda x: x.nanmean(1), x)["aten.nansum"] == (1, 0, 2 * N)


def test_pairwise_distance_norm_overload():
    # pairwise_distance still dispatches aten.norm.ScalarOpt_dim: 2-norm over the last dim
    ops = ops_of(F.pairwise_distance, X(), X())
    assert ops["aten.norm"] == (1, 0, 2 * N + 24)


def test_any_on_a_comparison_counts_the_comparison_not_the_any():
    ops = ops_of(lambda x: (x > 0).any(), X())
    assert ops["aten.any"] == (1, 0, 0)
    assert ops["aten.gt"][2] == N  # counted by the elementwise family


def test_max_other_formula_is_elementwise():
    # torch.max(a, b) dispatches maximum today; the max.other overload, if it reaches a
    # mode whole, is one comparison per output element
    a, b = torch.randn(4, 6, 8), torch.randn(6, 8)
    assert reduction.extremum(torch.empty(4, 6, 8), self=a, other=b) == Cost(0, N)


@pytest.mark.parametrize("p, n, out, flops", [
    (2, 10, 1, 21), (None, 10, 2, 22), ("fro", 10, 1, 21), (1, 10, 1, 20), (float("inf"), 10, 1, 20),
    (float("-inf"), 10, 1, 20), (0, 10, 1, 20), (3, 10, 2, 32), (0.5, 10, 1, 31),
])
def test_norm_cost_table(p, n, out, flops):
    assert reduction.norm_cost(n, out, p) == flops
