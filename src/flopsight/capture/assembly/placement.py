"""From a session's stamps to a :class:`~flopsight.result.timeline.Timeline`, once, when it resolves.

Nothing is recorded for it while the model runs: the call tracker's call log and the span
timer's spans already hold each call's stamps and the profiler's overhead so far at each of
them. A stamp's place on the timeline is the clock's seconds since the start of the span,
less the overhead accrued since (host clocks): the overhead only grows, so this keeps the
order of everything, and a call's end minus its start is exactly the seconds its latency
is made of. On a CUDA clock (elapsed times are float32 milliseconds, so they do not add up
exactly) both ends are placed from the start of the span instead: a duration then equals
its latency to float32 rounding, and calls still nest.

Collectives carry host times (``time.perf_counter``). On a host clock they are placed like
stamps, with the overhead accrued by then interpolated between the stamps around them (so a
collective lands inside the call or span that issued it); on a CUDA clock (module spans are
GPU time) they are placed by host time since the start, which the GPU's queue may lag.

>>> from flopsight.capture.runtime.timing import FakeClock
>>> place = Placement(FakeClock(step=0.5), origin=(1, 0.0))
>>> place(5, 0.0)
2.0
"""

from __future__ import annotations

import bisect
import time
from typing import TYPE_CHECKING

from ...result import timeline as _timeline
from ...result.timeline import CallSpan, CollectiveSpan, Span, Timeline
from ..runtime.timing import Clock, on_device

if TYPE_CHECKING:
    from ..sources.spans import TimedSpan

__all__ = ["Placement", "resolve_timeline"]


class Placement:
    """Seconds from ``origin`` (a stamp and the overhead then) to a (stamp, overhead)."""

    def __init__(self, clock: Clock, origin: tuple, host_origin: float | None = None):
        self.seconds = clock.seconds
        self.origin, self.origin_overhead = origin
        self.subtracts = clock.subtracts_overhead
        #: a device clock's host stamps (module calls inside phases) are placed from the host's
        #: time at the origin: the device runs behind the host by its queue, which no stamp says
        self.host_origin = host_origin if on_device(clock) else None

    def __call__(self, stamp, overhead: float) -> float:
        if self.host_origin is not None and isinstance(stamp, float):  # the profiler's own time left out, as
            return stamp - self.host_origin - (overhead - self.origin_overhead)  # from these spans' durations
        t = self.seconds(self.origin, stamp)
        return t - (overhead - self.origin_overhead) if self.subtracts else t


def resolve_timeline(log, seconds: list[float], spans: list[TimedSpan], collectives: list, *, clock: Clock,
                     origin: tuple, host_origin: float, limit: int | None = None) -> Timeline:
    """The timeline of one session.

    ``log``: the call tracker's call records (in order of start); ``seconds[i]``: the
    seconds of ``log[i]`` its latency is made of; ``spans``: each of the span timer's
    ``(kind, start, end, overhead at start, overhead at end)`` with its seconds (the
    ``forward`` spans are the top-level forward calls); ``collectives``: the communication source's
    resolved calls; ``origin``: (stamp, overhead) at the start of the span; ``host_origin``:
    ``time.perf_counter()`` then; ``limit``: the most calls kept (default
    :data:`flopsight.result.timeline.MAX_CALLS`, read when called).
    """
    limit = _timeline.MAX_CALLS if limit is None else limit
    place = Placement(clock, origin, host_origin)
    exact = clock.scale is not None  # stamp differences add up exactly (host and fake clocks)

    def placed(start, ovh_start, end, ovh_end, seconds: float) -> tuple[float, float]:
        at = place(start, ovh_start)
        return at, seconds if exact else max(place(end, ovh_end) - at, 0.0)

    calls: list[CallSpan] = []
    forwards: list[Span] = []
    kept = [-1] * len(log)  # log index -> index in calls (-1: not kept)
    dropped = 0
    for rec in log:
        if rec.end is None:  # raised, or still running (a snapshot)
            continue
        start, duration = placed(rec.start, rec.ovh_start, rec.end, rec.ovh_end, seconds[rec.index])
        if rec.parent < 0 and rec.phase == "forward":
            forwards.append(Span("forward", start, duration))
        if len(calls) >= limit:
            dropped += 1
            continue
        kept[rec.index] = len(calls)
        calls.append(CallSpan(rec.path, rec.phase, start, duration, _kept_parent(log, kept, rec)))
    tops = [Span(kind, *placed(a, oa, b, ob, s)) for (kind, a, b, oa, ob), s in spans]
    colls = _collective_spans(collectives, clock, place, log, [span for span, _ in spans], host_origin)
    return Timeline(tuple(calls), tuple(sorted(forwards + tops, key=lambda s: s.start)), colls, dropped)


def _kept_parent(log, kept: list[int], rec) -> int:
    """Index in the timeline of the innermost enclosing call that was kept (one that raised
    is not), -1 for none."""
    parent = rec.parent
    while parent >= 0 and kept[parent] < 0:
        parent = log[parent].parent
    return kept[parent] if parent >= 0 else -1


def _collective_spans(calls, clock: Clock, place: Placement, log, spans, host_origin: float) -> tuple:
    if not calls:
        return ()
    if clock.stamp is time.perf_counter:  # host stamps: collectives are on the same clock
        overhead_at = _overhead_at(place, log, spans)
        starts = [place(c.start, overhead_at(c.start)) for c in calls]
    else:
        starts = [c.start - host_origin for c in calls]
    placed = [CollectiveSpan(c.kind, c.path, c.phase, start, c.seconds, c.bytes) for c, start in zip(calls, starts)]
    return tuple(sorted(placed, key=lambda c: c.start))


def _overhead_at(place: Placement, log, spans):
    """host time -> the profiler's overhead accrued by then, linear between the stamps around
    it (stamps and overhead both only grow, the overhead by at most the time between two
    stamps, so the placed time stays between theirs).

    >>> from flopsight.capture.runtime.timing import HostClock
    >>> at = _overhead_at(Placement(HostClock(), origin=(10.0, 0.0)), [], [("iteration", 10.0, 14.0, 0.0, 2.0)])
    >>> at(9.0), at(11.0), at(20.0)
    (0.0, 0.5, 2.0)
    """
    points = sorted([(place.origin, place.origin_overhead)]
                    + [(r.start, r.ovh_start) for r in log if r.start is not None]
                    + [(r.end, r.ovh_end) for r in log if r.end is not None]
                    + [p for _, a, b, oa, ob in spans for p in ((a, oa), (b, ob))])
    stamps = [s for s, _ in points]

    def at(t: float) -> float:
        i = bisect.bisect_right(stamps, t)
        if i == 0:
            return points[0][1]
        a, oa = points[i - 1]
        if i == len(points) or points[i][0] == a:
            return oa
        b, ob = points[i]
        return oa + (ob - oa) * (t - a) / (b - a)

    return at
