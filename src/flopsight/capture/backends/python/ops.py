"""Capture source: every aten op, counted by its formula, through a TorchDispatchMode.

A dispatch mode sees each aten op after autograd and composite decompositions, which is
where ``@``, ``einsum``, ``F.linear`` and custom ops all become the same few kernels,
identically on CPU, CUDA and meta. It only observes: it calls the op unchanged and
returns its result. Each op is charged through the attribution object and, when some
source listens (``ctx.events``), published once as an :class:`~.events.OpEvent`; an op a
source claimed is handed to it to charge instead.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from .._torch_private import (
    EagerDispatchMode,
    allow_under_mode,
    exit_mode,
    flex_attention_ops,
    innermost_dispatch_mode,
    prime_modes,
)
from ..formulas.registry import ZERO
from ..result.stats import Stats, ZERO_STATS
from .context import CaptureContext
from .events import OpEvent

__all__ = ["CountingSource", "Counts", "collect_counts", "EAGER_STANCE"]

_NO_KWARGS: dict = {}  # shared, never written to
_event = tuple.__new__  # an OpEvent without the keyword-handling constructor: once per op


@dataclass
class Counts:
    """What was counted (by the counting source and the sources that count calls whole):
    per (path, phase), per op, its cost (latency: the op's own time) and the bytes it moved;
    the ops without a formula and their calls; [MACs, FLOPs] of each top-level forward call."""

    ops: dict[tuple[str, str], dict[str, Stats]] = field(default_factory=dict)
    bytes_moved: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    unsupported: dict[str, int] = field(default_factory=dict)
    tops: list[list[int]] = field(default_factory=list)
    #: which path counted the ops: "python" (the dispatch mode) or "native" (the recorder),
    #: and why not native when it was not
    backend: str = "python"
    backend_note: str | None = None


def collect_counts(ctx: CaptureContext, backend: str, note: str | None = None) -> Counts:
    """What the context's tally holds, as the counting source's part of a raw capture."""
    tally = ctx.tally
    return Counts(tally.resolve(ctx.clock.seconds, ctx.clock.scale), tally.bytes_moved(),
                  dict(tally.unsupported), [list(t) for t in tally.tops], backend, note)


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

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        stamp = self._stamp
        t0 = stamp()
        out = func(*args, **kwargs) if kwargs else func(*args)
        t1 = stamp()
        ctx = self._ctx
        if not ctx.suppressed and not ctx.paused:
            h0 = t1 if self._stamp_is_now else self._now()
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
            self._overhead_end(h0)
        return out

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


class _EagerStance:
    """torch.compile's ``force_eager`` stance while any counting source runs.

    Under a dispatch mode dynamo compiles nothing, and eager flex_attention's
    ``torch.compile(fullgraph=True)`` raises for compiling nothing unless the stance is not
    the default. Sessions may stop in any order (two attached profilers sharing a step), so
    the stance is counted, not nested: the first start sets it, the last stop restores it.
    """

    def __init__(self) -> None:
        self._users = 0
        self._stance = None

    def acquire(self) -> None:
        if self._users == 0:
            self._stance = torch.compiler.set_stance("force_eager")  # sets it now; exit restores
        self._users += 1

    def release(self) -> None:
        self._users -= 1
        if self._users == 0:
            stance, self._stance = self._stance, None
            stance.__exit__(None, None, None)


#: the stance every counting source (this one, the native one) holds while it runs
EAGER_STANCE = _EagerStance()


class CountingSource:
    """Installs the counting dispatch mode between ``start`` and ``stop``; while it runs,
    ``ctx.events.aside`` takes the mode off (for the calls counted whole)."""

    backend = "python"

    def __init__(self, ctx: CaptureContext, note: str | None = None):
        self._mode: _CountingMode | None = None
        self._note = note  # why the native backend is not counting (None: it was not asked for)

    def start(self, ctx: CaptureContext) -> None:
        prime_modes()
        for hop in flex_attention_ops():  # higher-order ops run their aten ops under the mode
            allow_under_mode(hop, _CountingMode)
        EAGER_STANCE.acquire()
        try:
            self._mode = _CountingMode(ctx)
            self._mode.__enter__()
        except BaseException:
            EAGER_STANCE.release()
            raise
        ctx.events.aside = self.aside

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
        ctx.events.aside = contextlib.nullcontext
        try:
            exit_mode(mode)  # another profiler's mode may have entered above it
        finally:
            EAGER_STANCE.release()
