"""One capture: the plan's sources made, started and stopped around the profiled code, and
their parts collected into a :class:`~.raw.RawCapture`.

A session builds one shared :class:`~.context.CaptureContext` (clock, overhead, the module
stack, the events sources subscribe to, the attribution object when it counts), makes the
sources :func:`~.plan.plan` picks for its :class:`~.plan.CaptureOptions`, starts them in the
table's order and stops them in the reverse one; each source's ``collect`` returns its own
part. The timeline is placed from the parts of the call tracker, the span timer and the
collectives. The profiler runs one counting session and, where it can, a separate timing
session (module spans only), then builds the result from both (:mod:`.build`).

Phases: ``forward``, ``backward`` (charged by autograd node), ``recompute`` (a forward re-run
during backward: activation checkpointing) and ``step`` (inside ``optimizer.step()``); see
:mod:`.attribution`.

Sessions nest and overlap freely, none pausing another: each counts what runs inside its own
model during its own span (:mod:`.running`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ...formulas.registry import Registry
from ...torch_support import warn_if_untested
from ..assembly.placement import resolve_timeline
from ..assembly.raw import RawCapture
from ..charging.attribution import Attribution
from ..charging.calls import ModuleCalls
from ..charging.notices import PROFILER_SHARE_LIMIT, warn_profiler_share
from ..model.params import ModelParameters
from ..runtime.context import CaptureContext
from ..runtime.running import RUNNING
from ..runtime.timing import Clock
from ..sources.collectives import Communication
from ..sources.spans import SpanTimer, SpanTimes
from .plan import PLAN, CaptureOptions, Row, plan_sources

__all__ = ["CaptureSession"]


class CaptureSession:
    """Composes the capture sources for one model between ``start`` and ``stop``.

    ``table``: the plan's rows to choose from (default :data:`~.plan.PLAN`; a test adds a
    source by adding a row).
    """

    def __init__(self, options: CaptureOptions, *, registry: Registry, clock: Clock,
                 table: tuple[Row, ...] = PLAN):
        registry.register_imported()  # the formulas of modules imported since the last session
        self.options = options
        self.ctx = ctx = CaptureContext.create(clock, registry, outside_to_root=options.outside_to_root,
                                               options=options, params=ModelParameters(options.infos))
        if options.count:
            ctx.attribution = Attribution(ctx)
        self._sources: list = plan_sources(options, ctx, table)  # started in the table's order
        for source in self._sources:
            ctx.add_source(source)
        self._started: list = []
        self._host_origin = 0.0  # time.perf_counter() when the span started: collectives' origin
        self._now_origin: float | None = None
        self._overhead_origin = 0.0

    @property
    def clock(self) -> Clock:
        return self.ctx.clock

    @property
    def phases_on_device(self) -> bool:
        """Whether a device's clock stamped only the phases' boundaries (the top-level calls,
        the span timer's): the module calls inside them were stamped on the host, by the
        native recorder's hooks."""
        return self.ctx.backend.host_call_stamps

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        warn_if_untested()
        RUNNING.claim(self, frozenset(id(info.module) for info in self.options.infos.values()),
                      self.ctx.backend.hears_all_threads)
        try:
            for source in self._sources:
                source.start(self.ctx)
                self._started.append(source)
        except BaseException:
            self._stop_sources()
            RUNNING.release(self)
            raise
        self._host_origin = time.perf_counter()  # the span timer, started last, has just begun
        self._now_origin = self.ctx.clock.now()  # the same moment on the clock's host time
        self._overhead_origin = self.ctx.overhead.seconds  # the thread's profiler time then
        RUNNING.here().append(self)

    def stop(self) -> RawCapture:
        """Remove everything that was installed and resolve the measurements."""
        return self.stop_deferred()()

    def stop_deferred(self) -> Callable[[], RawCapture]:
        """Remove everything that was installed now; the measurements resolved when the
        function returned is called (once, from any thread: nothing changes them meanwhile)."""
        sessions = RUNNING.here()
        if self in sessions:
            sessions.remove(self)
        try:
            self._stop_sources()
            self._check_share()
            self.ctx.clock.finish()
        except BaseException:
            RUNNING.release(self)
            self.ctx.release()
            raise
        RUNNING.release(self)

        def collected() -> RawCapture:
            try:
                return self._collect()
            finally:
                self.ctx.release()

        return collected

    def abandon(self) -> None:
        """Remove everything that was installed, measuring nothing more (the process is ending,
        see :mod:`.running`); from any thread."""
        sessions = RUNNING.here()
        if self in sessions:
            sessions.remove(self)
        try:
            self._stop_sources()
        finally:
            RUNNING.release(self)
            self.ctx.release()

    def _check_share(self) -> None:
        """Warn when the profiler's own host time was a large share of a timed span whose clock
        cannot subtract it (CUDA events: the GPU idles while the host runs the hooks)."""
        clock, options = self.ctx.clock, self.options
        if clock.subtracts_overhead or self._now_origin is None or not (options.timeline or not options.count):
            return
        span = clock.now() - self._now_origin
        share = (self.ctx.overhead.seconds - self._overhead_origin) / span if span > 0 else 0.0
        if share > PROFILER_SHARE_LIMIT:
            warn_profiler_share(share, clock.name)

    def snapshot(self) -> RawCapture:
        """What was measured so far, without stopping (completed calls and spans only)."""
        self.ctx.clock.finish()
        return self._collect()

    @property
    def progress(self) -> tuple:
        """What changes whenever the profiled code runs something the session sees: the call
        log's length, the spans ended, the profiler's own time (every op and hook adds to it).
        Two equal readings: nothing ran between them, a snapshot would be the same."""
        spans = self.ctx.get(SpanTimer)
        return len(self.ctx.calls), len(spans.spans) if spans is not None else 0, self.ctx.overhead.seconds

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
    def _collect(self) -> RawCapture:
        ctx = self.ctx
        parts: list = []
        # the backend's first: what it charges last (a backend may charge after the span, see
        # .backends) is what the other sources' parts are made of
        sources = sorted(self._sources, key=lambda source: source is not ctx.backend)
        for source in sources:
            if hasattr(source, "collect"):
                part = source.collect(ctx)
                parts.extend(part) if isinstance(part, tuple) else parts.append(part)
        raw = RawCapture(*parts)
        calls, spans = raw.get(ModuleCalls), raw.get(SpanTimes)
        communication = raw.get(Communication)
        # without a timeline of its own (a counting pass timed by another), still the one
        # that carries its collectives onto the timing pass's
        if calls is not None and spans is not None and spans.origin is not None \
                and (self.options.timeline or communication is not None):
            timeline = resolve_timeline(calls.log, calls.seconds, spans.timed,
                                        communication.calls if communication is not None else [],
                                        clock=ctx.clock, origin=spans.origin, host_origin=self._host_origin)
            raw = RawCapture(*raw, timeline)
        return raw

