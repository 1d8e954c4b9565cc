"""Figures over the ranks of a torch.distributed run: spread, the straggler by busy time,
missing and failed ranks.

Ranks that wait for each other end their steps together, so their step times cannot tell
which one the others waited for: what each rank did before it waited can. A rank's busy
time is its step's wall time less the communication it waited for (its compute, framework,
data and the profiler's own time); the straggler is the busiest rank, and its excess is its
busy time over the other ranks' median.

>>> from flopsight.analysis.ranks import spread, straggler, RankBusy
>>> spread([0.1, 0.3, 0.2])
Spread(min=0.1, mean=0.19999999999999998, max=0.3, slowest=1)
>>> s = straggler([RankBusy(0, step=0.060, waited=0.052), RankBusy(1, step=0.060, waited=0.001)])
>>> s.rank, round(s.excess, 6), round(s.share, 1)  # rank 1 slept 50 ms: 59 ms busy against 8 ms
(1, 0.051, 85.0)
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..result.profile_result import ProfileResult

__all__ = ["Spread", "RankFigures", "ModuleSpread", "RankBusy", "Straggler", "spread", "rank_busy", "straggler",
           "rank_figures"]


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
class RankBusy:
    """One rank's step: its wall time and the communication it waited for in it (exposed);
    ``busy``, the rest: what the rank itself did."""

    rank: int
    step: float
    waited: float

    @property
    def busy(self) -> float:
        return self.step - self.waited

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "step": self.step, "busy": self.busy, "waited": self.waited}


def rank_busy(rank: int, result: ProfileResult) -> RankBusy:
    """``result``'s step (its anatomy's: the counted step's, or the median of several; without
    an anatomy, the iteration's) and the communication it waited for."""
    it = result.iteration
    if it.anatomy is not None:
        return RankBusy(rank, it.anatomy.total, it.anatomy.communication)
    return RankBusy(rank, it.latency, min(it.communication.exposed, it.latency))


@dataclass(frozen=True)
class Straggler:
    """The rank the others waited for: the busiest, ``busy`` seconds against the other ranks'
    median ``others``; ``excess`` is the difference, ``share`` its percent of the rank's step."""

    rank: int
    busy: float
    others: float
    step: float

    @property
    def excess(self) -> float:
        return self.busy - self.others

    @property
    def share(self) -> float:
        return 100 * self.excess / self.step if self.step > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "busy": self.busy, "others": self.others, "step": self.step,
                "excess": self.excess, "share": self.share}


def straggler(ranks: list[RankBusy]) -> Straggler | None:
    """The busiest of ``ranks`` (the lowest rank of a tie) against the others; None for fewer
    than two."""
    if len(ranks) < 2:
        return None
    worst = max(ranks, key=lambda b: (b.busy, -b.rank))
    others = statistics.median(b.busy for b in ranks if b is not worst)
    return Straggler(worst.rank, worst.busy, others, worst.step)


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
    the iteration's wall time, each one's step and busy time (``busy``, by rank), the
    ``straggler`` by busy time, and per module (down to ``depth``) and phase the latency. With
    fewer than two healthy ranks there is nothing to compare: no iteration spread, no
    straggler, no modules."""

    world: int
    missing: list[int]
    iteration: Spread | None
    modules: list[ModuleSpread]
    failed: dict[int, str] = field(default_factory=dict)
    not_profiling: list[int] = field(default_factory=list)
    busy: list[RankBusy] = field(default_factory=list)
    straggler: Straggler | None = None

    @property
    def healthy(self) -> int:
        return self.world - len(self.missing) - len(self.failed) - len(self.not_profiling)


def _every_rank_s_modules(result: ProfileResult, ranks: list, depth: int | None) -> list:
    """The modules of ``result`` down to ``depth``, then those only other ``ranks`` hold (a
    pipeline stage's are its own), each path once."""
    nodes = list(result.walk(depth))
    seen = {node.name for node in nodes}
    for r in ranks:
        for node in r.walk(depth) if r is not None else ():
            if node.name not in seen:
                seen.add(node.name)
                nodes.append(node)
    return nodes


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
    iteration, modules, busy = None, [], []
    if sum(r is not None for r in healthy) >= 2:
        iteration = spread([r.iteration.latency if r is not None else None for r in healthy])  # not None: 2 ranks
        busy = [rank_busy(i, r) for i, r in enumerate(healthy) if r is not None]
        for node in _every_rank_s_modules(result, healthy, depth):
            for phase in ("forward", "backward"):
                s = spread([r.module(node.name).inclusive[phase].latency if r is not None and node.name in r.modules
                            else None for r in healthy])
                if s is not None and s.max > 0:
                    modules.append(ModuleSpread(node.name, node.type_name, phase, s))
    return RankFigures(len(ranks), result.missing_ranks, iteration, modules, failed, not_profiling, busy,
                       straggler(busy))
