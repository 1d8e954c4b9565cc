"""The pipeline view: each stage's work per micro-batch, its traffic with each neighbour, and
its bubble, from the results of the ranks that ran a pipeline schedule's stages
(``metadata.pipeline``, :mod:`flopsight.capture.sources.pipeline`).

A stage's bubble is the time it waited for its neighbours in the step: the exposed time of
its sends and receives (on gloo a send completes when its receiver takes it), their flights
merged where they overlap (a schedule sends and receives at once): the step anatomy's
communication waited for, of which it is the sends' and receives' share. The schedule's
ideal bubble is ``(p - 1) / (v m + p - 1)`` of the step, for ``p`` pipeline ranks, ``m``
micro-batches and ``v`` stages per rank (1 but for interleaved schedules).

>>> ideal_bubble(ranks=2, micro_batches=4)
0.2
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ..result.profile_result import ProfileResult

__all__ = ["Boundary", "StageFigures", "PipelineFigures", "pipeline_figures", "ideal_bubble"]


def ideal_bubble(ranks: int, micro_batches: int, stages_per_rank: int = 1) -> float:
    """The share of a step a pipeline stage idles in an ideal schedule."""
    return (ranks - 1) / (stages_per_rank * micro_batches + ranks - 1) if micro_batches > 0 else 0.0


@dataclass(frozen=True)
class Boundary:
    """A stage's sends to and receives from one ``peer`` (its rank in the pipeline's group)
    over the step: bytes, calls, seconds in flight and seconds of them waited for."""

    peer: int
    sent: int
    sends: int
    received: int
    receives: int
    seconds: float
    exposed: float


@dataclass(frozen=True)
class StageFigures:
    """One rank's stages: MACs and compute seconds per micro-batch, forward and backward;
    its step; its ``bubble`` (seconds waited on its neighbours) and ``boundaries``."""

    rank: int
    stages: tuple[int, ...]
    fwd_macs: float
    bwd_macs: float
    fwd_seconds: float
    bwd_seconds: float
    step: float
    bubble: float
    boundaries: tuple[Boundary, ...]

    @property
    def bubble_share(self) -> float:
        return self.bubble / self.step if self.step > 0 else 0.0


@dataclass(frozen=True)
class PipelineFigures:
    """The pipeline: its ``schedule``, ``num_stages``, pipeline-parallel ``ranks``,
    ``micro_batches`` per step of ``micro_batch_size`` samples (None: unknown), the
    ``global_batch`` (micro-batch size x micro-batches x data-parallel size), the schedule's
    ``ideal`` bubble share, and each reporting rank's :class:`StageFigures`, by stage."""

    schedule: str
    num_stages: int
    ranks: int
    micro_batches: int
    micro_batch_size: float | None
    global_batch: float | None
    ideal: float
    stages: tuple[StageFigures, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _stage(rank: int, result: ProfileResult, pipeline: dict) -> StageFigures:
    it = result.iteration
    anatomy = it.anatomy
    per = max(int(pipeline["micro_batches"]), 1)
    peers: dict[int, list] = {}
    for c in result.collectives():
        if c.kind in ("send", "recv") and c.peer >= 0:
            b = peers.setdefault(c.peer, [0, 0, 0, 0, 0.0, 0.0])
            i = 0 if c.kind == "send" else 2
            b[i] += c.bytes
            b[i + 1] += c.count
            b[4] += c.latency
            b[5] += c.exposed
    boundaries = tuple(Boundary(peer, *b) for peer, b in sorted(peers.items()))
    # a send and a receive in flight at once each count their wait: the anatomy's merged
    # communication is the time waited, the point-to-point calls' share of it the bubble
    p2p = sum(b.exposed for b in boundaries)
    every = sum(c.exposed for c in result.collectives())
    bubble = anatomy.communication * p2p / every if anatomy is not None and every > 0 else min(p2p, it.latency)
    total = result.total
    return StageFigures(
        rank=rank, stages=tuple(pipeline["stages"]),
        fwd_macs=total.forward.macs / per, bwd_macs=total.backward.macs / per,
        fwd_seconds=(anatomy.forward if anatomy is not None else total.forward.latency) / per,
        bwd_seconds=(anatomy.backward if anatomy is not None else total.backward.latency) / per,
        step=it.latency, bubble=bubble, boundaries=boundaries)


def pipeline_figures(result: ProfileResult) -> PipelineFigures | None:
    """The pipeline view of ``result`` (rank 0's gathered one: every reporting rank's stage;
    another rank's: its own); None when no stage of a pipeline schedule was profiled."""
    pipeline = result.metadata.pipeline
    if not pipeline:
        return None
    own = result.metadata.rank
    # this rank's stage from ``result`` itself: several steps combined, its anatomy is the
    # median step's (the report's), where its entry in ``ranks`` is one step's
    ranks = [result if i == own else r for i, r in enumerate(result.ranks)] if result.ranks else [result]
    stages = sorted((_stage(i if result.ranks else own, r, r.metadata.pipeline)
                     for i, r in enumerate(ranks) if r is not None and r.metadata.pipeline),
                    key=lambda s: s.stages)
    m = int(pipeline["micro_batches"])
    per_rank = max(len(pipeline["stages"]), 1)
    p = max(int(pipeline["num_stages"]) // per_rank, 1)
    it = result.iteration
    size = it.samples / it.micro_batches if it.samples and it.micro_batches else None
    parallel: Mapping[str, int] = result.metadata.parallel or {}
    dp = int(parallel.get("dp") or 1)
    return PipelineFigures(
        schedule=pipeline["schedule"], num_stages=int(pipeline["num_stages"]), ranks=p, micro_batches=m,
        micro_batch_size=size, global_batch=size * m * dp if size is not None else None,
        ideal=ideal_bubble(p, m, per_rank), stages=tuple(stages))
