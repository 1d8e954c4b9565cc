"""What the capture sources of one session share: clock, overhead, phase, the module stack
and the services every source may use.

Each field has one writer: the call tracker owns the call stack and the call log, the span
timer owns ``phase`` and ``last_phase`` (spans are where phases begin and end), the
attribution object is the only one that writes the tally, and the sources that count a call
whole (units, module rules, autograd functions) hold ``suppressed`` above zero while it runs so
that the aten ops underneath are not counted again.

A backend may charge ops later than they run (the native one charges the recorder's records in
batches): whatever changes the state that decides where a cost goes first has the backend
charge what ran under the state that is ending. So the state changes through the context's
methods, which do it (:meth:`~CaptureContext.change_phase`, :meth:`~CaptureContext.boundary`,
:meth:`~CaptureContext.counted_whole`, :meth:`~CaptureContext.module_now`): no source charges
or settles anything itself. :class:`~.overhead.Overhead` is the
profiler's own host time, handed to every source (the thread's, shared with every session on
it: :mod:`.running`): it is only ever changed through its methods.
"""

from __future__ import annotations

import collections
import contextlib
import functools
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ...formulas.registry import Registry
from .events import Events
from .overhead import Overhead
from .running import RUNNING
from .tally import Tally
from .timing import Clock

__all__ = ["CaptureContext", "past_hidden_waits"]

T = TypeVar("T")


def innermost_path(stack: list) -> str | None:
    """The path of the innermost call on a module ``stack`` (None: empty)."""
    return stack[-1].path if stack else None


def past_hidden_waits(waits: collections.deque, t0: float, t1: float) -> float:
    """An op that ran from host stamp ``t0`` to ``t1``, its start moved past the ``waits``
    (host intervals, in order: :attr:`CaptureContext.hidden_waits`) that lie inside it, which
    are not its time; waits that ended before it are dropped.

    >>> waits = collections.deque([(0.5, 0.8), (2.0, 2.5), (4.0, 4.1)])
    >>> past_hidden_waits(waits, 1.0, 3.0), list(waits)   # (0.5, 0.8) lies before it
    (1.5, [(4.0, 4.1)])
    """
    while waits and waits[0][1] <= t1:
        w0, w1 = waits.popleft()
        if w0 >= t0:
            t0 += w1 - w0
    return t0


class NoBackend:
    """A context's backend before the session makes its own (:mod:`.backends`): nothing
    recorded, nothing to settle."""

    tracks_memory = hears_all_threads = host_call_stamps = False

    def settle(self) -> None:
        pass

    settle_later = settle

    def in_order(self, action) -> None:
        action()

    def innermost_module(self, stack: list) -> str | None:
        return innermost_path(stack)

    def aside(self) -> Any:
        return contextlib.nullcontext()

    unrecorded = not_run_for_real = aside


@dataclass(eq=False)
class CaptureContext:
    """The shared state of one capture session (see the module docstring for who writes what)."""

    clock: Clock
    registry: Registry
    overhead: Overhead
    tally: Tally
    #: ops outside every module call belong to the root (a profiled call of the model's own
    #: method, e.g. generate()); False for a span of user code, where they are not the model's
    outside_to_root: bool = False
    phase: str = "forward"  # "step" in optimizer.step(), "backward" in a backward call, else "forward"
    #: the phase of the last top-level forward call begun or backward or step span ended:
    #: where communication between them belongs (a wrapper's gradient reduction after backward)
    last_phase: str = "forward"
    suppressed: int = 0  # > 0 while a call counted whole runs
    #: > 0 while DTensor redistributes (:mod:`..sources.redistributions`): the ops that cost are
    #: charged under ``redistribute:<op>``
    redistribution: int = 0
    stack: list = field(default_factory=list)  # active module calls, innermost last
    calls: list = field(default_factory=list)  # every module call begun, in order (the call log)
    events: Events = field(default_factory=Events)
    #: the one object that decides where a cost goes (an :class:`~.attribution.Attribution`),
    #: None in a session that counts nothing
    attribution: Any = None
    #: the model's parameters (a :class:`~.params.ModelParameters`), None when not needed
    params: Any = None
    #: what the session was asked for (a :class:`~.plan.CaptureOptions`)
    options: Any = None
    #: the session's :class:`~.backends.Backend` (the hot path: ops, module calls, phase changes)
    backend: Any = field(default_factory=NoBackend)
    #: host intervals (``time.perf_counter``) in which the thread waited for a collective inside
    #: an op that hides it (an ``AsyncCollectiveTensor`` waited for by the op that first uses
    #: it: the collectives source), in order: not that op's time (:func:`past_hidden_waits`)
    hidden_waits: collections.deque = field(default_factory=collections.deque)
    _sources: dict = field(default_factory=dict)

    @classmethod
    def create(cls, clock: Clock, registry: Registry, **kwargs) -> CaptureContext:
        # the profiler's own time is the thread's, shared by every session on it (see .running)
        return cls(clock, registry, RUNNING.overhead(clock.now), Tally(clock.scale is not None), **kwargs)

    def add_source(self, source: object) -> None:
        self._sources[type(source)] = source

    def get(self, kind: type[T]) -> T | None:
        """This session's source of class ``kind`` (None when the plan has none): for the
        sources that drive another one (the optimizer hooks open the span timer's spans)."""
        return self._sources.get(kind)

    def release(self) -> None:
        """The session is over: drop what ties its objects to each other (the sources, their
        subscriptions, the attribution object), so they are freed at once, not left for the
        cycle collector, and no bound method of a source outlives it."""
        self.events.clear()
        self._sources.clear()
        self.attribution = None

    # -- the state that decides where a cost goes, changed ----------------------------------
    def change_phase(self, phase: str) -> str:
        """The phase becomes ``phase`` (what ran so far is charged under the phase it ran in);
        returns the phase it was."""
        self.backend.settle_later()
        was, self.phase = self.phase, phase
        return was

    def redistributing(self, change: int) -> None:
        """A redistribution begins (``change`` 1) or ends (-1): ``redistribution`` changes in
        order with the ops the backend charges (:meth:`~.backends.Backend.in_order`)."""
        self.backend.in_order(functools.partial(self._redistributed, change))

    def _redistributed(self, change: int) -> None:
        self.redistribution += change

    def boundary(self) -> tuple:
        """A span's boundary: what ran so far is charged (under the state it ran in), then the
        boundary's (stamp, the profiler's own seconds then)."""
        self.backend.settle_later()
        return self.clock.stamp(), self.overhead.seconds

    @contextlib.contextmanager
    def counted_whole(self):
        """A call counted whole runs (a unit, an autograd function): the ops underneath are not
        counted again, and run with the backend's op-level counting set aside."""
        self.backend.settle()
        self.suppressed += 1
        try:
            with self.backend.aside():
                yield
        finally:
            self.backend.settle()
            self.suppressed -= 1

    def module_now(self) -> str | None:
        """The path of the module call running now (None outside every call), with the module
        calls a backend recorded so far (a tensor saved for backward belongs to the module
        saving it): the backend's answer, which may charge what it recorded first."""
        return self.backend.innermost_module(self.stack)

    def span_seconds(self, start, end, ovh_start: float, ovh_end: float) -> float:
        """A span from stamp ``start`` to ``end`` in seconds, less the profiler's own time
        inside it (``ovh_end - ovh_start``) where the clock allows: a host clock, or host stamps
        on a device's clock (its module calls inside the phases)."""
        host = self.clock.subtracts_overhead or (isinstance(start, float) and isinstance(end, float))
        overhead = ovh_end - ovh_start if host else 0.0
        return max(self.clock.seconds(start, end) - overhead, 0.0)
