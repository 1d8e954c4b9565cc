"""From raw captures to a :class:`~flopsight.result.ProfileResult`: reads each source's part
(:mod:`.raw`) and turns it into the result's records."""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable

from torch import nn

from ...result.communication import KINDS, Collective
from ...result.device_usage import DeviceUsage
from ...result.kernels import Kernel, KernelSummary
from ...result.memory import MemoryTotals, ModuleMemory
from ...result.metadata import Metadata
from ...result.profile_result import ProfileResult
from ...result.records import ModelCall, ModuleStats
from ...result.stats import Stats, make_stats
from ...result.timeline import Span, Timeline
from ...result.tree import PHASES
from ..charging.calls import ModuleCalls
from ..charging.counts import Counts, OpTimes
from ..model.modules import ModuleInfo
from ..sources.collectives import Communication
from ..sources.kernels import KernelTimes
from ..sources.memory import MemoryFigures
from ..sources.spans import SpanTimes
from .raw import RawCapture

__all__ = ["build_result", "device_timed"]

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
    """Merge a counting capture (and optionally a separate timing capture) into a result. The
    operators' times in the phases the modules' spans time come from the pass that timed the
    modules where it timed them (:class:`OpTimes`), else from the counting pass
    (``metadata.timing.ops`` says which)."""
    times = times or counts
    counted = counts.get(Counts) or Counts()
    op_times = times.get(OpTimes) if times is not counts else None
    ops_from = "timed" if times is counts or op_times is not None else "counting"
    metadata = dataclasses.replace(metadata, timing=dataclasses.replace(metadata.timing, ops=ops_from))
    module_calls = counts.get(ModuleCalls) or ModuleCalls()
    timed_calls = times.get(ModuleCalls) or ModuleCalls()
    memory = counts.get(MemoryFigures)
    kernel_times = times.get(KernelTimes) or counts.get(KernelTimes)
    kernels, op_kernel_time = _kernels(kernel_times, counted.ops) if kernel_times is not None else ({}, {})
    phases_of: dict[str, list[str]] = {}
    for path, phase in {*counted.ops, *module_calls.calls, *timed_calls.latency}:
        phases_of.setdefault(path, []).append(phase)
    modules: dict[str, ModuleStats] = {}
    no_ops: dict = {}
    for path, info in infos.items():
        phases, ops, moved = {}, {}, {}
        for phase in sorted(phases_of.get(path, ()), key=_PHASE_ORDER.__getitem__):
            key = (path, phase)
            if key in counted.bytes_moved:
                moved[phase] = counted.bytes_moved[key]
            op_stats = counted.ops.get(key, no_ops)
            macs = flops = 0
            latency = 0.0
            for s in op_stats.values():
                macs += s[0]
                flops += s[1]
                latency += s[2]
            if phase in _SPANNED:
                latency = timed_calls.latency.get(key, 0.0)
                if op_times is not None:
                    op_stats = _timed_ops(op_stats, op_times.seconds.get(key, {}))
                    # the stamps' estimated cost taken out never leaves less than its ops took
                    latency = max(latency, sum(st.latency for st in op_stats.values()))
            n_calls = module_calls.calls.get(key, timed_calls.calls.get(key, 0))
            phases[phase] = make_stats(macs, flops, latency, n_calls)
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
            memory=_module_memory(memory, path),
            bytes_moved=moved,
            layer=info.layer,
            params_shared=info.params_shared,
            kernels=kernels.get(path, {}),
            op_kernel_time=op_kernel_time.get(path, {}),
        )
    error = module_calls.error or (timed_calls.error if times is not counts else None)
    if error and not metadata.error:
        metadata = dataclasses.replace(metadata, error=error)
    if counts.get(Counts) is not None:
        metadata = dataclasses.replace(metadata, backend=counted.backend, backend_note=counted.backend_note,
                                       on_values=counted.on_values)
    calls = _model_calls(module_calls, counted)
    spans = _spans(counts)
    # the profiler's own time left in the phases: of the pass that timed them
    spans.update(_profiler_spans(times, counted if times is counts else None, memory is not None,
                                 metadata.timing.clock))
    if times is not counts:  # latencies from the timing pass, counts from the counting pass
        for i, (path, seconds, _) in enumerate(timed_calls.top_calls[: len(calls)]):
            if path == calls[i].path:
                calls[i] = dataclasses.replace(calls[i], stats=calls[i].stats._replace(latency=seconds))
        spans.update(_spans(times))
    totals = MemoryTotals.from_dict(memory.totals) if memory is not None else None
    usage = device_usage(counts.get(DeviceUsage), times.get(DeviceUsage))
    timeline = counts.get(Timeline) if times is counts else _timeline(counts.get(Timeline), times.get(Timeline))
    communication = counts.get(Communication)
    comms = _collectives(communication.records) if communication is not None else ()
    summary = None
    if kernel_times is not None:
        summary = KernelSummary(kernel_times.source, kernel_times.seconds,
                                {name: Kernel(*v) for name, v in kernel_times.unassigned.items()}, kernel_times.busy)
    return ProfileResult(modules, dict(counted.unsupported), metadata, spans=spans, calls=calls,
                         comms=comms, memory=totals, device_usage=usage, timeline=timeline, kernels=summary)


def _timed_ops(counted: dict[str, Stats], timed: dict[str, float]) -> dict[str, Stats]:
    """The ops ``counted`` in one module's phase, each with its time in the pass that timed the
    module (``timed``, by name). The timed pass stamps the parts of a call the counting pass
    counted whole (a registered ``autograd.Function`` or module) under their own names: their
    time goes to the counted ops it saw none of, in proportion to their counting-pass times
    (all of it to the one such op there usually is). So the module's ops add up to what the
    timed pass saw run in it.

    >>> counted = {"aten.mm": Stats(8, 16, 3.0, 1), "Square": Stats(0, 4, 1.0, 1)}
    >>> timed = _timed_ops(counted, {"aten.mm": 2.0, "aten.mul": 0.5})
    >>> timed["aten.mm"].latency, timed["Square"].latency
    (2.0, 0.5)
    """
    unseen = [name for name in counted if name not in timed]
    left = sum(seconds for name, seconds in timed.items() if name not in counted)
    weight = sum(counted[name].latency for name in unseen)
    out = {}
    for name, stats in counted.items():
        if name in timed:
            out[name] = stats._replace(latency=timed[name])
        else:
            share = stats.latency / weight if weight > 0 else 1 / len(unseen)
            out[name] = stats._replace(latency=left * share)
    return out


def device_timed(kernel_pass: RawCapture, total: float) -> RawCapture:
    """A kernel pass's capture (module calls with torch.profiler recording kernels) timed as
    a device's (docs/conventions/timing.md): each module's own time is its own kernels'
    device time, and the forward's is ``total``, an uninstrumented call's; the root's own
    time is then what its submodules' kernels leave of it, the device's idle time included.

    >>> from flopsight.capture.charging.calls import CallRecord, TopCall
    >>> root, fc = CallRecord(0, "", "forward", None, -1, None), CallRecord(1, "fc", "forward", None, 0, None)
    >>> calls = ModuleCalls({("", "forward"): 1, ("fc", "forward"): 1}, {("", "forward"): 9.0, ("fc", "forward"): 7.0},
    ...                     [TopCall("", 16.0, 2)], log=[root, fc], seconds=[16.0, 7.0])
    >>> kernels = KernelTimes("cuda", {("fc", "forward", "gemm", ()): [1, 2.0], ("", "forward", "add", ()): [1, 1.0]},
    ...                       busy=3.0)
    >>> timed = device_timed(RawCapture(calls, kernels), 5.0).get(ModuleCalls)
    >>> timed.latency, timed.top_calls, timed.seconds
    ({('', 'forward'): 3.0, ('fc', 'forward'): 2.0}, [TopCall(path='', seconds=5.0, batch_size=2)], [5.0, 7.0])
    """
    calls, kernels = kernel_pass.get(ModuleCalls), kernel_pass.get(KernelTimes)
    if calls is None or kernels is None:  # (a kernel pass collects both)
        raise ValueError(f"kernel_pass: expected module calls and kernels, got {kernel_pass!r}")
    own: dict[tuple[str, str], float] = {}
    for (path, phase, _, _), (_, seconds) in kernels.kernels.items():
        own[(path, phase)] = own.get((path, phase), 0.0) + seconds
    latency = {key: own.get(key, 0.0) for key in calls.latency}
    roots = {r.path for r in calls.log if r.parent < 0}
    below = sum(seconds for (path, phase), seconds in own.items() if phase == "forward" and path not in roots)
    for path in roots:
        latency[(path, "forward")] = max(total - below, 0.0)
    seconds = list(calls.seconds)
    for r in calls.log:
        if r.parent < 0 and r.phase == "forward":
            seconds[r.index] = total
    timed = dataclasses.replace(calls, latency=latency, seconds=seconds,
                                top_calls=[top._replace(seconds=total) for top in calls.top_calls])
    return RawCapture(timed, *(part for part in kernel_pass if not isinstance(part, ModuleCalls)))


def _kernels(times: KernelTimes, ops: dict) -> tuple[dict, dict]:
    """Per path, per phase: its kernels (name -> Kernel, most time first), and each operator's
    kernel seconds: a kernel counts for the outermost op above it that the counting pass
    charged to the same module and phase (``aten.linear`` runs ``aten.addmm``, which the
    counting pass saw), else for the innermost op above it."""
    kernels: dict[str, dict[str, dict[str, list]]] = {}
    op_time: dict[str, dict[str, dict[str, float]]] = {}
    for (path, phase, name, chain), (calls, seconds) in times.kernels.items():
        acc = kernels.setdefault(path, {}).setdefault(phase, {}).setdefault(name, [0, 0.0])
        acc[0] += calls
        acc[1] += seconds
        counted = ops.get((path, phase), {})
        op = next((o for o in reversed(chain) if o in counted), chain[0] if chain else "(no operator)")
        by_op = op_time.setdefault(path, {}).setdefault(phase, {})
        by_op[op] = by_op.get(op, 0.0) + seconds
    sorted_kernels = {path: {phase: {name: Kernel(*v) for name, v in sorted(k.items(), key=lambda kv: -kv[1][1])}
                             for phase, k in phases.items()}
                      for path, phases in kernels.items()}
    return sorted_kernels, op_time


def device_usage(counted: DeviceUsage | None, timed: DeviceUsage | None) -> DeviceUsage | None:
    """The timing pass's GPU figures where there is one, with the counting pass's allocator
    peak: the counting pass runs first, so the timing pass never raises the process's peak
    and finds none of its own.

    >>> usage = device_usage(DeviceUsage("cuda:0", allocator_peak=4096), DeviceUsage("cuda:0", samples=3))
    >>> usage == DeviceUsage("cuda:0", samples=3, allocator_peak=4096)
    True
    """
    if timed is None or timed is counted:
        return counted
    if timed.allocator_peak is None and counted is not None and counted.allocator_peak is not None:
        return dataclasses.replace(timed, allocator_peak=counted.allocator_peak)
    return timed


def _model_calls(module_calls: ModuleCalls, counted: Counts) -> list[ModelCall]:
    """One per top-level forward call: its cost from the counts, its time and batch size
    from the call tracker."""
    tops = counted.tops
    calls = []
    for i, (path, seconds, size) in enumerate(module_calls.top_calls):
        macs, flops = tops[i] if i < len(tops) else (0, 0)
        calls.append(ModelCall(path, Stats(macs, flops, seconds, 1), size))
    return calls


def _spans(raw: RawCapture) -> dict[str, list[float]]:
    """Wall-clock seconds of each span kind: the top-level forward calls, the collectives'
    flights, then the span timer's kinds in the order one first ended."""
    spans: dict[str, list[float]] = {}
    module_calls = raw.get(ModuleCalls)
    if module_calls is not None:
        spans["forward"] = module_calls.forward_spans
    communication = raw.get(Communication)
    if communication is not None:
        spans.update(communication.spans())
    timed = raw.get(SpanTimes)
    if timed is not None:
        for kind, seconds in timed.seconds().items():
            spans.setdefault(kind, []).extend(seconds)
    return spans


#: the Python backend's host seconds per op and per module call that it cannot measure itself
#: (torch's way into the dispatch mode and its hook paths, and out): memory tracked ->
#: (per op, per module call), from benchmarks/host_cost.py's single passes on a 2-vCPU machine
#: (docs/conventions/timing.md#the-step-anatomy): an estimate. The native recorder times its
#: own callbacks in every run instead (Counts.profiler_seconds)
UNMEASURED_COST = {False: (4.9e-6, 3.0e-6), True: (5.6e-6, 3.9e-6)}
#: the clocks whose time is the hardware's (a fake clock's ticks are not): the estimate applies
_REAL_CLOCKS = ("perf_counter", "cuda_events", "fake_device")


def _profiler_spans(raw: RawCapture, counted: Counts | None, memory: bool, clock: str) -> dict[str, list[float]]:
    """``profiler.<phase>`` (forward, backward, step): one value each, the profiler's own
    seconds left in that phase's wall time: its measured host time inside the phase's spans
    where the clock did not take it out (a device's clock), and, on a real clock, for the ops
    and module calls ``counted`` in the same pass: the native recorder's own time in its
    callbacks, measured in this run (``counted.profiler_seconds``), else (the Python backend)
    :data:`UNMEASURED_COST`. Phases with none are left out (a fake clock's: its tests' results
    stay as they were).

    >>> from flopsight.capture.charging.calls import CallRecord
    >>> from flopsight.capture.sources.spans import TimedSpan
    >>> root = CallRecord(0, "", "forward", None, -1, None)
    >>> root.ovh_start, root.ovh_end = 1.0, 1.5
    >>> step = TimedSpan(("step", None, None, 2.0, 2.25), 3.0)
    >>> calls = ModuleCalls({("", "forward"): 1}, log=[root], seconds=[4.0])
    >>> _profiler_spans(RawCapture(calls, SpanTimes([step], subtracted=False)), None, False, "cuda_events")
    {'profiler.forward': [0.5], 'profiler.step': [0.25]}
    >>> counted = Counts(ops={("", "forward"): {"aten.addmm": Stats(0, 0, 1e-3, 1000)}})
    >>> raw = RawCapture(calls, SpanTimes([step]))
    >>> _profiler_spans(raw, counted, False, "perf_counter")["profiler.forward"]  # 1000 ops, 1 call: estimated
    [0.004903]
    >>> measured = dataclasses.replace(counted, backend="native", profiler_seconds={"forward": 2e-3, "recompute": 1e-3})
    >>> _profiler_spans(raw, measured, False, "perf_counter")
    {'profiler.forward': [0.002], 'profiler.backward': [0.001]}
    """
    timed, module_calls = raw.get(SpanTimes), raw.get(ModuleCalls)
    if timed is None:
        return {}
    left = {"forward": 0.0, "backward": 0.0, "step": 0.0}
    if not timed.subtracted:  # the clock left the profiler's measured host time in the spans
        for (kind, _, _, ovh_start, ovh_end), _ in timed.timed:
            if kind in ("backward", "step"):
                left[kind] += ovh_end - ovh_start
        if module_calls is not None:
            left["forward"] += sum(r.ovh_end - r.ovh_start for r in module_calls.log
                                   if r.parent < 0 and r.phase == "forward")
    if counted is not None and clock in _REAL_CLOCKS and counted.profiler_seconds is not None:
        for phase, seconds in counted.profiler_seconds.items():  # the recorder timed itself
            phase = "backward" if phase == "recompute" else phase
            if phase in left:
                left[phase] += seconds
    elif counted is not None and clock in _REAL_CLOCKS:
        per_op, per_call = UNMEASURED_COST[memory]
        for (_, phase), ops in counted.ops.items():
            phase = "backward" if phase == "recompute" else phase
            if phase in left:
                left[phase] += per_op * sum(s.calls for s in ops.values())
        if module_calls is not None:  # recomputed forward calls run in the backward
            for (_, phase), n in module_calls.calls.items():
                if phase in ("forward", "recompute"):
                    left["forward" if phase == "forward" else "backward"] += per_call * n
    return {f"profiler.{phase}": [seconds] for phase, seconds in left.items() if seconds > 0}


def _module_memory(memory: MemoryFigures | None, path: str) -> ModuleMemory | None:
    """A module's own saved activations and its peaks, forward and backward (None untracked)."""
    if memory is None:
        return None
    peaks = memory.peaks
    return ModuleMemory(memory.activations.get(path, 0), peaks.get((path, "forward"), 0),
                        peaks.get((path, "backward"), 0), memory.temporaries.get(path, 0))


def _collectives(calls) -> tuple[Collective, ...]:
    """One record per (module, phase, kind, group size, peer), summed over the calls, in phase
    then kind order."""
    acc: dict[tuple, list] = {}
    for path, phase, kind, nbytes, group_size, seconds, overlapped, peer in calls:
        a = acc.setdefault((path, phase, kind, group_size, peer), [0, 0, 0.0, 0.0])
        a[0] += 1
        a[1] += nbytes
        a[2] += seconds
        a[3] += overlapped
    order = {k: i for i, k in enumerate(KINDS)}
    keys = sorted(acc, key=lambda k: (_PHASE_ORDER.get(k[1], len(_PHASE_ORDER)), order.get(k[2], len(order)), k[4]))
    return tuple(Collective(kind, path, phase, n_calls, nbytes, seconds, group, seconds - overlapped, overlapped, peer)
                 for (path, phase, kind, group, peer), (n_calls, nbytes, seconds, overlapped) in
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
