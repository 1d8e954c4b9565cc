"""Chrome trace (``.trace.json``): the result's timeline, for Perfetto and ``chrome://tracing``.

The JSON object format of the Trace Event Format: complete events (``"ph": "X"``, ``ts``
and ``dur`` in microseconds) in ``traceEvents``, one process per rank (``pid`` = rank,
named ``rank N``) and one thread per lane: ``iteration``, ``forward`` and ``recompute``
(module calls, nested by time: a flame), ``backward`` and ``step`` (timed whole), and
``communication`` (collectives). Each module span's args hold the module's MACs and FLOPs
in that phase (with ``kernels=True``, its kernels' time and its own top kernels); each
collective's its kind, bytes and module. See ``docs/trace.md``.

>>> import json, torch, flopsight
>>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
>>> result = flopsight.profile(model, torch.ones(2, 4), clock=flopsight.FakeClock())
>>> trace = json.loads(render_trace(result))
>>> for e in trace["traceEvents"]:
...     if e["ph"] == "X":
...         print(e["tid"], e["name"], e["ts"], e["dur"])
1 iteration 0.0 7000.0
2 Sequential 1000.0 5000.0
2 0 (Linear) 2000.0 1000.0
2 1 (ReLU) 4000.0 1000.0
"""

from __future__ import annotations

import json
from typing import Any

from ..analysis.report import Report
from ..analysis.report_options import ReportOptions
from ..result.tree import PHASES

__all__ = ["render_trace", "format_trace", "trace_events", "LANES"]

#: lane -> thread id, in the order viewers list them
LANES = {"iteration": 1, "forward": 2, "recompute": 3, "backward": 4, "step": 5, "communication": 6}

_NOTE = ("Times are microseconds from the start of each rank's profiled span, on that rank's own clock "
         "(ranks are not synchronised). Module spans are forward calls (and recomputed ones); backward "
         "passes and optimizer steps are timed whole. A span's macs and flops are its module's in that "
         "phase, over all of its calls.")


def render_trace(result, **options: Any) -> str:
    """``result``'s timeline (every rank's, on rank 0 of a gathered run) as Chrome trace JSON;
    ``indent`` (default None: one line) is the one
    :class:`~flopsight.analysis.report_options.ReportOptions` field it reads."""
    return format_trace(Report(result, ReportOptions.of(**options)))


def format_trace(report: Report) -> str:
    """The format table's entry: the result's timeline records, as they are."""
    result = report.result
    ranks = _ranks(result)
    md = result.metadata
    other = {
        "generator": f"flopsight {md.flopsight_version}".strip(),
        "model": md.model,
        "device": md.device,
        "clock": md.timing.clock,
        "timing": md.timing.method,
        "world_size": md.world_size,
        "ranks": [rank for rank, r in ranks if r.timeline is not None],
        "calls_dropped": sum(r.timeline.calls_dropped for _, r in ranks if r.timeline is not None),
        "note": _NOTE if any(r.timeline is not None for _, r in ranks)
        else "this result holds no timeline (saved by a flopsight older than the timeline)",
    }
    trace = {"traceEvents": trace_events(result), "displayTimeUnit": "ms", "otherData": other}
    return json.dumps(trace, indent=report.options.indent_or(None)) + "\n"


def trace_events(result) -> list[dict[str, Any]]:
    """Metadata events (names and order of processes and threads), then every span, by ``ts``
    (a span before those it contains)."""
    named: list[dict] = []
    timed: list[dict] = []
    for rank, r in _ranks(result):
        if r.timeline is not None:
            events = _rank_events(rank, r)
            lanes = sorted({e["tid"] for e in events})
            named += _names(rank, lanes)
            timed += events
    timed.sort(key=lambda e: (e["ts"], -e["dur"]))  # stable: a parent stays before an equal child
    return named + timed


def _ranks(result) -> list[tuple[int, Any]]:
    """(rank, result) of each rank present: every gathered rank on rank 0, else this one."""
    if result.ranks:
        return [(i, r) for i, r in enumerate(result.ranks) if r is not None]
    return [(result.metadata.rank or 0, result)]


def _names(rank: int, lanes: list[int]) -> list[dict]:
    """process_name/thread_name metadata, with sort indexes so viewers keep rank and lane order."""
    lane_names = {tid: name for name, tid in LANES.items()}
    events = [_meta("process_name", rank, 0, name=f"rank {rank}"),
              _meta("process_sort_index", rank, 0, sort_index=rank)]
    for tid in lanes:
        events += [_meta("thread_name", rank, tid, name=lane_names[tid]),
                   _meta("thread_sort_index", rank, tid, sort_index=tid)]
    return events


def _meta(event: str, pid: int, tid: int, **args: Any) -> dict:
    return {"name": event, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": args}


def _rank_events(rank: int, result) -> list[dict]:
    """One rank's spans: module calls, top-level spans, collectives."""
    timeline = result.timeline
    args: dict[tuple[str, str], dict] = {}  # one args dict per (module, phase), shared by its calls
    events = []
    top_forwards = set()
    for call in timeline.calls:
        key = (call.path, call.phase)
        if key not in args:
            args[key] = _module_args(result, call.path, call.phase)
        name = _module_name(call.path, args[key]["type"])
        events.append(_span(name, "module", rank, LANES.get(call.phase, LANES["forward"]), call.start, call.duration,
                            args[key]))
        if call.parent < 0 and call.phase == "forward":
            top_forwards.add(call.start)
    for span in timeline.spans:
        # a forward span is a top-level call already drawn, unless calls were dropped
        if span.kind == "forward" and span.start in top_forwards:
            continue
        events.append(_span(span.kind, "span", rank, LANES.get(span.kind, LANES["iteration"]), span.start,
                            span.duration, _span_args(result, span.kind)))
    for c in timeline.collectives:
        events.append(_span(c.kind, "communication", rank, LANES["communication"], c.start, c.duration,
                            {"kind": c.kind, "bytes": c.bytes, "module": c.path, "phase": c.phase}))
    return events


#: kernels listed in a module span's args (its own, most time first)
_KERNELS = 10


def _span(name: str, cat: str, pid: int, tid: int, start: float, duration: float, args: dict) -> dict:
    """A complete event. ``ts`` and the end are rounded to whole nanoseconds each, so a span
    that lies within another still does after rounding."""
    ts = round(start * 1e9)
    end = round((start + duration) * 1e9)
    return {"name": name, "cat": cat, "ph": "X", "ts": ts / 1000, "dur": (end - ts) / 1000, "pid": pid, "tid": tid,
            "args": args}


def _module_name(path: str, type_name: str) -> str:
    """``encoder.0 (Linear)``; the root by its type alone.

    >>> _module_name("encoder.0", "Linear"), _module_name("", "Bert")
    ('encoder.0 (Linear)', 'Bert')
    """
    return f"{path} ({type_name})" if path else type_name


def _module_args(result, path: str, phase: str) -> dict:
    """The module's figures in ``phase``: inclusive, over all its calls (counts are per
    module and phase, not per call)."""
    node = result.module(path)
    args = {"module": path, "type": node.type_name, "phase": phase}
    if phase in PHASES:
        stats = node.inclusive[phase]
        args.update(calls=stats.calls, macs=stats.macs, flops=stats.flops)
    if phase in node.kernel_time:  # kernels=True: its kernels' time with its submodules'
        args["kernel_time_us"] = round(node.kernel_time[phase] * 1e6, 3)
    kernels = node.record.kernels.get(phase)
    if kernels:  # and its own kernels, by name
        args["kernels"] = {name: {"calls": k.calls, "us": round(k.seconds * 1e6, 3)}
                           for name, k in list(kernels.items())[:_KERNELS]}
    return args


def _span_args(result, kind: str) -> dict:
    """A forward, backward or step span: the whole model's figures in that phase."""
    if kind in PHASES:
        total = result.total.inclusive[kind]
        return {"macs": total.macs, "flops": total.flops}
    return {}
