"""One job, many ranks: rank 0's gathered result as the job's view. A row per rank with its
place in the job (its mesh coordinates: dp, tp, pp, ep), the FLOPs it did in the step and its
step; the job's FLOPs as the sum over the ranks, and of them the work the parallel plan adds
(:mod:`.added_work`: redistributions, and the copies of the modules every model-parallel rank
runs whole), their rate over the slowest rank's step, and the job's MFU against every rank's
device peak.

>>> JobFigures((), 0, 0.0, None, None, "no peak").flops_per_second
0.0
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..result.profile_result import ProfileResult
from .added_work import added_work, group_size
from .efficiency import efficiency

__all__ = ["RankRow", "JobFigures", "job_figures"]


@dataclass(frozen=True)
class RankRow:
    """A rank of the job: its coordinates, the MACs and FLOPs of its step (every phase),
    its step's wall time and its parameters (its shard where the model is split)."""

    rank: int
    coordinates: dict
    macs: int
    flops: int
    step: float
    params: int


@dataclass(frozen=True)
class JobFigures:
    """The ranks that reported (``ranks``), the job's ``flops`` per step (their sum), its
    ``step`` (the slowest rank's), each device's ``peak`` FLOP/s (None: unknown, ``why``),
    the job's ``mfu``: its model FLOPs per second over every rank's peak, and ``added``: the
    FLOPs of the job that the parallel plan adds (None: no model-parallel split known)."""

    ranks: tuple[RankRow, ...]
    flops: int
    step: float
    peak: float | None
    mfu: float | None
    why: str | None
    added: int | None = None

    @property
    def flops_per_second(self) -> float:
        return self.flops / self.step if self.step > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["flops_per_second"] = self.flops_per_second
        return d


def job_figures(result: ProfileResult, peak: Any = None) -> JobFigures | None:
    """The job's view of rank 0's gathered ``result``; None for a result without gathered
    ranks or where no rank's place on a mesh is known (a data-parallel job's ranks are alike);
    ``peak`` as :func:`~.efficiency.efficiency` takes it (None: the recorded device's)."""
    if not result.ranks:
        return None
    rows = []
    for i, r in enumerate(result.ranks):
        if r is None:
            continue
        it = r.iteration
        rows.append(RankRow(i, dict(r.metadata.coordinates or {}), it.forward.macs + it.backward.macs + it.step.macs,
                            it.flops, it.latency, r.total.params))
    if not any(row.coordinates for row in rows):
        return None
    step = max(row.step for row in rows)
    flops = sum(row.flops for row in rows)
    model_flops = sum(r.iteration.model_flops for r in result.ranks if r is not None)
    found = efficiency(result, peak)
    device_peak = found.peak_flops
    mfu = model_flops / step / (device_peak * len(result.ranks)) if device_peak and step > 0 else None
    return JobFigures(tuple(rows), flops, step, device_peak, mfu, found.reason if device_peak is None else None,
                      _added(result))


def _added(result: ProfileResult) -> int | None:
    """Over the ranks: every redistribution, and all copies but one of the work of the modules
    left whole (a group of g ranks repeats it g times)."""
    total, known = 0.0, False
    for r in result.ranks:
        work = added_work(r) if r is not None else None
        if work is not None:
            g = group_size(r)  # type: ignore[arg-type]  # (not None: it has added work)
            total += work.redistributions + work.replicated * (g - 1) / g
            known = True
    return round(total) if known else None
