"""Memory as the result stores it: per module, and for the whole profiled span.

Bytes are counted from the tensors' storages, so CPU, CUDA and meta runs agree; on CUDA the
caching allocator's figures differ by its rounding and reuse. A module's figures count what is
allocated while profiling; the span's peak counts everything live at once: what was live when
it began (the model's parameters, gradients and optimizer state; on CUDA everything the
allocator held) plus the most allocated during it, the figure to compare with a device's
memory. What was allocated while profiling is its own figure beside it.

>>> m = MemoryTotals(params=400, grads=400, optimizer_state=800, activations=96, peak=2624, live_at_start=1600,
...                  peak_allocated=1024)
>>> m.params + m.grads + m.optimizer_state == m.live_at_start, m.peak - m.live_at_start
(True, 1024)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["ModuleMemory", "MemoryTotals", "Buffer"]


@dataclass(frozen=True)
class ModuleMemory:
    """One module: ``activations``, bytes its forward saved for the backward pass (its
    submodules included, each storage once); ``peak``, the most bytes live while one call of
    its forward ran; ``peak_backward``, the most bytes live when an op of its (or a
    submodule's) backward allocated; ``temporaries``, the most bytes one op of it (or of a
    submodule), forward or backward, allocated and released before it returned (an im2col
    buffer, attention scores), on top of the live bytes then: seen by the native backend
    only, from the allocators' reports (docs/conventions/memory.md)."""

    activations: int = 0
    peak: int = 0
    peak_backward: int = 0
    temporaries: int = 0


@dataclass(frozen=True)
class Buffer:
    """One storage allocated while profiling: its ``bytes``, the ``op`` it was first seen from and
    the ``module`` and ``phase`` it was charged to (the largest of a span explains a peak far
    above the model's own sizes: a framework's bucket buffer)."""

    bytes: int
    op: str
    module: str
    phase: str


@dataclass(frozen=True)
class MemoryTotals:
    """The whole span: the model's parameters, their gradients and the optimizer's state as
    they stand at the end (each rank's own shards under ZeRO and FSDP), the activations
    saved for backward; ``peak``, everything live at once during the span (what was live
    when it began, ``live_at_start``, plus the most allocated during it), and per phase;
    ``peak_allocated``, the most bytes allocated while profiling live at once."""

    params: int = 0
    grads: int = 0
    optimizer_state: int = 0
    activations: int = 0
    peak: int = 0
    phase_peaks: dict[str, int] = field(default_factory=dict)
    #: the bytes live when the span began that ``peak`` counts (0 in older files, whose peak is
    #: what was allocated while profiling)
    live_at_start: int = 0
    #: the most bytes allocated while profiling live at once (older files: their ``peak``)
    peak_allocated: int = 0
    #: the largest storage allocated while profiling (None when none was, or in older files)
    largest_buffer: Buffer | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MemoryTotals:
        d = dict(d)
        d["largest_buffer"] = Buffer(**d["largest_buffer"]) if d.get("largest_buffer") else None
        if "peak_allocated" not in d:  # written before the peak counted what was live at the start
            d["peak_allocated"] = d.get("peak", 0)
        return cls(**d)
