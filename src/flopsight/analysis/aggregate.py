"""Aggregation: modules grouped by type at each depth, ranked (the "aggregated profile"),
and operators per module (the operator tables).

>>> import torch, flopsight
>>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
>>> result = flopsight.profile(model, torch.ones(1, 4), warm_up=0)
>>> [(d.depth, d.macs) for d in by_depth_and_type(result, top=1)]
[(0, [('Sequential', 24)]), (1, [('Linear', 24)])]
>>> [(r.name, r.stats.macs, r.bytes) for r in model_ops(result)]   # the whole model's operators
[('aten.addmm', 24, 176), ('aten.t', 0, 0)]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .._checks import check_int
from ..result.iteration import COLLECTIVE_NAMESPACES
from ..result.profile_result import ProfileResult
from ..result.stats import Stats, make_stats

__all__ = ["DepthSummary", "by_depth_and_type", "max_depth", "OpRow", "inclusive_ops", "has_bytes", "merge_ops",
           "model_ops", "top_ops"]


@dataclass(frozen=True)
class DepthSummary:
    """The top module types at one depth, by params, MACs and latency (largest first)."""

    depth: int
    params: list[tuple[str, int]]
    macs: list[tuple[str, int]]
    latency: list[tuple[str, float]]
    #: per type listed by params, how many of its summed params are shared with (also held by)
    #: modules outside the one holding them: tied weights, summed once per holder (0: none)
    params_shared: dict[str, int] = field(default_factory=dict)


def max_depth(result: ProfileResult) -> int:
    """Depth of the deepest module (0 for a model without submodules)."""
    return max(s.depth for s in result.walk())


def _top(totals: dict[str, list], index: int, top: int) -> list:
    # sorted() is stable: equal values keep the order in which types first appear
    ranked = sorted(totals.items(), key=lambda item: item[1][index], reverse=True)
    return [(name, values[index]) for name, values in ranked[:top]]


def by_depth_and_type(
    result: ProfileResult, *, depth: int = -1, top: int = 1, phase: str = "forward"
) -> list[DepthSummary]:
    """Per depth (0 .. ``depth``, all when -1 or larger than the model), the ``top``
    module types by summed params, inclusive MACs and inclusive latency of ``phase``
    (``top=0`` lists none, as in DeepSpeed)."""
    check_int(top, "top", low=0)
    deepest = max_depth(result)
    last = deepest if depth < 0 or depth > deepest else depth
    per_depth: list[dict[str, list]] = [{} for _ in range(last + 1)]
    for stats in result.walk(last):
        cost = stats.inclusive[phase]
        acc = per_depth[stats.depth].setdefault(stats.type_name, [0, 0, 0.0, 0])
        acc[0] += stats.params
        acc[1] += cost.macs
        acc[2] += cost.latency
        acc[3] += stats.params_shared
    return [_depth_summary(d, totals, top) for d, totals in enumerate(per_depth)]


def _depth_summary(depth: int, totals: dict[str, list], top: int) -> DepthSummary:
    params = _top(totals, 0, top)
    return DepthSummary(depth, params, _top(totals, 1, top), _top(totals, 2, top),
                        {name: totals[name][3] for name, _ in params if totals[name][3]})


# -- operators ------------------------------------------------------------------------------
@dataclass(frozen=True)
class OpRow:
    """One operator's figures in one phase: its summed cost (MACs, FLOPs, latency, calls),
    the bytes it read and wrote (None when the result holds no bytes at all: saved before
    flopsight captured them) and its kernels' device seconds (None unless ``kernels=True``)."""

    name: str
    stats: Stats
    bytes: int | None
    kernel_time: float | None = None


#: op name -> [macs, flops, latency, calls, bytes, device seconds]: what the tallies are summed in
_Tally = dict[str, list]


def has_bytes(result: ProfileResult) -> bool:
    """True when the result captured bytes moved (every result since schema version 3 that
    ran an op)."""
    return any(rec.bytes_moved for rec in result.modules.values())


def inclusive_bytes(result: ProfileResult) -> dict[str, dict[str, int]]:
    """Module path -> phase -> bytes moved by the module and its submodules (one post-order
    pass; a phase in which nothing moved is absent).

    >>> import torch, flopsight
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 8))   # addmm: (8 + 4 + 32 + 8) * 4 bytes
    >>> inclusive_bytes(flopsight.profile(model, torch.ones(1, 4), warm_up=0))[""]
    {'forward': 208}
    """
    inclusive: dict[str, dict[str, int]] = {}
    for node in reversed(list(result.walk())):  # post-order: children first
        acc = {phase: sum(ops.values()) for phase, ops in node.record.bytes_moved.items()}
        for child in node.children:
            for phase, b in inclusive[child].items():
                acc[phase] = acc.get(phase, 0) + b
        inclusive[node.name] = acc
    return inclusive


def inclusive_op_time(result: ProfileResult) -> dict[str, dict[str, float]]:
    """Module path -> phase -> seconds inside the ops of the module and its submodules,
    collectives left out: a module's time less this is its hooks, the framework's code and
    Python between its ops, and the collectives it waited for (docs/conventions/timing.md).

    >>> import torch, flopsight
    >>> r = flopsight.profile(torch.nn.Linear(4, 2), torch.ones(1, 4), clock=flopsight.FakeClock(), warm_up=0)
    >>> t = inclusive_op_time(r)[""]["forward"]
    >>> 0 < t <= r.total.forward.latency
    True
    """
    inclusive: dict[str, dict[str, float]] = {}
    for node in reversed(list(result.walk())):  # post-order: children first
        acc = {phase: sum(s.latency for name, s in ops.items() if not name.startswith(COLLECTIVE_NAMESPACES))
               for phase, ops in node.record.ops.items()}
        for child in node.children:
            for phase, t in inclusive[child].items():
                acc[phase] = acc.get(phase, 0.0) + t
        inclusive[node.name] = acc
    return inclusive


def _own(rec, phase: str) -> _Tally:
    moved = rec.bytes_moved.get(phase, {})
    device = rec.op_kernel_time.get(phase, {})
    return {name: [s.macs, s.flops, s.latency, s.calls, moved.get(name, 0), device.get(name, 0.0)]
            for name, s in rec.ops.get(phase, {}).items()}


def _add(into: _Tally, tally: Mapping[str, list]) -> None:
    for name, t in tally.items():
        acc = into.get(name)
        if acc is None:
            into[name] = list(t)
        else:
            for i in range(6):
                acc[i] += t[i]


def inclusive_ops(result: ProfileResult, phase: str = "forward") -> dict[str, _Tally]:
    """Module path -> its operators in ``phase``, its submodules' summed in (op name ->
    ``[macs, flops, latency, calls, bytes, device seconds]``). One post-order pass: linear in the number of
    modules times the number of distinct operators.

    >>> import torch, flopsight
    >>> model = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()))
    >>> ops = inclusive_ops(flopsight.profile(model, torch.ones(1, 4), warm_up=0))
    >>> {"aten.addmm", "aten.relu", "aten.t"} <= set(ops[""]), ops[""]["aten.addmm"][:2]
    (True, [16, 36])
    """
    tallies: dict[str, _Tally] = {}
    for node in reversed(list(result.walk())):  # post-order: children first
        acc = _own(node.record, phase)
        for child in node.children:
            _add(acc, tallies[child])
        tallies[node.name] = acc
    return tallies


def merge_ops(tallies: Iterable[Mapping[str, list]], with_bytes: bool = True,
              with_device: bool = False) -> list[OpRow]:
    """Several modules' tallies (from :func:`inclusive_ops`) summed into rows, most FLOPs
    first (then most time, then by name: the order of ``ProfileResult.ops``)."""
    acc: _Tally = {}
    for tally in tallies:
        _add(acc, tally)
    rows = [OpRow(name, make_stats(t[0], t[1], t[2], t[3]), t[4] if with_bytes else None,
                  t[5] if with_device else None) for name, t in acc.items()]
    return sorted(rows, key=lambda r: (-r.stats.flops, -r.stats.latency, r.name))


def model_ops(result: ProfileResult, phase: str = "forward") -> list[OpRow]:
    """The whole model's operators in ``phase`` (``result.ops(phase)``) with their bytes
    (and device seconds, where kernels were recorded)."""
    moved: dict[str, int] = {}
    device: dict[str, float] = {}
    for rec in result.modules.values():
        for name, b in rec.bytes_moved.get(phase, {}).items():
            moved[name] = moved.get(name, 0) + b
        for name, t in rec.op_kernel_time.get(phase, {}).items():
            device[name] = device.get(name, 0.0) + t
    with_bytes, with_device = has_bytes(result), result.kernels is not None
    return [OpRow(name, s, moved.get(name, 0) if with_bytes else None, device.get(name, 0.0) if with_device else None)
            for name, s in result.ops(phase).items()]


def top_ops(rows: list[OpRow], n: int, by: str = "flops") -> list[OpRow]:
    """The ``n`` rows with the most ``by`` (``"flops"`` or ``"latency"``); rows with none of
    it are left out (an op that did no arithmetic is not a top op by FLOPs).

    >>> rows = [OpRow("a", Stats(flops=5, latency=1.0), 0), OpRow("b", Stats(latency=3.0), 0)]
    >>> [r.name for r in top_ops(rows, 2)], [r.name for r in top_ops(rows, 2, by="latency")]
    (['a'], ['b', 'a'])
    """
    if by not in ("flops", "latency"):
        raise ValueError(f"by: expected 'flops' or 'latency', got {by!r}")
    ranked = sorted((r for r in rows if getattr(r.stats, by) > 0), key=lambda r: (-getattr(r.stats, by), r.name))
    return ranked[:n]
