"""One capture: sources installed on start, removed on stop, raw facts out.

A session composes capture sources (objects with ``start(ctx)`` / ``stop(ctx)``) around one
shared :class:`~.context.CaptureContext`: the module tracker, the span timer and the
optimizer hooks always; when counting, the counting dispatch mode, the units, module rules
and autograd functions too. Adding a measurement is adding a source. The profiler runs one
counting session and, where it can, a separate timing session (module hooks only), then
merges them with :func:`~.build.build_result`.

Phases: ``forward``, ``backward`` (charged by autograd node), ``recompute`` (a forward re-run
during backward: activation checkpointing) and ``step`` (inside ``optimizer.step()``); see
:mod:`.attribution`.

Sessions nest: while a session runs inside another (``get_model_profile`` inside a running
``FlopsProfiler``), the outer one records nothing, so the inner one's passes never leak
into it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from ..formulas.registry import Registry
from ..result.device_usage import DeviceUsage
from ..result.stats import Stats
from ..result.timeline import Timeline
from .attribution import Attribution
from .autograd_functions import AutogradFunctions
from .._torch_private import storage_key
from .collectives import CommunicationSource, merged_flights
from .storages import MemorySource, tensor_bytes
from .wrappers import inner_torch_optimizer, wrapper_gradients
from .context import CaptureContext
from .counting import CountingSource
from .nvml import DeviceUsageSource
from .functions import FunctionInterceptor
from .module_rules import ModuleRules
from .modules import ModuleInfo, ModuleTracker
from .optimizer import OptimizerSteps
from .spans import SpanTimer
from .placement import resolve_timeline
from .timing import Clock, CudaEventClock
from .units import UnitSource

__all__ = ["CaptureSession", "RawCapture"]

_active = threading.local()  # .sessions: the sessions running on this thread, innermost last


@dataclass
class RawCapture:
    """What one session measured, keyed by (module path, phase)."""

    #: per (path, phase), operator name -> cost (latency: the op's own time)
    ops: dict[tuple[str, str], dict[str, Stats]] = field(default_factory=dict)
    #: per (path, phase), per op: bytes read and written (ops that moved any)
    bytes_moved: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    #: per (path, phase): seconds inside the module's own code (its children's spans left out)
    latency: dict[tuple[str, str], float] = field(default_factory=dict)
    calls: dict[tuple[str, str], int] = field(default_factory=dict)
    unsupported: dict[str, int] = field(default_factory=dict)
    #: wall-clock seconds of each "forward" (top-level call), "backward" (pass), "step" and
    #: "iteration" (start to stop) span, the profiler's own overhead subtracted
    spans: dict[str, list[float]] = field(default_factory=dict)
    #: per top-level forward call: (module path, cost, batch size)
    top_calls: list[tuple[str, Stats, int | None]] = field(default_factory=list)
    first_inputs: tuple | None = None
    error: str | None = None
    #: memory, when tracked: activations per path, peaks per (path, phase), and the totals
    memory: dict | None = None
    #: every collective: (module path, phase, kind, payload bytes per rank, group size, seconds,
    #: seconds of it the rank spent running ops)
    collectives: list[tuple[str, str, str, int, int, float, float]] = field(default_factory=list)
    #: a CUDA run's GPU usage (a DeviceUsage), None elsewhere
    device_usage: DeviceUsage | None = None
    #: when each module call, span and collective ran (None before the span started)
    timeline: Timeline | None = None


class CaptureSession:
    """Composes the capture sources for one model between ``start`` and ``stop``.

    ``count``: install the counting sources (else module spans only, for a timing pass).
    ``outside_to_root``: ops outside every module call are the root's (a profiled call of
    the model's own method) rather than not the model's (user code around it).
    ``optimizer``: only this optimizer's ``step()`` is the step phase (default: any).
    ``timeline``: resolve the timeline (a counting pass timed by a separate pass skips it,
    unless it has collectives to hand over).
    """

    def __init__(
        self,
        infos: dict[str, ModuleInfo],
        *,
        registry: Registry,
        clock: Clock,
        count: bool = True,
        ignore: Callable[[nn.Module], bool] = lambda m: False,
        optimizer: torch.optim.Optimizer | None = None,
        outside_to_root: bool = False,
        memory: bool = False,
        timeline: bool = True,
    ):
        self.ctx = ctx = CaptureContext.create(clock, registry, outside_to_root=outside_to_root)
        self.tracker = ModuleTracker(infos, ignore)
        functions = FunctionInterceptor()
        self.spans = SpanTimer(functions if count else None)
        steps = OptimizerSteps(self.spans, optimizer, functions if count else None)
        sources: list = [self.tracker, steps]
        # each parameter once, with the first path it has (a tied weight's first owner)
        owners = {id(p): (p, path) for path, info in reversed(infos.items())
                  for p in info.module._parameters.values() if p is not None}
        self._params = [p for p, _ in owners.values()]
        if count:
            attribution = Attribution(ctx, self.tracker.owner_of, {k: path for k, (_, path) in owners.items()})
            counting = CountingSource(attribution)
            if registry.has_module_rules():  # listening to every module call costs: only if needed
                rules = ModuleRules(attribution, registry)
                self.tracker.listeners.append(rules)
                sources.append(rules)
            # each parameter as this rank holds it (an FSDP2 shard) -> its path, read only
            # once a process group exists
            self.communication = CommunicationSource(
                attribution, counting, lambda: {storage_key(_local_shard(p)): path for p, path in owners.values()})
            if memory:
                params = self._params
                self.memory = MemorySource(self.tracker, {storage_key(p) for p in params},
                                           lambda: tensor_bytes(_gradients(params, optimizer)))
                self.tracker.listeners.append(self.memory)
                steps.listeners.append(self.memory)
                counting.memory = self.memory
                sources.append(self.memory)
            sources += [
                UnitSource(attribution, functions, registry.units(), counting),
                AutogradFunctions(attribution, registry.functions()),
                self.communication,  # asks the counting mode to hand it the collectives
                functions,  # after the sources that register handlers with it
                counting,
            ]
        else:
            self.communication = None
        if not (count and memory):
            self.memory = None
        self._optimizer = optimizer
        self._timeline = timeline
        # a CUDA clock's device: its utilisation through NVML and the allocator's peak
        self.device_usage = DeviceUsageSource(clock.device or torch.device("cuda")) \
            if isinstance(clock, CudaEventClock) else None
        if self.device_usage is not None:
            sources.append(self.device_usage)
        self._sources = [*sources, self.spans]
        self._started: list = []
        self._host_origin = 0.0  # time.perf_counter() when the span started: collectives' origin

    @property
    def clock(self) -> Clock:
        return self.ctx.clock

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        sessions = _sessions()
        try:
            for source in self._sources:
                source.start(self.ctx)
                self._started.append(source)
        except BaseException:
            self._stop_sources()
            raise
        self._host_origin = time.perf_counter()  # the span timer, started last, has just begun
        if sessions:
            sessions[-1].ctx.paused = True
        sessions.append(self)

    def stop(self) -> RawCapture:
        """Remove everything that was installed and resolve the measurements."""
        sessions = _sessions()
        if self in sessions:
            sessions.remove(self)
            if sessions:
                sessions[-1].ctx.paused = False
        self._stop_sources()
        self.ctx.clock.finish()
        return self._resolve()

    def snapshot(self) -> RawCapture:
        """What was measured so far, without stopping (completed calls and spans only)."""
        self.ctx.clock.finish()
        return self._resolve()

    def _stop_sources(self) -> None:
        errors = []
        while self._started:  # in reverse order of starting: modes leave the stack in order
            try:
                self._started.pop().stop(self.ctx)
            except Exception as e:  # remove everything else anyway
                errors.append(e)
        if errors:
            raise errors[0]

    # -- resolution ---------------------------------------------------------------------
    def _seconds(self, start, end, ovh_start: float, ovh_end: float) -> float:
        """A span in seconds, minus the profiler's own time inside it (where measurable)."""
        clock = self.ctx.clock
        overhead = ovh_end - ovh_start if clock.subtracts_overhead else 0.0
        return max(clock.seconds(start, end) - overhead, 0.0)

    def _memory_figures(self) -> dict:
        mem, params = self.memory, self._params
        return {
            "activations": dict(mem.activations),
            "peaks": dict(mem.peaks),
            "totals": {
                "params": tensor_bytes(_local_shard(p) for p in params),
                "grads": max(mem.grads_at_step, tensor_bytes(_gradients(params, self._optimizer))),
                "optimizer_state": tensor_bytes(_optimizer_state_tensors(self._optimizer)),
                "activations": sum(mem.activations.values()),
                "peak": max(mem.phase_peaks.values(), default=0),
                "phase_peaks": dict(mem.phase_peaks),
            },
        }

    def _resolve(self) -> RawCapture:
        ctx = self.ctx
        clock = ctx.clock
        raw = RawCapture(
            ops=ctx.tally.resolve(clock.seconds, clock.scale),
            bytes_moved=ctx.tally.bytes_moved(),
            unsupported=dict(ctx.tally.unsupported),
            first_inputs=ctx.first_inputs,
            error=ctx.error,
        )
        log = self.tracker.log
        span = [0.0] * len(log)
        for rec in log:
            key = (rec.path, rec.phase)
            raw.calls[key] = raw.calls.get(key, 0) + 1
            if rec.end is not None:
                span[rec.index] = self._seconds(rec.start, rec.end, rec.ovh_start, rec.ovh_end)
        children = [0.0] * len(log)
        for rec in reversed(log):  # children are logged after their parent
            if rec.end is None:
                continue
            key = (rec.path, rec.phase)
            raw.latency[key] = raw.latency.get(key, 0.0) + max(span[rec.index] - children[rec.index], 0.0)
            if rec.parent >= 0:
                children[rec.parent] += span[rec.index]
        tops = ctx.tally.tops
        for i, rec in enumerate(self.tracker.top_calls):
            macs, flops = tops[i] if i < len(tops) else (0, 0)
            raw.top_calls.append((rec.path, Stats(macs, flops, span[rec.index], 1), rec.batch_size))
        # forward wall time: the top-level forward calls (the model, or whatever modules
        # of it the caller ran directly)
        raw.spans["forward"] = [span[r.index] for r in log if r.parent < 0 and r.phase == "forward"]
        calls = []
        if self.communication is not None and self.communication.calls:
            calls = self.communication.resolved_calls()
            raw.collectives = [(c.path, c.phase, c.kind, c.bytes, c.group_size, c.seconds, min(c.overlapped, c.seconds))
                               for c in calls]
            # communication as wall time: its flights merged, and the ops run meanwhile
            flights = merged_flights(calls)
            raw.spans["communication"] = [end - start for start, end, _ in flights]
            raw.spans["communication_overlapped"] = [overlapped for _, _, overlapped in flights]
        if self.memory is not None:
            raw.memory = self._memory_figures()
        if self.device_usage is not None:
            raw.device_usage = self.device_usage.usage
        timed = [(s, self._seconds(*s[1:])) for s in self.spans.spans]
        for (kind, *_), seconds in timed:
            raw.spans.setdefault(kind, []).append(seconds)
        origin = self._origin()
        # without a timeline of its own (a counting pass timed by another), still the one
        # that carries its collectives onto the timing pass's
        if origin is not None and (self._timeline or calls):
            raw.timeline = resolve_timeline(log, span, timed, calls, clock=clock, origin=origin,
                                            host_origin=self._host_origin)
        return raw

    def _origin(self) -> tuple | None:
        """(stamp, overhead) where the span started: its iteration's start (still open in a
        snapshot); None before it started."""
        for kind, start, _, overhead, _ in self.spans.spans:
            if kind == "iteration":
                return start, overhead
        return self.spans.opened("iteration")


def _optimizer_state_tensors(optimizer) -> list:
    """The tensors of the (inner) torch optimizer's state: each rank's shard under ZeRO."""
    inner = inner_torch_optimizer(optimizer)
    if inner is None:
        return []
    return [v for state in inner.state.values() for v in state.values() if isinstance(v, torch.Tensor)]


def _local_shard(p):
    """What this rank holds of a parameter: a ZeRO-3 partition, an FSDP2 shard, or all of it."""
    if hasattr(p, "to_local"):  # a DTensor (FSDP2, tensor parallelism)
        return p.to_local()
    return getattr(p, "ds_tensor", None) if getattr(p, "ds_tensor", None) is not None else p


def _gradients(params, optimizer) -> list:
    """The gradients held by the model's parameters, by a wrapper's own buffers (ZeRO's) and
    by the (inner) torch optimizer's parameters."""
    grads = [p.grad for p in params if p.grad is not None] + wrapper_gradients(optimizer)
    inner = inner_torch_optimizer(optimizer)
    if inner is not None:
        grads += [p.grad for group in inner.param_groups for p in group["params"] if p.grad is not None]
    return grads


def _sessions() -> list:
    sessions = getattr(_active, "sessions", None)
    if sessions is None:
        sessions = _active.sessions = []
    return sessions
