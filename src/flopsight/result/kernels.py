"""Kernels per module: what ``kernels=True`` measured with torch.profiler.

On CUDA a *kernel* is one CUDA kernel, memcpy or memset, timed on the GPU by CUPTI; on the
CPU it is one aten operator's self time (its time less the operators it called). Each is
charged to the module and phase of the aten op that launched it (see
``docs/conventions/timing.md``), and stored per module and phase as name -> :class:`Kernel`.
:class:`KernelSummary` holds what belongs to no module call and the span's total.

>>> k = Kernel(calls=2, seconds=0.004) + Kernel(1, 0.002)
>>> k
Kernel(calls=3, seconds=0.006)
>>> summary = KernelSummary("cuda", seconds=0.1, unassigned={"memset": Kernel(1, 0.0005)})
>>> summary.unassigned_seconds, round(summary.unassigned_share, 4)
(0.0005, 0.005)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = ["Kernel", "KernelSummary", "SOURCES", "kernels_from_dict", "kernels_to_dict"]

#: what a kernel is: CUDA kernels timed on the GPU, or CPU operators' self times
SOURCES = ("cuda", "cpu")


class Kernel(NamedTuple):
    """One kernel name's launches in one place: how many, and their device seconds."""

    calls: int = 0
    seconds: float = 0.0

    def __add__(self, other: Kernel) -> Kernel:  # type: ignore[override]
        return Kernel(self.calls + other.calls, self.seconds + other.seconds)


@dataclass(frozen=True)
class KernelSummary:
    """What ``kernels=True`` measured over the whole span: ``source`` (``"cuda"`` or
    ``"cpu"``, see the module docstring), ``seconds`` (every kernel's time, the model's or
    not) and ``unassigned`` (name -> :class:`Kernel` of those launched outside the model's
    calls: user code around a profiled module, the profiler's own)."""

    source: str
    seconds: float
    unassigned: dict[str, Kernel] = field(default_factory=dict)
    #: on CUDA, the seconds in which any kernel ran (overlapping kernels counted once): the
    #: device's busy time, against which the forward's latency shows its idle share
    busy: float | None = None

    def __repr__(self) -> str:
        # short: a span can launch hundreds of distinct kernels outside the model
        return (f"KernelSummary(source={self.source!r}, seconds={self.seconds!r}, "
                f"unassigned={len(self.unassigned)} kernels, busy={self.busy!r})")

    @property
    def unassigned_seconds(self) -> float:
        return sum(k.seconds for k in self.unassigned.values())

    @property
    def unassigned_share(self) -> float:
        """Share of the span's kernel time charged to no module (0 when none ran)."""
        return self.unassigned_seconds / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = {"source": self.source, "seconds": self.seconds, "unassigned": kernels_to_dict(self.unassigned)}
        if self.busy is not None:
            d["busy"] = self.busy
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> KernelSummary:
        busy = d.get("busy")
        return cls(d["source"], float(d["seconds"]), kernels_from_dict(d.get("unassigned", {})),
                   float(busy) if busy is not None else None)


def kernels_to_dict(kernels: dict[str, Kernel]) -> dict[str, dict]:
    """name -> {"calls", "seconds"}: how files store a table of kernels."""
    return {name: k._asdict() for name, k in kernels.items()}


def kernels_from_dict(d: dict[str, dict]) -> dict[str, Kernel]:
    return {name: Kernel(int(k["calls"]), float(k["seconds"])) for name, k in d.items()}
