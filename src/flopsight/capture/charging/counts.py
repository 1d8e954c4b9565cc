"""What the counting backends collect (:class:`Counts`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...result.stats import Stats
from ..runtime.context import CaptureContext

__all__ = ["Counts", "OpTimes", "collect_counts"]


@dataclass
class Counts:
    """What was counted (by the counting source and the sources that count calls whole):
    per (path, phase), per op, its cost (latency: the op's own time) and the bytes it moved;
    the ops without a formula and their calls; [MACs, FLOPs] of each top-level forward call."""

    ops: dict[tuple[str, str], dict[str, Stats]] = field(default_factory=dict)
    bytes_moved: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    unsupported: dict[str, int] = field(default_factory=dict)
    tops: list[list[int]] = field(default_factory=list)
    #: which path counted the ops: "python" (the dispatch mode) or "native" (the recorder),
    #: and why not native when it was not
    backend: str = "python"
    backend_note: str | None = None
    #: the operators the native backend costed on their values, in Python (see Metadata.on_values)
    on_values: tuple[str, ...] = ()
    #: the native recorder's own seconds in its callbacks, per phase they ran in (None: not
    #: measured, the Python backend's)
    profiler_seconds: dict[str, float] | None = None


@dataclass
class OpTimes:
    """The operators' own times in a timed pass, per (path, phase), per operator (named as
    :class:`Counts` names it), in seconds: measured in the pass that timed the modules, so an
    operator's time never exceeds its module's (the native recorder's stamps, :mod:`..backends.native.stamps`)."""

    seconds: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)


def collect_counts(ctx: CaptureContext, backend: str, note: str | None = None, on_values=(),
                   profiler_seconds: dict[str, float] | None = None) -> Counts:
    """What the context's tally holds, as the counting source's part of a raw capture."""
    tally = ctx.tally
    return Counts(tally.resolve(ctx.clock.seconds, ctx.clock.scale), tally.bytes_moved(),
                  dict(tally.unsupported), [list(t) for t in tally.tops], backend, note, tuple(sorted(on_values)),
                  profiler_seconds)
