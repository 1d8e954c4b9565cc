"""The work a model-parallel plan adds to the model's own, named apart.

Two kinds, per rank: what DTensor's redistributions ran (the ops charged as
``redistribute:<op>``: a replicated bias divided into partial sums, shards cut or padded) and
the work of the modules tensor parallelism left whole (``metadata.replicated_modules``: a norm
outside sequence parallelism, a head left unsplit), which every rank of the model-parallel group
repeats. Over a job, every redistribution is added work, and of the left-whole modules' work
all copies but one (a group of ``g`` ranks: ``(g - 1) / g`` of their sum).

Not named here: what a row-wise split repeats inside an op (its replicated bias added on every
rank, within the linear's FLOPs) and the parameterless ops between layers that every rank runs
on the same activations (residual adds); compare the job's FLOPs with one process's count.

>>> AddedWork(redistributions=64, replicated=2_560).flops
2624
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..result.profile_result import ProfileResult
from ..result.records import REDISTRIBUTE

__all__ = ["AddedWork", "added_work", "group_size"]


@dataclass(frozen=True)
class AddedWork:
    """One rank's FLOPs (every phase) in redistributions and in the modules left whole."""

    redistributions: int
    replicated: int

    @property
    def flops(self) -> int:
        return self.redistributions + self.replicated


def added_work(result: ProfileResult) -> AddedWork | None:
    """``result``'s own rank's added work (not its gathered ranks'); None where no model-
    parallel split is known (no module left whole recorded, no redistribution ran)."""
    redistributions = sum(stats.flops for phase in result.phases for name, stats in result.ops(phase).items()
                          if name.startswith(REDISTRIBUTE))
    whole = result.metadata.replicated_modules
    if whole is None and not redistributions:
        return None
    replicated = sum(node.inclusive[phase].flops for path in whole or () if path in result.modules
                     for node in (result.module(path),) for phase in node.inclusive)
    return AddedWork(redistributions, replicated)


def group_size(result: ProfileResult) -> int:
    """The ranks of ``result``'s model-parallel group: the world over its data- and pipeline-
    parallel sizes (1 where neither is known)."""
    sizes: Mapping[str, int] = result.metadata.parallel or {}
    world = int(sizes.get("world") or result.metadata.world_size or 1)
    return max(world // (int(sizes.get("dp") or 1) * int(sizes.get("pp") or 1)), 1)
