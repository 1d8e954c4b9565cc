"""Aggregation: modules grouped by type at each depth, ranked (the "aggregated profile").

>>> import torch, flopsight
>>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
>>> result = flopsight.profile(model, torch.ones(1, 4), warm_up=0)
>>> [(d.depth, d.macs) for d in by_depth_and_type(result, top=1)]
[(0, [('Sequential', 24)]), (1, [('Linear', 24)])]
"""

from __future__ import annotations

from dataclasses import dataclass

from ..result import ProfileResult

__all__ = ["DepthSummary", "by_depth_and_type", "max_depth"]


@dataclass
class DepthSummary:
    """The top module types at one depth, by params, MACs and latency (largest first)."""

    depth: int
    params: list[tuple[str, int]]
    macs: list[tuple[str, int]]
    latency: list[tuple[str, float]]


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
    if isinstance(top, bool) or not isinstance(top, int) or top < 0:
        raise ValueError(f"top: expected an int >= 0, got {top!r}")
    deepest = max_depth(result)
    last = deepest if depth < 0 or depth > deepest else depth
    per_depth: list[dict[str, list]] = [{} for _ in range(last + 1)]
    for stats in result.walk(last):
        cost = stats.inclusive[phase]
        acc = per_depth[stats.depth].setdefault(stats.type_name, [0, 0, 0.0])
        acc[0] += stats.params
        acc[1] += cost.macs
        acc[2] += cost.latency
    return [
        DepthSummary(d, _top(totals, 0, top), _top(totals, 1, top), _top(totals, 2, top))
        for d, totals in enumerate(per_depth)
    ]
