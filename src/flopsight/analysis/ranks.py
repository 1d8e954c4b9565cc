"""Figures over the ranks of a torch.distributed run: spread, slowest rank, missing and failed ranks.

>>> from flopsight.analysis.ranks import spread
>>> spread([0.1, 0.3, 0.2])
Spread(min=0.1, mean=0.19999999999999998, max=0.3, slowest=1)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

from ..result.profile_result import ProfileResult

__all__ = ["Spread", "RankFigures", "ModuleSpread", "spread", "rank_figures"]


class Spread(NamedTuple):
    """Min, mean and max of one figure over the ranks that reported, and the rank of the max."""

    min: float
    mean: float
    max: float
    slowest: int


def spread(values: list[float | None]) -> Spread | None:
    """Over the entries that are not None (index = rank); None when there are none."""
    present = [(v, r) for r, v in enumerate(values) if v is not None]
    if not present:
        return None
    worst, slowest = max(present)
    # an exact sum: Python 3.12 changed the built-in sum of floats in its last bits
    return Spread(min(v for v, _ in present), math.fsum(v for v, _ in present) / len(present), worst, slowest)


@dataclass(frozen=True)
class ModuleSpread:
    path: str
    type_name: str
    phase: str
    latency: Spread


@dataclass(frozen=True)
class RankFigures:
    """``world`` ranks; those ``missing`` (no result in time), ``failed`` (rank -> what raised,
    where) and ``not_profiling``; over the ranks that completed their profile (``healthy``),
    the iteration's wall time, how far the slowest one is above the mean (percent), and per
    module (down to ``depth``) and phase the latency. With fewer than two healthy ranks there
    is nothing to compare: no iteration spread, no straggler, no modules."""

    world: int
    missing: list[int]
    iteration: Spread | None
    straggler_excess: float
    modules: list[ModuleSpread]
    failed: dict[int, str] = field(default_factory=dict)
    not_profiling: list[int] = field(default_factory=list)

    @property
    def healthy(self) -> int:
        return self.world - len(self.missing) - len(self.failed) - len(self.not_profiling)


def rank_figures(result: ProfileResult, depth: int | None = 1) -> RankFigures | None:
    """None outside a gathered torch.distributed result; module spreads down to ``depth`` (None: all)."""
    ranks = result.ranks
    if not ranks:
        return None
    notes = result.rank_notes
    failed: dict[int, str] = {}
    for i, r in enumerate(ranks):  # noted by the gather, or a result that says its span raised
        note = notes.get(i, "")
        if note.startswith("failed: "):
            failed[i] = note.removeprefix("failed: ")
        elif r is not None and r.metadata.error:
            failed[i] = r.metadata.error
    not_profiling = sorted(i for i, note in notes.items() if note == "not profiling")
    # a rank whose profiled call raised is no measure of the others: left out of the spreads
    healthy = [r if i not in failed and i not in notes else None for i, r in enumerate(ranks)]
    iteration, excess, modules = None, 0.0, []
    if sum(r is not None for r in healthy) >= 2:
        iteration = spread([r.iteration.latency if r is not None else None for r in healthy])  # not None: 2 ranks
        if iteration is not None and iteration.mean:
            excess = 100 * (iteration.max - iteration.mean) / iteration.mean
        for node in result.walk(depth):
            for phase in ("forward", "backward"):
                s = spread([r.module(node.name).inclusive[phase].latency if r is not None and node.name in r.modules
                            else None for r in healthy])
                if s is not None and s.max > 0:
                    modules.append(ModuleSpread(node.name, node.type_name, phase, s))
    return RankFigures(len(ranks), result.missing_ranks, iteration, excess, modules, failed, not_profiling)
