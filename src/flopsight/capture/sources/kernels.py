"""Capture source: kernels per module, from torch.profiler running in the same pass
(``kernels=True``).

While the pass runs, each module call is a named range in torch.profiler's trace
(``flopsight/call/<index in the call log>``) and so is each step and backward span
(``flopsight/phase/<kind>``). When it ends, :func:`attribute` reads the trace:

* a kernel (CUDA kernel, memcpy or memset) is tied to the CPU op that launched it through
  CUPTI's correlation id; on the CPU each op's self time is the "kernel";
* that op is charged to the innermost range around it: a module call (its path, forward or
  recompute), a span (the root, in that phase; torch.optim's own range around ``step()`` is
  the step phase too), or an autograd node being executed
  (``autograd::engine::evaluate_function``), which belongs, in the backward phase, to the
  module whose forward op made it: the forward op with the node's sequence number *on the
  thread that ran the forward* (sequence numbers count per thread, and CUDA runs the backward
  on a thread of its own);
* what has none of these around it is the root's forward when the call profiled is the
  model's own method, else nobody's (``unassigned``).

>>> ev = [TraceEvent("flopsight/call/0", 1, 0, 10), TraceEvent("aten::mm", 1, 2, 6, corr=7),
...       TraceEvent("gemm", 0, 3, 5, linked=7, on_device=True)]
>>> k = attribute(ev, lambda i: ("fc", "forward"), outside_to_root=False, device=True)
>>> k.kernels
{('fc', 'forward', 'gemm', ('aten.mm',)): [1, 2e-09]}
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from ..._checks import check_bool
from ..._torch_private import kineto_device_work, kineto_events, kineto_quiet, kineto_running, trace_range

__all__ = ["check_kernels", "KernelTrace", "KernelTimes", "TraceEvent", "attribute", "busy_seconds",
           "simulated_kernels", "BACKWARD_NODE"]

_CALL, _PHASE = "flopsight/call/", "flopsight/phase/"
#: the name torch.profiler gives the autograd engine's run of one backward node
BACKWARD_NODE = "autograd::engine::evaluate_function: "
_ACCUMULATE_GRAD = "AccumulateGrad"
#: the range torch.optim puts around every optimizer's step()
_OPTIMIZER_STEP = "Optimizer.step#"
#: how many ops above a kernel are kept to find the one the operator table counted
_CHAIN = 6


def check_kernels(value) -> bool:
    """``value`` if it is a bool and torch.profiler is free to record, else a clear error
    (before the model runs)."""
    if check_bool(value, "kernels") and kineto_running():
        raise RuntimeError(_BUSY)
    return value


_BUSY = ("kernels: torch.profiler is already running; it records one profile at a time, so stop "
         "yours or profile with kernels=False")


class TraceEvent(NamedTuple):
    """One event of the trace, in nanoseconds: a CPU range (an op, a range of ours, a
    backward node) on ``thread``, or a kernel on the device (``on_device``); ``seq`` and
    ``fwd_thread`` are the autograd sequence number and the forward's thread (-1 and 0 when
    none), ``corr`` a CPU op's correlation id, ``linked`` a kernel's (the launching op's)."""

    name: str
    thread: int
    start: int
    end: int
    seq: int = -1
    fwd_thread: int = 0
    corr: int = 0
    linked: int = 0
    on_device: bool = False


@dataclass
class KernelTimes:
    """The source's part of a raw capture: ``kernels`` maps (path, phase, kernel name, the
    ops above it, innermost first) -> [calls, seconds]; ``unassigned`` name -> [calls, seconds]
    of those charged to no module; ``source`` is "cuda" or "cpu"."""

    source: str
    kernels: dict[tuple, list] = field(default_factory=dict)
    unassigned: dict[str, list] = field(default_factory=dict)
    #: on a device, the seconds in which any kernel ran (their intervals merged: kernels that
    #: overlap on several streams count once); None for CPU operators
    busy: float | None = None

    @property
    def seconds(self) -> float:
        return sum(v[1] for v in self.kernels.values()) + sum(v[1] for v in self.unassigned.values())


class KernelTrace:
    """Runs torch.profiler (CPU ops, and CUDA kernels for a model timed with CUDA events)
    between ``start`` and ``stop``, with a named range around every module call and span."""

    def __init__(self, ctx):
        self._ctx = ctx
        #: a fake device clock's share of each op's host time its simulated kernel lasts
        self._simulated = getattr(ctx.clock, "kernel_share", None)
        self._device = self._simulated is not None or (
            getattr(ctx.clock, "device", None) is not None and torch.cuda.is_available())
        self._prof = None
        self._open = threading.local()  # .ranges: (key, range) open on this thread, innermost last
        ctx.events.modules.append(self)
        ctx.events.phases.append(self)

    def start(self, ctx) -> None:
        if kineto_running():
            raise RuntimeError(_BUSY)
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self._device and self._simulated is None:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        # one profiler per span, one cycle each: acc_events keeps torch (2.11) from warning that
        # a cycle's end clears the events of the one before
        self._prof = torch.profiler.profile(activities=activities, acc_events=True)
        with kineto_quiet():  # Kineto's "USDT: ... profiler_start" and its other log lines
            self._prof.start()

    def stop(self, ctx) -> None:
        ranges = self._ranges()
        while ranges:  # a call that raised past its post-hook
            ranges.pop()[1].__exit__(None, None, None)
        if self._prof is not None:
            with kineto_quiet():  # "profiler_stop", and on a CUDA build without a GPU "gpuGetDeviceCount failed"
                self._prof.stop()

    def collect(self, ctx) -> KernelTimes:
        calls = ctx.calls
        with kineto_quiet():
            events = [_event(e) for e in kineto_events(self._prof)] if self._prof is not None else []
        self._prof = None  # its trace can be large: freed with the events
        if self._simulated is not None:
            events += simulated_kernels(events, self._simulated)
        return attribute(events, lambda i: (calls[i].path, calls[i].phase), outside_to_root=ctx.options.outside_to_root,
                         device=self._device)

    # -- ranges -------------------------------------------------------------------------
    def _ranges(self) -> list:
        ranges = getattr(self._open, "ranges", None)
        if ranges is None:
            ranges = self._open.ranges = []
        return ranges

    def _enter(self, key, name: str) -> None:
        r = trace_range(name)
        r.__enter__()
        self._ranges().append((key, r))

    def _exit(self, key) -> None:
        ranges = self._ranges()
        if not any(k == key for k, _ in ranges):
            return
        while ranges:  # children abandoned by an exception end with it
            k, r = ranges.pop()
            r.__exit__(None, None, None)
            if k == key:
                return

    def call_begins(self, record) -> None:
        self._enter(record.index, f"{_CALL}{record.index}")

    def call_ends(self, record, args, kwargs, output) -> None:
        self._exit(record.index)

    def phase_begins(self, kind: str) -> None:
        self._enter(kind, f"{_PHASE}{kind}")

    def phase_ends(self, kind: str) -> None:
        self._exit(kind)


def _event(e) -> TraceEvent:
    start = e.start_ns()
    return TraceEvent(e.name(), e.start_thread_id(), start, start + e.duration_ns(), e.sequence_nr(),
                      e.fwd_thread_id(), e.correlation_id(), e.linked_correlation_id(), kineto_device_work(e))


def attribute(events: list[TraceEvent], call_of: Callable[[int], tuple[str, str]], *, outside_to_root: bool,
              device: bool) -> KernelTimes:
    """Charge every kernel of ``events`` (see the module docstring); ``call_of(i)`` is the
    (path, phase) of the call log's ``i``-th call; ``device``: kernels are the device events
    (else the CPU ops' self times)."""
    cpu = sorted((e for e in events if not e.on_device), key=lambda e: (e.thread, e.start, -e.end))
    parent = _parents(cpu)
    # (thread, sequence number) -> index of the forward op that made the node
    forward_op: dict[tuple[int, int], int] = {}
    for i, e in enumerate(cpu):
        if e.seq >= 0 and not e.fwd_thread and not e.name.startswith(BACKWARD_NODE):
            forward_op.setdefault((e.thread, e.seq), i)
    owners: dict[int, tuple | None] = {}

    def owner(i: int) -> tuple | None:
        path = []
        found = None
        while i >= 0:
            if i in owners:
                found = owners[i]
                break
            path.append(i)
            name = cpu[i].name
            if name.startswith(_CALL):
                found = call_of(int(name[len(_CALL):]))
                break
            if name.startswith(_PHASE):
                found = ("", name[len(_PHASE):])
                break
            if name.startswith(_OPTIMIZER_STEP):  # torch's range around step(): ours starts inside it
                found = ("", "step")
                break
            if name.startswith(BACKWARD_NODE) or (cpu[i].fwd_thread and cpu[i].seq >= 0):
                # the engine's range around a node, or the node's own (which keeps its sequence
                # number where a range opened inside the engine's made the engine's lose it)
                found = _node_owner(cpu[i], forward_op, owner)
                break
            i = parent[i]
        else:
            found = ("", "forward") if outside_to_root else None
        for j in path:
            owners[j] = found
        return found

    chains: dict[int, tuple[str, ...]] = {}  # an op launches many kernels: its chain read once

    def ops_above(i: int) -> tuple[str, ...]:
        known = chains.get(i)
        if known is None:
            known = chains[i] = _ops_above(cpu, parent, i)
        return known

    times = KernelTimes("cuda" if device else "cpu")

    def charge(i: int, name: str, seconds: float) -> None:
        where = owner(i) if i >= 0 else None
        if where is None:
            acc = times.unassigned.setdefault(name, [0, 0.0])
        else:
            acc = times.kernels.setdefault((*where, name, ops_above(i)), [0, 0.0])
        acc[0] += 1
        acc[1] += seconds

    if device:
        # a kernel launched with no op around it (compiled code's) links to the range of ours around it
        by_corr = {e.corr: i for i, e in enumerate(cpu) if e.corr > 0}
        on_device = [e for e in events if e.on_device]
        for e in on_device:
            charge(by_corr.get(e.linked, -1), e.name, (e.end - e.start) / 1e9)
        times.busy = busy_seconds(on_device)
    else:
        own = [e.end - e.start for e in cpu]
        for i, p in enumerate(parent):
            if p >= 0:
                own[p] -= cpu[i].end - cpu[i].start
        for i, e in enumerate(cpu):
            if not e.name.startswith((_CALL, _PHASE)) and own[i] > 0:
                charge(i, e.name, own[i] / 1e9)
    return times


def busy_seconds(kernels: list[TraceEvent]) -> float:
    """Seconds in which at least one of ``kernels`` ran (overlapping intervals merged).

    >>> busy_seconds([TraceEvent("a", 0, 0, 4, on_device=True), TraceEvent("b", 0, 2, 6, on_device=True),
    ...               TraceEvent("c", 0, 10, 11, on_device=True)])
    7e-09
    """
    total, end = 0, None
    for e in sorted(kernels, key=lambda e: e.start):
        if end is None or e.start >= end:
            total += e.end - e.start
            end = e.end
        elif e.end > end:
            total += e.end - end
            end = e.end
    return total / 1e9


def simulated_kernels(events: list[TraceEvent], share: float) -> list[TraceEvent]:
    """CUPTI-shaped kernels for a CPU trace (a fake device clock's): each leaf aten operator
    that took time launches one kernel lasting ``share`` of its host time, which starts when
    both it was launched and the one stream is free, as on a GPU's stream; the stream is idle
    between kernels for the rest of the host's time, as a launch-bound GPU is.

    >>> ops = [TraceEvent("aten::mm", 1, 0, 100, corr=1), TraceEvent("aten::relu", 1, 100, 110, corr=2)]
    >>> [(k.name, k.start, k.end, k.linked) for k in simulated_kernels(ops, 0.5)]
    [('sim::mm', 0, 50, 1), ('sim::relu', 100, 105, 2)]
    """
    cpu = sorted((e for e in events if not e.on_device), key=lambda e: (e.thread, e.start, -e.end))
    parents = set(_parents(cpu))
    kernels, free = [], 0
    for i, e in sorted(enumerate(cpu), key=lambda ie: ie[1].start):
        if i in parents or not e.name.startswith("aten::") or e.end <= e.start:
            continue
        start = max(e.start, free)
        free = start + int((e.end - e.start) * share)
        kernels.append(TraceEvent("sim::" + e.name[len("aten::"):], 0, start, free, linked=e.corr, on_device=True))
    return kernels


def _ops_above(cpu: list[TraceEvent], parent: list[int], i: int) -> tuple[str, ...]:
    """The ops above event ``i`` up to the range or node that owns it, innermost first, as
    the counting pass names them (``aten.mm``)."""
    chain: list[str] = []
    while i >= 0 and len(chain) < _CHAIN:
        name = cpu[i].name
        if name.startswith((_CALL, _PHASE, BACKWARD_NODE)):
            break
        if "::" in name:
            chain.append(name.replace("::", "."))
        i = parent[i]
    return tuple(chain)


def _node_owner(node: TraceEvent, forward_op: dict, owner: Callable) -> tuple | None:
    """A backward node's (path, "backward"): the module whose forward op made it (the root's
    for a parameter's gradient accumulation), None when no module call made it (a loss
    computed outside the model)."""
    i = forward_op.get((node.fwd_thread, node.seq))
    if i is None:
        return ("", "backward") if node.name.endswith(_ACCUMULATE_GRAD) else None
    made = owner(i)
    return (made[0], "backward") if made is not None else None


def _parents(cpu: list[TraceEvent]) -> list[int]:
    """Each event's enclosing event on its thread (-1 for none); ``cpu`` sorted by thread,
    start, then longest first.

    >>> node, span, mm, after = (TraceEvent("node", 1, 0, 10), TraceEvent("flopsight/phase/backward", 1, 2, 20),
    ...                          TraceEvent("mm", 1, 3, 5), TraceEvent("reduce", 1, 12, 14))
    >>> _parents([node, span, mm, after])  # mm is the node's, the reduction after it the span's
    [-1, -1, 0, 1]
    """
    parent = [-1] * len(cpu)
    stack: list[int] = []
    thread = None
    for i, e in enumerate(cpu):
        if e.thread != thread:
            stack, thread = [], e.thread
        while stack and cpu[stack[-1]].end <= e.start:
            stack.pop()
        k = len(stack)
        if e.name.startswith(_PHASE):
            # the backward span opens inside the first node the engine runs (a pre-hook) and
            # outlives it: it goes beneath the ranges it outlives, which keep their ops
            while k and cpu[stack[k - 1]].end < e.end:
                k -= 1
        if k:
            parent[i] = stack[k - 1]
        stack.insert(k, i)
    return parent
