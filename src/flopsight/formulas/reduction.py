"""Reductions and scans: sum, mean, max, argmax, var, norm, logsumexp, cumsum ...

Convention: **every arithmetic operation and comparison is one FLOP**, counted per
element from shapes alone (``n`` = input elements, ``n_out`` = output elements):

* accumulating ``n`` values costs ``n`` (one add per value into a zero accumulator:
  ``sum``, ``prod``, ``cumsum``; a comparison per value for ``amax``, ``argmax``,
  ``max``, ``cummax``);
* a mean adds one divide per output element: ``mean`` = ``n + n_out``;
* composite statistics are the sum of their steps: ``var`` = mean (``n + n_out``) +
  subtract (``n``) + square (``n``) + accumulate (``n``) + divide (``n_out``) =
  ``4n + 2 n_out``; ``std`` adds a square root per output; ``logsumexp`` is max, subtract,
  exp and sum per element plus a log and an add per output; norms are listed at
  :func:`norm_cost`.

Reductions over integer or boolean tensors cost 0 (integer arithmetic is not a FLOP),
so ``mask.any()``, ``ids.sum()`` and ``(ids != pad).cumsum(-1)`` are free while
``x.any()`` on a float ``x`` counts its comparisons with zero. An op counts when its
input or its result is floating point (``int_tensor.sum(dtype=torch.float32)`` does float
adds).

Also here, because they reduce into a tensor by index: the accumulating forms of the
scatter family. ``index_put(accumulate=True)``, ``scatter(reduce=...)``,
``scatter_add``, ``scatter_reduce``, ``index_add``, ``index_reduce``,
``put(accumulate=True)``, ``col2im`` (``F.fold``) cost one FLOP per accumulated element
(dense: boolean-mask indices are counted by their full size, since counting the true
entries would read values); their plain writing forms cost 0.

Ordering and order statistics (``sort``, ``topk``, ``median``, ``kthvalue``, ``mode``)
are counted as 0 in :mod:`.zero`: their comparison count depends on the algorithm.

Backward: reductions have no backward kernels of their own -- autograd runs elementwise
ops (``sum``'s backward is a free ``expand``, ``mean``'s a ``div``, ``norm``'s and
``var``'s a few ``mul``/``div``/``sub``, ``max``'s a free ``scatter``, ``cumsum``'s a
``flip``/``cumsum``), all counted by their forward formulas. The backward kernels that
*accumulate* gradients into an input are here, one add per gradient element: ``unfold``'s
(``unfold_backward``: overlapping windows sum), the reflection/replication padding ones
(an edge element receives several gradients), and the composites ``index_select_backward``,
``gather_backward``, ``cummaxmin_backward``. The optimizers' multi-tensor reductions
(``_foreach_norm`` of ``clip_grad_norm_``, ``_foreach_max``, ``_foreach_powsum``) cost the
per-tensor formula summed over the list.

>>> import torch
>>> from flopsight.formulas.reduction import sum_, mean, var
>>> x = torch.ones(4, 8)
>>> sum_(torch.ones(4), x, [1])            # 4*8 adds
Cost(macs=0, flops=32)
>>> mean(torch.ones(4), x, [1])            # 32 adds + 4 divides
Cost(macs=0, flops=36)
>>> var(torch.ones(4), x, [1])             # 4*32 + 2*4
Cost(macs=0, flops=136)
>>> sum_(torch.ones(4, dtype=torch.long), x.long(), [1])   # integer: free
Cost(macs=0, flops=0)
>>> from flopsight.formulas.reduction import unfold_backward
>>> unfold_backward(x, torch.ones(4, 3, 4), [4, 8], 1, 4, 2)   # 3 windows of 4: 48 adds
Cost(macs=0, flops=48)
"""

from __future__ import annotations

import math

import torch

from .elementwise import foreach
from .registry import REGISTRY, Cost
from .shapes import arg, broadcast_shape, first_tensor, is_float, numel, prod

__all__ = [
    "sum_", "nansum", "mean_flops", "mean", "nanmean", "prod_", "extremum", "aminmax", "var", "std",
    "norm", "linalg_vector_norm", "frobenius_norm", "dist", "renorm", "norm_cost",
    "logsumexp", "scan", "logcumsumexp", "count_nonzero", "any_all", "trace",
    "bincount", "index_put", "masked_index_put_accumulate", "put", "scatter",
    "scatter_add", "scatter_reduce", "index_add", "index_reduce", "col2im",
    "unfold_backward", "pad_backward", "coalesce", "accumulate_grad_backward",
    "foreach_norm", "foreach_max", "foreach_powsum",
]

aten = torch.ops.aten

# Private kernels (``_aminmax``, ``_unsafe_index_put``...) vary across torch versions: they are
# named with ``missing_ok=True``.


def _counts(x, out) -> bool:
    """Float arithmetic happens if the input or the (first) result is floating point."""
    return is_float(x) or is_float(first_tensor(out))


def _n_out(out) -> int:
    return numel(first_tensor(out))


# -- accumulations ----------------------------------------------------------------------
@REGISTRY.register(aten.sum)
def sum_(out, x, *args, **kwargs) -> Cost:
    """One add per input element."""
    return Cost.of_flops(numel(x) if _counts(x, out) else 0)


@REGISTRY.register(aten.nansum)
def nansum(out, x, *args, **kwargs) -> Cost:
    """A NaN test and an add per input element."""
    return Cost.of_flops(2 * numel(x) if _counts(x, out) else 0)


def mean_flops(n: int, n_out: int) -> int:
    """FLOPs of a mean of ``n`` elements into ``n_out`` results: an add per input element and
    a divide per output element. Shared with the formulas that must count what ``aten.mean``
    counts (adaptive average pooling, attention weights averaged over heads).

    >>> mean_flops(32, 4)
    36
    """
    return n + n_out


@REGISTRY.register(aten.mean)
def mean(out, x, *args, **kwargs) -> Cost:
    """An add per input element and a divide per output element."""
    return Cost.of_flops(mean_flops(numel(x), _n_out(out)) if _counts(x, out) else 0)


@REGISTRY.register(aten.nanmean)
def nanmean(out, x, *args, **kwargs) -> Cost:
    """Composite (``x != x``, ``nansum``, divide): 3 per element + a divide per output.

    Torch decomposes it before dispatch; this is for backends that keep it whole.
    """
    return Cost.of_flops(3 * numel(x) + _n_out(out) if _counts(x, out) else 0)


@REGISTRY.register(aten.prod)
def prod_(out, x, *args, **kwargs) -> Cost:
    """One multiply per input element."""
    return Cost.of_flops(numel(x) if _counts(x, out) else 0)


@REGISTRY.register(aten.amax, aten.amin, aten.max, aten.min, aten.argmax, aten.argmin)
def extremum(out, x, *args, **kwargs) -> Cost:
    """One comparison per input element (``max.dim`` returns values and indices: same cost).

    ``max.other``/``min.other`` (``torch.max(a, b)``) are elementwise: one comparison per
    output element.
    """
    if args and isinstance(args[0], torch.Tensor):  # max.other(self, other)
        return Cost.of_flops(numel(out) if _counts(x, out) or is_float(args[0]) else 0)
    return Cost.of_flops(numel(x) if _counts(x, out) else 0)


@REGISTRY.register(aten.aminmax, "aten::_aminmax", missing_ok=True)
def aminmax(out, x, *args, **kwargs) -> Cost:
    """Two comparisons per input element (one against the min, one against the max)."""
    return Cost.of_flops(2 * numel(x) if _counts(x, out) else 0)


# -- moments ---------------------------------------------------------------------------
@REGISTRY.register(aten.var, aten.var_mean)
def var(out, x, *args, **kwargs) -> Cost:
    """mean (n + n_out), subtract, square, accumulate (3n), divide by N - correction (n_out)."""
    return Cost.of_flops(4 * numel(x) + 2 * _n_out(out) if _counts(x, out) else 0)


@REGISTRY.register(aten.std, aten.std_mean)
def std(out, x, *args, **kwargs) -> Cost:
    """``var`` plus a square root per output element."""
    return Cost.of_flops(4 * numel(x) + 3 * _n_out(out) if _counts(x, out) else 0)


# -- norms -----------------------------------------------------------------------------
def norm_cost(n: int, n_out: int, p) -> int:
    """FLOPs of a p-norm of ``n`` elements into ``n_out`` results.

    ========================  ==========================================  ===============
    p                         steps per element / per output              FLOPs
    ========================  ==========================================  ===============
    2 (default, ``'fro'``)    square, add / sqrt                          2n + n_out
    1                         abs, add                                    2n
    inf, -inf                 abs, compare                                2n
    0                         compare with 0, add                         2n
    other p                   abs, pow, add / pow(1/p)                    3n + n_out
    ========================  ==========================================  ===============
    """
    if p is None or p == "fro":
        p = 2
    p = float(p)
    if p == 2:
        return 2 * n + n_out
    if p in (0.0, 1.0) or math.isinf(p):
        return 2 * n
    return 3 * n + n_out


@REGISTRY.register(aten.linalg_vector_norm)
def linalg_vector_norm(out, x, *args, **kwargs) -> Cost:
    """``linalg_vector_norm(self, ord=2, dim=None, keepdim=False, *, dtype)``: :func:`norm_cost`.

    ``torch.norm``, ``Tensor.norm``, ``linalg.norm``/``matrix_norm('fro')`` and
    ``F.normalize`` reach dispatch as this op.
    """
    if not _counts(x, out):
        return Cost()
    return Cost.of_flops(norm_cost(numel(x), _n_out(out), arg(args, kwargs, 0, "ord", 2)))


@REGISTRY.register(aten.norm)
def norm(out, x, *args, **kwargs) -> Cost:
    """``norm(self, p=2, ...)`` overloads (``pairwise_distance`` still dispatches them)."""
    if not _counts(x, out):
        return Cost()
    return Cost.of_flops(norm_cost(numel(x), _n_out(out), arg(args, kwargs, 0, "p", 2)))


@REGISTRY.register(aten.frobenius_norm)
def frobenius_norm(out, x, *args, **kwargs) -> Cost:
    """A 2-norm over the given dims."""
    return Cost.of_flops(norm_cost(numel(x), _n_out(out), 2) if _counts(x, out) else 0)


@REGISTRY.register(aten.dist)
def dist(out, a, b, *args, **kwargs) -> Cost:
    """``‖a - b‖_p``: a subtract per (broadcast) element, then the p-norm."""
    if not (_counts(a, out) or is_float(b)):
        return Cost()
    n = prod(broadcast_shape(a.shape, b.shape))
    return Cost.of_flops(n + norm_cost(n, 1, arg(args, kwargs, 0, "p", 2)))


@REGISTRY.register(aten.renorm)
def renorm(out, x, p, dim, maxnorm, *args, **kwargs) -> Cost:
    """p-norm of each slice along ``dim``; per slice a compare with ``maxnorm`` and a scale
    factor (``maxnorm / (norm + eps)``: 2); then a multiply per element. Dense: counted as
    if every slice were rescaled (which slices are is value-dependent)."""
    if not _counts(x, out):
        return Cost()
    slices = x.shape[dim] if x.dim() else 1
    return Cost.of_flops(norm_cost(numel(x), slices, p) + 3 * slices + numel(x))


# -- log-sum-exp and scans -------------------------------------------------------------
@REGISTRY.register(aten.logsumexp, "aten::special_logsumexp", missing_ok=True)
def logsumexp(out, x, *args, **kwargs) -> Cost:
    """Stable form ``m + log(sum(exp(x - m)))``, m = max: 4 per element, 2 per output."""
    return Cost.of_flops(4 * numel(x) + 2 * _n_out(out) if _counts(x, out) else 0)


@REGISTRY.register(aten.cumsum, aten.cumsum_, aten.cumprod, aten.cumprod_, aten.cummax, aten.cummin,
                   "aten::_cummax_helper", "aten::_cummin_helper", missing_ok=True)
def scan(out, x, *args, **kwargs) -> Cost:
    """One add / multiply / comparison per element."""
    return Cost.of_flops(numel(x) if _counts(x, out) else 0)


@REGISTRY.register(aten.logcumsumexp, "aten::_logcumsumexp", missing_ok=True)
def logcumsumexp(out, x, *args, **kwargs) -> Cost:
    """Running ``log(exp(a) + exp(b))`` = ``max + log1p(exp(min - max))``: compare,
    subtract, exp, log1p, add = 5 per element."""
    return Cost.of_flops(5 * numel(x) if _counts(x, out) else 0)


# -- counting and tests ------------------------------------------------------------------
@REGISTRY.register(aten.count_nonzero)
def count_nonzero(out, x, *args, **kwargs) -> Cost:
    """A comparison with 0 per float element; the count itself is integer arithmetic."""
    return Cost.of_flops(numel(x) if is_float(x) else 0)


@REGISTRY.register(aten.any, aten.all)
def any_all(out, x, *args, **kwargs) -> Cost:
    """Free on bool/int (logical); on float input a comparison with 0 per element."""
    return Cost.of_flops(numel(x) if is_float(x) else 0)


@REGISTRY.register(aten.trace)
def trace(out, x, *args, **kwargs) -> Cost:
    """One add per diagonal element."""
    return Cost.of_flops(min(x.shape) if _counts(x, out) and x.dim() == 2 else 0)


@REGISTRY.register(aten.bincount)
def bincount(out, x, weights=None, *args, **kwargs) -> Cost:
    """Integer counting is free; with float ``weights``, one add per input element."""
    return Cost.of_flops(numel(x) if is_float(weights) else 0)


# -- scatter reductions (accumulating index writes) ---------------------------------------
def _indexed_numel(x, indices) -> int:
    """Elements addressed by ``x[indices]`` (advanced indexing), from shapes alone.

    A boolean mask counts as its full size (dense: the number of true entries is data).
    """
    idx_shapes = []
    rest = 1
    d = 0
    for ix in indices:
        if ix is None:
            rest *= x.shape[d]
            d += 1
        elif ix.dtype in (torch.bool, torch.uint8):
            idx_shapes.append((numel(ix),))
            d += ix.dim()
        else:
            idx_shapes.append(tuple(ix.shape))
            d += 1
    rest *= prod(x.shape[d:])
    try:
        return prod(broadcast_shape(*idx_shapes)) * rest
    except RuntimeError:  # dense mask sizes need not broadcast with integer indices
        return max(prod(s) for s in idx_shapes) * rest


def _accumulate(out, x, n) -> Cost:
    return Cost.of_flops(n if _counts(x, out) else 0)


@REGISTRY.register(
    aten.index_put, aten.index_put_, aten._index_put_impl_, "aten::_unsafe_index_put", missing_ok=True
)
def index_put(out, x, indices, values, accumulate=False, *args, **kwargs) -> Cost:
    """``x[indices] = values``: free; ``accumulate=True`` (``+=`` semantics): one add per
    indexed element."""
    if not accumulate:
        return Cost()
    return _accumulate(out, x, max(_indexed_numel(x, indices), numel(values)))


@REGISTRY.register("aten::_unsafe_masked_index_put_accumulate", missing_ok=True)
def masked_index_put_accumulate(out, x, mask, indices, values, *args, **kwargs) -> Cost:
    """Always accumulates: one add per indexed element."""
    return _accumulate(out, x, max(_indexed_numel(x, indices), numel(values)))


@REGISTRY.register(aten.put, aten.put_)
def put(out, x, index, source, accumulate=False, *args, **kwargs) -> Cost:
    """Free, or one add per index with ``accumulate=True``."""
    return _accumulate(out, x, numel(index)) if accumulate else Cost()


@REGISTRY.register(aten.scatter, aten.scatter_)
def scatter(out, x, dim, index, src, *args, reduce=None, **kwargs) -> Cost:
    """Free, or one add/multiply per index element with ``reduce='add'|'multiply'``."""
    return _accumulate(out, x, numel(index)) if reduce is not None else Cost()


@REGISTRY.register(aten.scatter_add, aten.scatter_add_)
def scatter_add(out, x, dim, index, src, *args, **kwargs) -> Cost:
    """One add per index element."""
    return _accumulate(out, x, numel(index))


def _mean_extra(x, reduce) -> int:
    # 'mean' divides each output element by its count (dense: every element of ``x``).
    return numel(x) if reduce == "mean" else 0


@REGISTRY.register(aten.scatter_reduce, aten.scatter_reduce_)
def scatter_reduce(out, x, dim, index, src, reduce, *args, **kwargs) -> Cost:
    """One add / multiply / comparison per index element; ``'mean'`` adds a divide per
    element of ``x``."""
    return _accumulate(out, x, numel(index) + _mean_extra(x, reduce))


@REGISTRY.register(aten.index_add, aten.index_add_)
def index_add(out, x, dim, index, source, *args, alpha=1, **kwargs) -> Cost:
    """One add per ``source`` element, and a multiply each when ``alpha != 1``."""
    n = numel(source) if source.dim() else numel(index)
    return _accumulate(out, x, n * (1 if alpha == 1 else 2))


@REGISTRY.register(aten.index_reduce, aten.index_reduce_)
def index_reduce(out, x, dim, index, source, reduce, *args, **kwargs) -> Cost:
    """One op per ``source`` element; ``'mean'`` adds a divide per element of ``x``."""
    return _accumulate(out, x, numel(source) + _mean_extra(x, reduce))


@REGISTRY.register(aten.col2im)
def col2im(out, x, *args, **kwargs) -> Cost:
    """``F.fold``: every column element is added into its (possibly overlapping) pixel."""
    return _accumulate(out, x, numel(x))


# -- backward kernels that accumulate gradients --------------------------------------------
@REGISTRY.register("aten::unfold_backward", missing_ok=True)
def unfold_backward(out, grad_in, input_sizes, dim, size, step, *args, **kwargs) -> Cost:
    """``Tensor.unfold``'s backward: every window element's gradient is added into the
    input position it came from (windows overlap when ``step < size``): one add per element
    of the incoming gradient, as ``col2im``."""
    return _accumulate(out, grad_in, numel(grad_in))


@REGISTRY.register(
    "aten::reflection_pad1d_backward", "aten::reflection_pad2d_backward", "aten::reflection_pad3d_backward",
    "aten::replication_pad1d_backward", "aten::replication_pad2d_backward", "aten::replication_pad3d_backward",
    missing_ok=True,
)
def pad_backward(out, grad_output, *args, **kwargs) -> Cost:
    """Reflection / replication padding's backward: each output gradient is added into the
    input element it copied (edges receive several): one add per ``grad_output`` element.
    (Constant padding's backward is a free slice.)"""
    return _accumulate(out, grad_output, numel(grad_output))


@REGISTRY.register("aten::index_select_backward", "aten::gather_backward", "aten::cummaxmin_backward",
                   missing_ok=True)
def accumulate_grad_backward(out, grad, *args, **kwargs) -> Cost:
    """Composite backward functions that scatter-add ``grad`` into zeros (``index_add`` /
    ``scatter_add``, as they decompose): one add per gradient element. Torch decomposes
    them before dispatch; named for modes that see composites."""
    return _accumulate(out, grad, numel(grad))


@REGISTRY.register("aten::_coalesce", missing_ok=True)
def coalesce(out, x, *args, **kwargs) -> Cost:
    """A sparse tensor's ``coalesce()`` (sparse gradients of ``nn.Embedding(sparse=True)``,
    in SparseAdam/Adagrad steps) sums the values of duplicate indices: one add per stored
    value element (dense: how many indices repeat is data)."""
    values = x._values() if x.layout == torch.sparse_coo else x
    return _accumulate(out, x, numel(values))


# -- multi-tensor reductions (gradient clipping, optimizers) -------------------------------
foreach_norm = REGISTRY.register("aten::_foreach_norm", missing_ok=True)(foreach(linalg_vector_norm))
foreach_max = REGISTRY.register("aten::_foreach_max", missing_ok=True)(foreach(extremum))


def _powsum(out, x, ord=2, *args, **kwargs) -> Cost:
    """``sum(|x|^ord)`` of one tensor: the p-norm without its root (the per-output step)."""
    if not _counts(x, out):
        return Cost()
    return Cost.of_flops(norm_cost(numel(x), 0, ord))


foreach_powsum = REGISTRY.register("aten::_foreach_powsum", missing_ok=True)(foreach(_powsum))
