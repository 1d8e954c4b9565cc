"""The figures of a result's short forms: the one-line headline (``repr(result)``) and the
one-screen per-layer table (``result.summary()``). Pure functions, no formatting: the table
and the line are worded by :mod:`flopsight.renderers.summary_table`.

Every row of the table is one entry of the module tree down to a depth; with ``collapse``
(the default) a run of identical siblings is one row, ``encoder.layer.(0-11)``, and every
row's figures are the sum over all the modules it stands for (``count`` of them), so a row
inside a collapsed run (``encoder.layer.(0-11).attention``) sums its 12 copies too.

>>> import torch, flopsight
>>> model = torch.nn.Sequential(*(torch.nn.Linear(4, 4) for _ in range(3)), torch.nn.Linear(4, 2))
>>> result = flopsight.profile(model, torch.ones(1, 4), clock=flopsight.FakeClock())
>>> table = summary_figures(result, depth=1)
>>> [(r.path, r.count, r.macs) for r in table.rows]   # 3 x 16 MACs, then 4 x 2
[('', 1, 56), ('(0-2)', 3, 48), ('3', 1, 8)]
>>> headline(result).macs
56
"""

from __future__ import annotations

from dataclasses import dataclass

from .._checks import check_bool, check_choice, check_int
from ..result.profile_result import Coverage, ProfileResult
from ..result.stats import Stats
from .collapse import View, walk_views
from .report_figures import is_training, share

__all__ = ["SORT_KEYS", "MAX_ROWS", "Headline", "SummaryRow", "SummaryTable", "headline", "summary_figures"]

#: what ``sort`` may name: the rows' figure to rank them by, largest first
SORT_KEYS = ("flops", "macs", "params", "latency")
#: rows of the table by default: one screen
MAX_ROWS = 40


@dataclass(frozen=True)
class Headline:
    """A result in one line: ``model`` (its class), ``params``, and the MACs, FLOPs and
    latency of ``scope``: ``"forward"`` (one call of the model), ``"training iteration"``
    (every phase of the profiled span, its wall time) or ``"generate()"`` (the whole call).
    ``latency`` is None on the meta device (nothing ran on hardware); ``samples``: how many
    timed steps or passes its latency is the median of."""

    model: str
    params: int
    scope: str
    macs: int
    flops: int
    latency: float | None
    samples: int
    coverage: Coverage
    ranks: int
    error: str | None


@dataclass(frozen=True)
class SummaryRow:
    """One row: the module(s) at ``path`` (``count`` of them when a run of identical
    siblings collapsed, their figures summed), ``depth`` deep, named ``key`` under its
    parent. ``latency`` and ``bwd_latency`` are None on the meta device; the ``bwd_``
    figures are 0 unless a backward was measured. ``ran``: any of them was called.
    ``params_shared``: of ``params``, those tied to (held by) modules outside them too
    (each module holding a tied weight counts it; the model's total counts it once)."""

    path: str
    key: str
    type_name: str
    count: int
    depth: int
    params: int
    macs: int
    flops: int
    latency: float | None
    flops_share: float
    bwd_flops: int
    bwd_latency: float | None
    ran: bool
    ignored: bool
    params_shared: int = 0


@dataclass(frozen=True)
class SummaryTable:
    """The table ``result.summary()`` shows: its :class:`Headline`, its ``rows`` (the root
    first), and how they were chosen: ``depth`` (the deepest shown), ``sort`` (None: tree
    order), ``collapse``; ``left_out``: rows past ``max_rows``; ``deeper``: whether modules
    deeper than ``depth`` exist; ``training``: backward columns apply; ``meta``: profiled on
    the meta device (latencies n/a)."""

    headline: Headline
    rows: tuple[SummaryRow, ...]
    depth: int
    sort: str | None
    collapse: bool
    max_rows: int
    left_out: int
    deeper: bool
    training: bool
    meta: bool


def _on_meta(result: ProfileResult) -> bool:
    return result.metadata.device_type == "meta"


def headline(result: ProfileResult) -> Headline:
    """The figures of ``repr(result)``."""
    total = result.total
    samples = result.samples.count if result.samples is not None else 1
    generation = result.generation
    if is_training(result):
        it = result.iteration
        scope, stats = "training iteration", Stats(it.macs, it.flops, it.latency)
    elif generation is not None:
        scope, stats = "generate()", generation.total
    else:
        scope, stats = "forward", total.forward
    latency = None if _on_meta(result) else stats.latency
    model = result.metadata.model or total.type_name
    return Headline(model, total.params, scope, stats.macs, stats.flops, latency, samples, result.coverage,
                    len(result.ranks), result.metadata.error)


def _row(view: View, whole: Stats, meta: bool) -> SummaryRow:
    nodes = view.nodes
    fwd = [n.forward for n in nodes]
    bwd = [n.backward for n in nodes]
    flops = sum(s.flops for s in fwd)
    node = view.node
    return SummaryRow(
        path=view.path, key=view.key, type_name=node.type_name, count=len(nodes), depth=view.depth,
        params=sum(n.params for n in nodes), macs=sum(s.macs for s in fwd), flops=flops,
        latency=None if meta else sum(s.latency for s in fwd), flops_share=share(flops, whole.flops),
        bwd_flops=sum(s.flops for s in bwd), bwd_latency=None if meta else sum(s.latency for s in bwd),
        ran=any(n.ran for n in nodes), ignored=any(n.ignored for n in nodes),
        params_shared=sum(n.params_shared for n in nodes),
    )


def _auto_depth(result: ProfileResult, max_rows: int, collapse: bool, deepest: int) -> int:
    """The deepest depth whose tree fits in ``max_rows`` rows (at least 1: the model's parts)."""
    counts = [0] * (deepest + 1)
    for view in walk_views(result, collapse=collapse):
        counts[view.depth] += 1
    rows = 0
    for depth, n in enumerate(counts):
        rows += n
        if rows > max_rows:
            return max(depth - 1, min(1, deepest))
    return deepest


def summary_figures(result: ProfileResult, depth: int | None = None, *, max_rows: int = MAX_ROWS,
                    sort: str | None = None, collapse: bool = True) -> SummaryTable:
    """The rows of ``result.summary()``: the module tree down to ``depth`` (the root is 0;
    None: the deepest that fits in ``max_rows``, or every depth when sorting), at most
    ``max_rows`` of them; ``sort`` (one of :data:`SORT_KEYS`) ranks the modules below the
    root by that figure instead of tree order; ``collapse`` shows identical repeated
    siblings as one row."""
    check_int(depth, "depth", low=0, optional=True, what="the deepest module depth shown; the root is 0")
    check_int(max_rows, "max_rows", low=1, what="rows of the table")
    check_choice(sort, "sort", (None, *SORT_KEYS))
    check_bool(collapse, "collapse")
    deepest = max(node.depth for node in result.walk())
    if depth is None:
        depth = deepest if sort is not None else _auto_depth(result, max_rows, collapse, deepest)
    shown = min(depth, deepest)
    meta = _on_meta(result)
    whole = result.total.forward
    rows = [_row(v, whole, meta) for v in walk_views(result, collapse=collapse, max_depth=shown)]
    if sort is not None:
        def key(r: SummaryRow) -> float:
            value = getattr(r, sort)
            return value if value is not None else 0.0

        rows = rows[:1] + sorted(rows[1:], key=lambda r: -key(r))  # stable: ties keep tree order
    left_out = max(len(rows) - max_rows, 0)
    return SummaryTable(headline(result), tuple(rows[:max_rows]), shown, sort, collapse, max_rows, left_out,
                        deeper=deepest > shown, training=is_training(result), meta=meta)
