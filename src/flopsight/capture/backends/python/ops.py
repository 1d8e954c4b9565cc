"""Capture source: every aten op, counted by its formula, through a TorchDispatchMode.

A dispatch mode sees each aten op after autograd and composite decompositions, which is
where ``@``, ``einsum``, ``F.linear`` and custom ops all become the same few kernels,
identically on CPU, CUDA and meta. It only observes: it calls the op unchanged and returns
its result. Each op is charged through the attribution object and, when some source listens
(``ctx.events``), published once as an :class:`~.events.OpEvent`; an op a source claimed is
handed to it to charge instead. An op on a DTensor is the ops it runs on this rank's shards
(and the collectives that redistribute them): those are counted, not the global op.
"""

from __future__ import annotations

import contextlib

from ...._torch_private import (
    EagerDispatchMode,
    allow_under_mode,
    dtensor_class,
    exit_mode,
    fake_mode_now,
    flex_attention_ops,
    innermost_dispatch_mode,
)
from ....formulas.registry import ZERO
from ....result.stats import ZERO_STATS
from ...charging.counts import Counts, collect_counts
from ...runtime.context import CaptureContext, past_hidden_waits
from ...runtime.events import OpEvent
from ...runtime.running import OWN_CODE, RUNNING
from ...runtime.stance import EAGER_STANCE

__all__ = ["CountingSource"]

_NO_KWARGS: dict = {}  # shared, never written to
_event = tuple.__new__  # an OpEvent without the keyword-handling constructor: once per op


class _CountingMode(EagerDispatchMode):
    def __init__(self, ctx: CaptureContext):
        super().__init__()
        # bound once: this runs for every op of the model
        self._ctx = ctx
        self._stamp, self._now = ctx.clock.stamp, ctx.clock.now
        self._overhead_end = ctx.overhead.end
        self._resolved, self._resolve = ctx.registry.resolved, ctx.registry.resolve  # cached per overload
        self._place = ctx.attribution.place
        # on a host clock the op's end stamp is also when the profiler's own work starts
        self._stamp_is_now = self._stamp is self._now
        # other sources watch the ops (collectives, memory): only then does an op take the
        # longer path, so a plain profile pays one test
        self._events = ctx.events
        self._watched = ctx.events.watched
        # sessions already running on this thread have their modes below this one: they would
        # see the ops of its charging (a formula reading a mask), which are nobody's
        self._nested = bool(RUNNING.here())
        # an op on a DTensor (tensor parallelism) is not the work this rank does: the ops it
        # runs on the local shards are (NotImplemented hands it to DTensor, which runs them
        # under this mode), and its sharding propagation under a fake mode is not run for real
        self._dtensor = dtensor_class()
        self._fake_at_start = fake_mode_now() if self._dtensor is not None else None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if OWN_CODE.depth:  # the profiler's own op (another session's formula): no one's
            return func(*args, **kwargs) if kwargs else func(*args)
        if self._dtensor is not None:
            if self._dtensor in types:
                return NotImplemented
            if fake_mode_now() is not self._fake_at_start:
                return func(*args, **kwargs) if kwargs else func(*args)
        stamp = self._stamp
        t0 = stamp()
        out = func(*args, **kwargs) if kwargs else func(*args)
        t1 = stamp()
        ctx = self._ctx
        if ctx.hidden_waits:  # it waited for a collective inside (host stamps only: see the source)
            t0 = past_hidden_waits(ctx.hidden_waits, t0, t1)
        if not ctx.suppressed:
            h0 = t1 if self._stamp_is_now else self._now()
            if self._nested:  # its charging's ops are the profiler's: the modes below see them
                OWN_CODE.depth += 1
                try:
                    self._charge(func, args, kwargs, out, t0, t1)
                finally:
                    OWN_CODE.depth -= 1
            else:
                self._charge(func, args, kwargs, out, t0, t1)
            self._overhead_end(h0)
        return out

    def _charge(self, func, args, kwargs, out, t0, t1) -> None:
        entry = self._resolved(func) or self._resolve(func)
        if self._watched:
            self._charge_watched(entry, func, args, kwargs or _NO_KWARGS, out, t0, t1)
        else:
            io = entry.io  # None for views: most free ops
            nbytes = io(out, args, kwargs or _NO_KWARGS) if io is not None else 0
            if entry.formula is ZERO:  # most ops (views, copies) cost nothing: skip the formula
                self._place(entry, t0, t1, (), ZERO_STATS, nbytes)
            else:
                self._place(entry, t0, t1, (out, args, kwargs or _NO_KWARGS), None, nbytes)

    def _charge_watched(self, entry, func, args, kwargs, out, t0, t1) -> None:
        """Charge an op that other sources watch, and publish it: a source that claimed the
        op charges it itself (collectives), and the event then names no module."""
        events = self._events
        claim = events.claims.get(func)
        if claim is not None:
            event = _event(OpEvent, (entry, func, args, kwargs, out, t0, t1, None, None))
            claim(event)
        else:
            nbytes = entry.io(out, args, kwargs) if entry.io is not None else 0
            if entry.formula is ZERO:
                where = self._place(entry, t0, t1, (), ZERO_STATS, nbytes)
            else:
                where = self._place(entry, t0, t1, (out, args, kwargs), None, nbytes)
            path, phase = where if where is not None else (None, None)
            event = _event(OpEvent, (entry, func, args, kwargs, out, t0, t1, path, phase))
        events.publish_op(event)


class CountingSource:
    """Installs the counting dispatch mode between ``start`` and ``stop``; :meth:`aside` takes
    it off (for the calls counted whole)."""

    backend = "python"

    def __init__(self, ctx: CaptureContext, note: str | None = None):
        self._mode: _CountingMode | None = None
        self._note = note  # why the native backend is not counting (None: it was not asked for)

    def start(self, ctx: CaptureContext) -> None:
        for hop in flex_attention_ops():  # higher-order ops run their aten ops under the mode
            allow_under_mode(hop, _CountingMode)
        EAGER_STANCE.acquire()
        try:
            self._mode = _CountingMode(ctx)
            self._mode.__enter__()
        except BaseException:
            EAGER_STANCE.release()
            raise

    def collect(self, ctx: CaptureContext) -> Counts:
        return collect_counts(ctx, self.backend, self._note)

    @contextlib.contextmanager
    def aside(self):
        """Take the mode off while a call counted whole runs (an RNN unit runs hundreds of
        small ops that are not counted again): ops then skip Python entirely. Only when the
        mode is the innermost one, so the mode stack stays in order."""
        mode = self._mode
        if mode is None or innermost_dispatch_mode() is not mode:
            yield
            return
        mode.__exit__(None, None, None)
        try:
            yield
        finally:
            mode.__enter__()

    def stop(self, ctx: CaptureContext) -> None:
        mode, self._mode = self._mode, None
        if mode is None:
            return
        try:
            exit_mode(mode)  # another profiler's mode may have entered above it
        finally:
            EAGER_STANCE.release()
