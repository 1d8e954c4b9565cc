"""What capture sources tell each other, without naming each other.

One :class:`Events` per session. A source subscribes in its constructor (before anything
starts) to what it needs, and publishes what it sees:

* ``ops``: each aten op the counting source charged, as an :class:`OpEvent`, published once
  (the memory source reads its outputs, the collectives source the time it ran);
* ``calls``: each call counted whole (a unit such as attention, an autograd function), as an
  :class:`OpEvent` of its unit; its own ops are not published (they are not counted again);
* ``ran``: the host intervals of the ops and calls counted whole, ``(starts, ends)``, heard in
  order, perhaps later than they ran (the native backend charges in batches and tells a batch
  at once; the collectives source credits what overlapped a collective in flight);
* ``modules``: each module call's start and end (``call_begins(record)``, ``call_ends(record,
  args, kwargs, output)``), from the call tracker, as they happen (a listener there keeps
  the calls in Python hooks);
* ``calls_in_order``: the same two, heard in order with the ops and blocks of memory around
  them, perhaps later than they happened (``call_ends`` gets no arguments or output): the
  native backend replays them from its C++ hooks' records;
* ``forwards``: each top-level forward call's start (``forward_begins(record)``) and return
  (``forward_ends(record, output)``), from the backend's call tracking: a forward call from
  outside the model's modules;
* ``steps``: each optimizer step's start (``step_begins(optimizer)``), from the optimizer hooks;
* ``phases``: each backward or step span's start and end (``phase_begins(kind)``,
  ``phase_ends(kind)``), from the span timer;
* ``allocations``: the blocks of memory the model allocated and released, from a backend that
  ``tracks_memory`` (the native one: the allocators' reports, in runs: ``allocated_run(path,
  phase, change, peak, largest, op, temporaries, temporaries_peak)``, ``freed(nbytes,
  temporary)`` for a block released outside its run, and ``freed_before(address, nbytes)`` for
  one allocated before the session); elsewhere the memory source reads ``ops`` itself;
* ``claims``: ops a source charges itself (op overload -> ``handler(event)``; the collectives);
* ``functions``: torch functions a source runs itself (function -> ``handler(func, args,
  kwargs)``, which must call ``func``), routed by the function interceptor (the units).

>>> events = Events()
>>> seen = []
>>> events.ops.append(seen.append)
>>> events.publish_op(OpEvent("aten.mm", None, (), {}, None, 0.0, 1.0, "fc", "forward"))
>>> seen[0].path, seen[0].phase
('fc', 'forward')
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

__all__ = ["OpEvent", "Events"]


class OpEvent(NamedTuple):
    """One op (or call counted whole) that ran from stamp ``t0`` to ``t1``: its resolved
    registry entry, the op overload (or function), inputs and outputs, and where it was
    charged (``path`` and ``phase``; None when it is not the profiled model's, or when a
    source claimed it)."""

    entry: Any
    func: Any
    args: tuple
    kwargs: dict
    out: Any
    t0: Any
    t1: Any
    path: str | None
    phase: str | None


class Events:
    """The subscriptions of one capture session (see the module docstring)."""

    def __init__(self) -> None:
        self.ops: list[Callable[[OpEvent], None]] = []
        self.calls: list[Callable[[OpEvent], None]] = []
        self.ran: list[Callable[[Sequence[float], Sequence[float]], None]] = []
        self.modules: list = []
        self.calls_in_order: list = []
        self.forwards: list = []
        self.steps: list = []
        self.phases: list = []
        self.allocations: list = []
        self.claims: dict[Any, Callable[[OpEvent], None]] = {}
        self.functions: dict[Callable, Callable] = {}

    @property
    def watched(self) -> bool:
        """Whether any source listens to ops or their intervals, or claims some: only then does
        the dispatch mode build events (a plain profile pays one test per op)."""
        return bool(self.ops or self.claims or self.ran)

    def clear(self) -> None:
        """Drop every subscription (the session is over: no bound method of a source outlives it)."""
        for subscribers in (self.ops, self.calls, self.ran, self.modules, self.calls_in_order, self.forwards,
                            self.steps, self.phases, self.allocations, self.claims, self.functions):
            subscribers.clear()

    def publish_op(self, event: OpEvent) -> None:
        for listener in self.ops:
            listener(event)
        if self.ran:
            self.publish_ran(event.t0, event.t1)

    def publish_call(self, event: OpEvent) -> None:
        for listener in self.calls:
            listener(event)
        if self.ran:
            self.publish_ran(event.t0, event.t1)

    def publish_ran(self, t0, t1) -> None:
        """Tell the listeners to each op's interval that one ran from ``t0`` to ``t1`` (a
        listener may leave while it is told: the list is copied)."""
        self.publish_ran_many((t0,), (t1,))

    def publish_ran_many(self, starts: Sequence[float], ends: Sequence[float]) -> None:
        """:meth:`publish_ran` for ops that ran one after another, from ``starts[i]`` to
        ``ends[i]`` (a backend that charges in batches tells a batch at once)."""
        for on_ran in tuple(self.ran):
            on_ran(starts, ends)
