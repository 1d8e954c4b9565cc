"""When things ran: the timeline of one profiled span, as plain data.

Every module call (path, phase, start, duration, the call it ran inside), the top-level
spans (each ``forward`` call from outside the model, ``backward`` pass, optimizer ``step``
and the whole ``iteration``) and each collective (kind, module, phase, issue time, duration,
payload bytes). Times are seconds from the start of the profiled span, on the clock the
latencies come from, with the profiler's own overhead taken out where the clock allows
(host clocks): a call's duration *is* the span its latency is made of, so a module's call
durations add up to its inclusive latency. Each rank's timeline is relative to its own
start (ranks' clocks are not synchronised).

Module spans are those of forward calls (``forward``, and ``recompute`` under activation
checkpointing); the backward pass and the optimizer step are timed whole (their per-module
latencies are sums of op times, which have no place on a timeline).

At most :data:`MAX_CALLS` calls are kept, the first ones (so every kept call's enclosing
call is kept too); ``calls_dropped`` says how many more there were.

In JSON the columns are parallel lists, modules by their index in the result's module
list and phases by their index in ``phases``:

>>> t = Timeline(calls=(CallSpan("", "forward", 0.0, 2.0), CallSpan("fc", "forward", 0.5, 1.0, parent=0)),
...              spans=(Span("iteration", 0.0, 3.0),))
>>> d = t.to_dict(["", "fc"])
>>> d["calls"]["module"], d["calls"]["parent"], d["phases"]
([0, 1], [-1, 0], ['forward'])
>>> Timeline.from_dict(d, ["", "fc"]) == t
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = ["Timeline", "CallSpan", "Span", "CollectiveSpan", "MAX_CALLS"]

#: the most module calls a timeline keeps, the first ones (some 80 bytes of JSON each: about 16 MB)
MAX_CALLS = 200_000


class CallSpan(NamedTuple):
    """One module call: ``parent`` is the index (in :attr:`Timeline.calls`) of the call it
    ran inside, -1 for a call from outside the model's modules."""

    path: str
    phase: str
    start: float
    duration: float
    parent: int = -1

    @property
    def end(self) -> float:
        return self.start + self.duration


class Span(NamedTuple):
    """A top-level span: ``kind`` is ``forward``, ``backward``, ``step`` or ``iteration``."""

    kind: str
    start: float
    duration: float

    @property
    def end(self) -> float:
        return self.start + self.duration


class CollectiveSpan(NamedTuple):
    """One collective, from issue to completion, charged to module ``path`` in ``phase``."""

    kind: str
    path: str
    phase: str
    start: float
    duration: float
    bytes: int

    @property
    def end(self) -> float:
        return self.start + self.duration


@dataclass(frozen=True)
class Timeline:
    """Module calls, top-level spans and collectives of one rank, in order of start."""

    calls: tuple[CallSpan, ...] = ()
    spans: tuple[Span, ...] = ()
    collectives: tuple[CollectiveSpan, ...] = ()
    #: calls left out past :data:`MAX_CALLS`
    calls_dropped: int = 0

    def __repr__(self) -> str:
        # short: a timeline keeps up to MAX_CALLS calls
        return (f"Timeline({len(self.calls)} calls, {len(self.spans)} spans, {len(self.collectives)} collectives, "
                f"calls_dropped={self.calls_dropped})")

    def to_dict(self, paths: Sequence[str]) -> dict[str, Any]:
        """JSON-ready columns; ``paths`` is the result's module list (calls refer to it)."""
        index = {p: i for i, p in enumerate(paths)}
        phases = list(dict.fromkeys([c.phase for c in self.calls] + [c.phase for c in self.collectives]))
        phase_index = {p: i for i, p in enumerate(phases)}
        calls, spans, colls = self.calls, self.spans, self.collectives
        return {
            "phases": phases,
            "calls": {"module": [index[c.path] for c in calls], "phase": [phase_index[c.phase] for c in calls],
                      "start": [c.start for c in calls], "duration": [c.duration for c in calls],
                      "parent": [c.parent for c in calls]},
            "calls_dropped": self.calls_dropped,
            "spans": {"kind": [s.kind for s in spans], "start": [s.start for s in spans],
                      "duration": [s.duration for s in spans]},
            "collectives": {"kind": [c.kind for c in colls], "module": [index[c.path] for c in colls],
                            "phase": [phase_index[c.phase] for c in colls], "start": [c.start for c in colls],
                            "duration": [c.duration for c in colls], "bytes": [c.bytes for c in colls]},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], paths: Sequence[str]) -> Timeline:
        """Read :meth:`to_dict`'s columns back (``paths``: the result's module list)."""
        phases = d.get("phases", [])
        calls = _rows(d, "calls", ("module", "phase", "start", "duration", "parent"))
        colls = _rows(d, "collectives", ("kind", "module", "phase", "start", "duration", "bytes"))
        return cls(
            calls=tuple(CallSpan(paths[m], phases[p], s, t, parent) for m, p, s, t, parent in calls),
            spans=tuple(Span(*row) for row in _rows(d, "spans", ("kind", "start", "duration"))),
            collectives=tuple(CollectiveSpan(k, paths[m], phases[p], s, t, b) for k, m, p, s, t, b in colls),
            calls_dropped=d.get("calls_dropped", 0),
        )


def _rows(d: dict[str, Any], name: str, columns: tuple[str, ...]) -> list[tuple]:
    """The rows of table ``name`` (a dict of equally long column lists).

    >>> _rows({"spans": {"kind": ["step"], "start": [0.5]}}, "spans", ("kind", "start"))
    [('step', 0.5)]
    >>> _rows({"spans": {"kind": ["step"], "start": []}}, "spans", ("kind", "start"))
    Traceback (most recent call last):
    ...
    ValueError: timeline.spans: columns of different lengths (kind: 1, start: 0)
    """
    table = d.get(name, {})
    cols = [table.get(c, []) for c in columns]
    if len({len(c) for c in cols}) > 1:
        sizes = ", ".join(f"{c}: {len(v)}" for c, v in zip(columns, cols))
        raise ValueError(f"timeline.{name}: columns of different lengths ({sizes})")
    return list(zip(*cols))
