"""From raw captures to a :class:`~flopsight.result.ProfileResult`."""

from __future__ import annotations

import bisect
import dataclasses
from typing import Callable

from torch import nn

from ..result.communication import KINDS, Collective
from ..result.memory import MemoryTotals
from ..result.metadata import Metadata
from ..result.profile_result import ModelCall, ModuleStats, ProfileResult
from ..result.stats import make_stats
from ..result.timeline import Span, Timeline
from ..result.tree import PHASES
from .modules import ModuleInfo
from .session import RawCapture

__all__ = ["build_result"]

#: phases whose latency is the modules' own span time; the others sum their ops' time
_SPANNED = ("forward", "recompute")
_PHASE_ORDER = {phase: i for i, phase in enumerate(PHASES)}


def build_result(
    infos: dict[str, ModuleInfo],
    counts: RawCapture,
    times: RawCapture | None = None,
    *,
    ignored: Callable[[nn.Module], bool] = lambda m: False,
    metadata: Metadata,
) -> ProfileResult:
    """Merge a counting capture (and optionally a separate timing capture) into a result."""
    times = times or counts
    phases_of: dict[str, list[str]] = {}
    for path, phase in {*counts.ops, *counts.calls, *times.latency}:
        phases_of.setdefault(path, []).append(phase)
    modules: dict[str, ModuleStats] = {}
    no_ops: dict = {}
    for path, info in infos.items():
        phases, ops, moved = {}, {}, {}
        for phase in sorted(phases_of.get(path, ()), key=_PHASE_ORDER.get):
            key = (path, phase)
            if key in counts.bytes_moved:
                moved[phase] = counts.bytes_moved[key]
            op_stats = counts.ops.get(key, no_ops)
            macs = flops = 0
            latency = 0.0
            for s in op_stats.values():
                macs += s[0]
                flops += s[1]
                latency += s[2]
            if phase in _SPANNED:
                latency = times.latency.get(key, 0.0)
            calls = counts.calls.get(key, times.calls.get(key, 0))
            phases[phase] = make_stats(macs, flops, latency, calls)
            if op_stats:
                ops[phase] = op_stats
        modules[path] = ModuleStats(
            name=path,
            type_name=info.type_name,
            depth=info.depth,
            parent=info.parent,
            children=tuple(info.children),
            params=info.params,
            params_trainable=info.params_trainable,
            extra_repr=info.extra_repr,
            shared_with=tuple(info.shared_with),
            aliases=tuple(info.aliases),
            ignored=bool(ignored(info.module)),
            phases=phases,
            ops=ops,
            memory=_module_memory(counts.memory, path),
            bytes_moved=moved,
        )
    error = counts.error or (times.error if times is not counts else None)
    if error and not metadata.error:
        metadata = dataclasses.replace(metadata, error=error)
    calls = [ModelCall(path, cost, size) for path, cost, size in counts.top_calls]
    spans = dict(counts.spans)
    if times is not counts:  # latencies from the timing pass, counts from the counting pass
        for i, (path, timed, _) in enumerate(times.top_calls[: len(calls)]):
            if path == calls[i].path:
                calls[i] = dataclasses.replace(calls[i], stats=calls[i].stats._replace(latency=timed.latency))
        spans.update(times.spans)
    totals = MemoryTotals.from_dict(counts.memory["totals"]) if counts.memory else None
    usage = times.device_usage or counts.device_usage  # the timing pass's, where there is one
    timeline = counts.timeline if times is counts else _timeline(counts.timeline, times.timeline)
    return ProfileResult(modules, dict(counts.unsupported), metadata, spans=spans, calls=calls,
                         comms=_collectives(counts.collectives), memory=totals, device_usage=usage, timeline=timeline)


def _module_memory(memory: dict | None, path: str) -> dict[str, int]:
    """A module's own saved activations and its peaks, forward and backward ({} untracked)."""
    if not memory:
        return {}
    peaks = memory["peaks"]
    return {"activations": memory["activations"].get(path, 0), "peak": peaks.get((path, "forward"), 0),
            "peak_backward": peaks.get((path, "backward"), 0)}


def _collectives(calls) -> tuple[Collective, ...]:
    """One record per (module, phase, kind, group size), summed over the calls, in phase
    then kind order."""
    acc: dict[tuple, list] = {}
    for path, phase, kind, nbytes, group_size, seconds, overlapped in calls:
        a = acc.setdefault((path, phase, kind, group_size), [0, 0, 0.0, 0.0])
        a[0] += 1
        a[1] += nbytes
        a[2] += seconds
        a[3] += overlapped
    order = {k: i for i, k in enumerate(KINDS)}
    keys = sorted(acc, key=lambda k: (_PHASE_ORDER.get(k[1], len(_PHASE_ORDER)), order.get(k[2], len(order))))
    return tuple(Collective(kind, path, phase, n_calls, nbytes, seconds, group, seconds - overlapped, overlapped)
                 for (path, phase, kind, group), (n_calls, nbytes, seconds, overlapped) in
                 ((k, acc[k]) for k in keys))


def _timeline(counts: Timeline | None, times: Timeline | None) -> Timeline | None:
    """The timing pass's timeline, with the counting pass's collectives (the timing pass has
    no communication source) moved onto it: each keeps its place within the top-level
    forward call it was issued in (the n-th of one pass is the n-th of the other); none
    when the passes made different numbers of such calls."""
    if times is None or counts is None or not counts.collectives:
        return times
    src = [s for s in counts.spans if s.kind == "forward"]
    dst = [s for s in times.spans if s.kind == "forward"]
    if not src or len(src) != len(dst):
        return times
    starts = [s.start for s in src]
    moved = []
    for c in counts.collectives:
        k = max(bisect.bisect_right(starts, c.start) - 1, 0)
        moved.append(c._replace(start=_moved(c.start, src[k], dst[k])))
    return dataclasses.replace(times, collectives=tuple(sorted(moved, key=lambda c: c.start)))


def _moved(t: float, src: Span, dst: Span) -> float:
    """``t``'s place in ``src`` (as a fraction of it, within it) at the same place in ``dst``.

    >>> _moved(3.0, Span("forward", 2.0, 4.0), Span("forward", 10.0, 2.0))
    10.5
    """
    fraction = min(max((t - src.start) / src.duration, 0.0), 1.0) if src.duration > 0 else 0.0
    return dst.start + fraction * dst.duration
