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
are counted as 0 in :mod:`.zero_cost`: their comparison count depends on the algorithm.

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
>>> sum_(torch.ones(4), x, dim=[1])            # 4*8 adds
Stats(macs=0, flops=32)
>>> mean(torch.ones(4), x, dim=[1])            # 32 adds + 4 divides
Stats(macs=0, flops=36)
>>> var(torch.ones(4), x, dim=[1])             # 4*32 + 2*4
Stats(macs=0, flops=136)
>>> sum_(torch.ones(4, dtype=torch.long), x.long(), dim=[1])   # integer: free
Stats(macs=0, flops=0)
>>> from flopsight.formulas.reduction import unfold_backward
>>> unfold_backward(x, torch.ones(4, 3, 4), input_sizes=[4, 8], dim=1, size=4, step=2)   # 3 windows of 4: 48 adds
Stats(macs=0, flops=48)
"""

from __future__ import annotations

import math

import torch

from .elementwise import foreach
from .registry import REGISTRY, Cost, OpNames
from .shapes import broadcast_numel, broadcast_shape, first_tensor, is_float, numel, prod

__all__ = [
    "sum_", "nansum", "mean_flops", "mean", "nanmean", "prod_", "extremum", "aminmax", "var", "std",
    "norm", "linalg_vector_norm", "frobenius_norm", "dist", "renorm", "norm_cost",
    "logsumexp", "scan", "logcumsumexp", "count_nonzero", "any_all", "trace",
    "bincount", "index_put", "masked_index_put_accumulate", "put", "scatter",
    "scatter_add", "scatter_reduce", "index_add", "index_reduce", "col2im",
    "unfold_backward", "pad_backward", "coalesce", "accumulate_grad_backward",
    "foreach_norm", "foreach_max", "foreach_powsum",
]

aten = OpNames("aten")  # names: an op this torch lacks is skipped (registry.builtins_loading)

# Private kernels (``_aminmax``, ``_unsafe_index_put``...) vary across torch versions: they are
# named with ``missing_ok=True``.


def _counts(x, out) -> bool:
    """Float arithmetic happens if the input or the (first) result is floating point."""
    return is_float(x) or is_float(first_tensor(out))


def _n_out(out) -> int:
    return numel(first_tensor(out))


# -- accumulations ----------------------------------------------------------------------
@REGISTRY.register(aten.sum)
def sum_(out, self, **_) -> Cost:
    """One add per input element (``sum.int(int[] self)`` & co., Python lists: 0)."""
    return Cost.of_flops(numel(self) if _counts(self, out) else 0)


@REGISTRY.register(aten.nansum)
def nansum(out, self, **_) -> Cost:
    """A NaN test and an add per input element."""
    return Cost.of_flops(2 * numel(self) if _counts(self, out) else 0)


def mean_flops(n: int, n_out: int) -> int:
    """FLOPs of a mean of ``n`` elements into ``n_out`` results: an add per input element and
    a divide per output element. Shared with the formulas that must count what ``aten.mean``
    counts (adaptive average pooling, attention weights averaged over heads).

    >>> mean_flops(32, 4)
    36
    """
    return n + n_out


@REGISTRY.register(aten.mean)
def mean(out, self, **_) -> Cost:
    """An add per input element and a divide per output element."""
    return Cost.of_flops(mean_flops(numel(self), _n_out(out)) if _counts(self, out) else 0)


@REGISTRY.register(aten.nanmean)
def nanmean(out, self, **_) -> Cost:
    """Composite (``x != x``, ``nansum``, divide): 3 per element + a divide per output.

    Torch decomposes it before dispatch; this is for backends that keep it whole.
    """
    return Cost.of_flops(3 * numel(self) + _n_out(out) if _counts(self, out) else 0)


@REGISTRY.register(aten.prod)
def prod_(out, self, **_) -> Cost:
    """One multiply per input element."""
    return Cost.of_flops(numel(self) if _counts(self, out) else 0)


@REGISTRY.register(aten.amax, aten.amin, aten.max, aten.min, aten.argmax, aten.argmin)
def extremum(out, self, other=None, **_) -> Cost:
    """One comparison per input element (``max.dim`` returns values and indices: same cost).

    ``max.other``/``min.other`` (``torch.max(a, b)``) are elementwise: one comparison per
    output element.
    """
    if isinstance(other, torch.Tensor):  # max.other(self, other)
        return Cost.of_flops(numel(out) if _counts(self, out) or is_float(other) else 0)
    return Cost.of_flops(numel(self) if _counts(self, out) else 0)


@REGISTRY.register(aten.aminmax, "aten::_aminmax", missing_ok=True)
def aminmax(out, self, **_) -> Cost:
    """Two comparisons per input element (one against the min, one against the max)."""
    return Cost.of_flops(2 * numel(self) if _counts(self, out) else 0)


# -- moments ---------------------------------------------------------------------------
@REGISTRY.register(aten.var, aten.var_mean)
def var(out, self, **_) -> Cost:
    """mean (n + n_out), subtract, square, accumulate (3n), divide by N - correction (n_out)."""
    return Cost.of_flops(4 * numel(self) + 2 * _n_out(out) if _counts(self, out) else 0)


@REGISTRY.register(aten.std, aten.std_mean)
def std(out, self, **_) -> Cost:
    """``var`` plus a square root per output element."""
    return Cost.of_flops(4 * numel(self) + 3 * _n_out(out) if _counts(self, out) else 0)


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
def linalg_vector_norm(out, self, ord=2, **_) -> Cost:
    """:func:`norm_cost` of order ``ord``.

    ``torch.norm``, ``Tensor.norm``, ``linalg.norm``/``matrix_norm('fro')`` and
    ``F.normalize`` reach dispatch as this op.
    """
    if not _counts(self, out):
        return Cost()
    return Cost.of_flops(norm_cost(numel(self), _n_out(out), ord))


@REGISTRY.register(aten.norm)
def norm(out, self, p=2, **_) -> Cost:
    """``norm(self, p=2, ...)`` overloads (``pairwise_distance`` still dispatches them);
    ``p=None`` is the 2-norm."""
    if not _counts(self, out):
        return Cost()
    return Cost.of_flops(norm_cost(numel(self), _n_out(out), p))


@REGISTRY.register(aten.frobenius_norm)
def frobenius_norm(out, self, **_) -> Cost:
    """A 2-norm over the given dims."""
    return Cost.of_flops(norm_cost(numel(self), _n_out(out), 2) if _counts(self, out) else 0)


@REGISTRY.register(aten.dist)
def dist(out, self, other, p=2, **_) -> Cost:
    """``‖self - other‖_p``: a subtract per (broadcast) element, then the p-norm."""
    if not (_counts(self, out) or is_float(other)):
        return Cost()
    n = broadcast_numel(self.shape, other.shape)
    return Cost.of_flops(n + norm_cost(n, 1, p))


@REGISTRY.register(aten.renorm)
def renorm(out, self, p, dim, maxnorm, **_) -> Cost:
    """p-norm of each slice along ``dim``; per slice a compare with ``maxnorm`` and a scale
    factor (``maxnorm / (norm + eps)``: 2); then a multiply per element. Dense: counted as
    if every slice were rescaled (which slices are is value-dependent)."""
    if not _counts(self, out):
        return Cost()
    slices = self.shape[dim] if self.dim() else 1
    return Cost.of_flops(norm_cost(numel(self), slices, p) + 3 * slices + numel(self))


# -- log-sum-exp and scans -------------------------------------------------------------
@REGISTRY.register(aten.logsumexp, "aten::special_logsumexp", missing_ok=True)
def logsumexp(out, self, **_) -> Cost:
    """Stable form ``m + log(sum(exp(x - m)))``, m = max: 4 per element, 2 per output."""
    return Cost.of_flops(4 * numel(self) + 2 * _n_out(out) if _counts(self, out) else 0)


@REGISTRY.register(aten.cumsum, aten.cumsum_, aten.cumprod, aten.cumprod_, aten.cummax, aten.cummin,
                   "aten::_cummax_helper", "aten::_cummin_helper", missing_ok=True)
def scan(out, self, **_) -> Cost:
    """One add / multiply / comparison per element."""
    return Cost.of_flops(numel(self) if _counts(self, out) else 0)


@REGISTRY.register(aten.logcumsumexp, "aten::_logcumsumexp", missing_ok=True)
def logcumsumexp(out, self, **_) -> Cost:
    """Running ``log(exp(a) + exp(b))`` = ``max + log1p(exp(min - max))``: compare,
    subtract, exp, log1p, add = 5 per element."""
    return Cost.of_flops(5 * numel(self) if _counts(self, out) else 0)


# -- counting and tests ------------------------------------------------------------------
@REGISTRY.register(aten.count_nonzero)
def count_nonzero(out, self, **_) -> Cost:
    """A comparison with 0 per float element; the count itself is integer arithmetic."""
    return Cost.of_flops(numel(self) if is_float(self) else 0)


@REGISTRY.register(aten.any, aten.all)
def any_all(out, self, **_) -> Cost:
    """Free on bool/int (logical); on float input a comparison with 0 per element
    (``any.bool(bool[] self)`` & co., Python lists: 0)."""
    return Cost.of_flops(numel(self) if is_float(self) else 0)


@REGISTRY.register(aten.trace)
def trace(out, self, **_) -> Cost:
    """One add per diagonal element."""
    return Cost.of_flops(min(self.shape) if _counts(self, out) and self.dim() == 2 else 0)


@REGISTRY.register(aten.bincount)
def bincount(out, self, weights=None, **_) -> Cost:
    """Integer counting is free; with float ``weights``, one add per input element."""
    return Cost.of_flops(numel(self) if is_float(weights) else 0)


# -- scatter reductions (accumulating index writes) ---------------------------------------
def _is_mask(index) -> bool:
    return index.dtype in (torch.bool, torch.uint8)


def _indexed_numel(x, indices) -> int:
    """Elements addressed by ``x[indices]`` (advanced indexing), from shapes alone.

    A boolean mask selects as many elements as it has true entries, which are values; it is
    counted by its full size (dense), as if every entry were true -- unless that size cannot
    broadcast with the integer indices beside it. Then the number of true entries is known
    from shapes: torch broadcasts the mask's ``nonzero()`` with those indices, so it must be 1
    or their broadcast length, and either way the selection has exactly the integer indices'
    broadcast shape (``x[mask, idx]`` with ``idx`` of shape ``(3,)`` selects 3 elements
    whatever the mask's size). That is what shapes give on every device, meta included.
    Several masks that fit the integer indices count as the largest of them (dense).

    >>> x, idx = torch.zeros(4, 5), torch.tensor([0, 2, 4])
    >>> _indexed_numel(x, [torch.ones(4, dtype=torch.bool), idx])  # (3 true rows, 3 columns)
    3
    >>> _indexed_numel(x, [torch.ones(4, dtype=torch.bool)])  # whole rows, dense: 4 * 5
    20
    >>> _indexed_numel(x, [None, idx])  # x[:, idx]
    12
    """
    masks, index_shapes = [], []
    rest = 1
    d = 0
    for ix in indices:
        if ix is None:  # a full slice of this dimension
            rest *= x.shape[d]
            d += 1
        elif _is_mask(ix):
            masks.append(numel(ix))
            d += ix.dim()
        else:
            index_shapes.append(tuple(ix.shape))
            d += 1
    rest *= prod(x.shape[d:])
    shape = broadcast_shape(*index_shapes)
    if shape is None:  # torch would have refused the call; count the largest index
        return max(prod(s) for s in index_shapes) * rest
    # A mask that does not fit the integer indices leaves their shape exact; the others count
    # their full size (dense), as the largest of them (the broadcast grows with the mask).
    dense = [b for m in masks if (b := broadcast_shape(shape, (m,))) is not None]
    return prod(max(dense, key=prod) if dense else shape) * rest


def _accumulate(out, x, n) -> Cost:
    return Cost.of_flops(n if _counts(x, out) else 0)


@REGISTRY.register(
    aten.index_put, aten.index_put_, aten._index_put_impl_, "aten::_unsafe_index_put", missing_ok=True
)
def index_put(out, self, indices, values, accumulate=False, **_) -> Cost:
    """``self[indices] = values``: free; ``accumulate=True`` (``+=`` semantics): one add per
    indexed element (:func:`_indexed_numel`; ``values`` broadcasts to them)."""
    if not accumulate:
        return Cost()
    return _accumulate(out, self, max(_indexed_numel(self, indices), numel(values)))


@REGISTRY.register("aten::_unsafe_masked_index_put_accumulate", missing_ok=True)
def masked_index_put_accumulate(out, self, mask, indices, values, **_) -> Cost:
    """Always accumulates: one add per indexed element."""
    return _accumulate(out, self, max(_indexed_numel(self, indices), numel(values)))


@REGISTRY.register(aten.put, aten.put_)
def put(out, self, index, source, accumulate=False, **_) -> Cost:
    """Free, or one add per index with ``accumulate=True``."""
    return _accumulate(out, self, numel(index)) if accumulate else Cost()


@REGISTRY.register(aten.scatter, aten.scatter_)
def scatter(out, self, dim, index, *, reduce=None, **_) -> Cost:
    """Free, or one add/multiply per index element with ``reduce='add'|'multiply'`` (from a
    ``src`` tensor or a scalar ``value``)."""
    return _accumulate(out, self, numel(index)) if reduce is not None else Cost()


@REGISTRY.register(aten.scatter_add, aten.scatter_add_)
def scatter_add(out, self, dim, index, src, **_) -> Cost:
    """One add per index element."""
    return _accumulate(out, self, numel(index))


def _mean_extra(x, reduce) -> int:
    # 'mean' divides each output element by its count (dense: every element of ``x``).
    return numel(x) if reduce == "mean" else 0


@REGISTRY.register(aten.scatter_reduce, aten.scatter_reduce_)
def scatter_reduce(out, self, dim, index, src, reduce, **_) -> Cost:
    """One add / multiply / comparison per index element; ``'mean'`` adds a divide per
    element of ``self``."""
    return _accumulate(out, self, numel(index) + _mean_extra(self, reduce))


@REGISTRY.register(aten.index_add, aten.index_add_)
def index_add(out, self, dim, index, source, *, alpha=1, **_) -> Cost:
    """One add per ``source`` element, and a multiply each when ``alpha != 1``."""
    n = numel(source) if source.dim() else numel(index)
    return _accumulate(out, self, n * (1 if alpha == 1 else 2))


@REGISTRY.register(aten.index_reduce, aten.index_reduce_)
def index_reduce(out, self, dim, index, source, reduce, **_) -> Cost:
    """One op per ``source`` element; ``'mean'`` adds a divide per element of ``self``."""
    return _accumulate(out, self, numel(source) + _mean_extra(self, reduce))


@REGISTRY.register(aten.col2im)
def col2im(out, self, **_) -> Cost:
    """``F.fold``: every column element is added into its (possibly overlapping) pixel."""
    return _accumulate(out, self, numel(self))


# -- backward kernels that accumulate gradients --------------------------------------------
@REGISTRY.register("aten::unfold_backward", missing_ok=True)
def unfold_backward(out, grad_in, **_) -> Cost:
    """``Tensor.unfold``'s backward: every window element's gradient is added into the
    input position it came from (windows overlap when ``step < size``): one add per element
    of the incoming gradient, as ``col2im``."""
    return _accumulate(out, grad_in, numel(grad_in))


@REGISTRY.register(
    "aten::reflection_pad1d_backward", "aten::reflection_pad2d_backward", "aten::reflection_pad3d_backward",
    "aten::replication_pad1d_backward", "aten::replication_pad2d_backward", "aten::replication_pad3d_backward",
    missing_ok=True,
)
def pad_backward(out, grad_output, **_) -> Cost:
    """Reflection / replication padding's backward: each output gradient is added into the
    input element it copied (edges receive several): one add per ``grad_output`` element.
    (Constant padding's backward is a free slice.)"""
    return _accumulate(out, grad_output, numel(grad_output))


@REGISTRY.register("aten::index_select_backward", "aten::gather_backward", "aten::cummaxmin_backward",
                   missing_ok=True)
def accumulate_grad_backward(out, grad, **_) -> Cost:
    """Composite backward functions that scatter-add ``grad`` into zeros (``index_add`` /
    ``scatter_add``, as they decompose): one add per gradient element. Torch decomposes
    them before dispatch; named for modes that see composites."""
    return _accumulate(out, grad, numel(grad))


@REGISTRY.register("aten::_coalesce", missing_ok=True)
def coalesce(out, self, **_) -> Cost:
    """A sparse tensor's ``coalesce()`` (sparse gradients of ``nn.Embedding(sparse=True)``,
    in SparseAdam/Adagrad steps) sums the values of duplicate indices: one add per stored
    value element (dense: how many indices repeat is data)."""
    values = self._values() if self.layout == torch.sparse_coo else self
    return _accumulate(out, self, numel(values))


# -- multi-tensor reductions (gradient clipping, optimizers) -------------------------------
foreach_norm = REGISTRY.register("aten::_foreach_norm", missing_ok=True)(foreach(linalg_vector_norm))
foreach_max = REGISTRY.register("aten::_foreach_max", missing_ok=True)(foreach(extremum))


def _powsum(out, self, ord=2, **_) -> Cost:
    """``sum(|x|^ord)`` of one tensor: the p-norm without its root (the per-output step)."""
    if not _counts(self, out):
        return Cost()
    return Cost.of_flops(norm_cost(numel(self), 0, ord))


foreach_powsum = REGISTRY.register("aten::_foreach_powsum", missing_ok=True)(foreach(_powsum))
