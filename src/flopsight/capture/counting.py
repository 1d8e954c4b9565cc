"""Capture source: every aten op, counted by its formula, through a TorchDispatchMode.

A dispatch mode sees each aten op after autograd and composite decompositions, which is
where ``@``, ``einsum``, ``F.linear`` and custom ops all become the same few kernels,
identically on CPU, CUDA and meta. It only observes: it calls the op unchanged and
returns its result.
"""

from __future__ import annotations

import contextlib

import torch

from .._torch_private import (
    EagerDispatchMode,
    allow_under_mode,
    flex_attention_ops,
    innermost_dispatch_mode,
    prime_modes,
)
from ..formulas.registry import ZERO
from ..result.stats import ZERO_STATS
from .attribution import Attribution
from .context import CaptureContext

__all__ = ["CountingSource"]

_NO_KWARGS: dict = {}  # shared, never written to


class _CountingMode(EagerDispatchMode):
    def __init__(self, ctx: CaptureContext, attribution: Attribution, source: "CountingSource"):
        super().__init__()
        # bound once: this runs for every op of the model
        self._ctx = ctx
        self._stamp, self._now = ctx.clock.stamp, ctx.clock.now
        self._overhead = ctx.overhead
        self._resolved, self._resolve = ctx.registry.resolved, ctx.registry.resolve  # cached per overload
        self._charge = attribution.charge
        self._attribution = attribution
        # on a host clock the op's end stamp is also when the profiler's own work starts
        self._stamp_is_now = self._stamp is self._now
        # other sources watch the ops (collectives, memory): only then does an op take the
        # longer path, so a plain profile pays one test
        self._source = source
        self._watched = bool(source.observers) or source.memory is not None

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
                    self._charge(entry, t0, t1, (), ZERO_STATS, nbytes)
                else:
                    self._charge(entry, t0, t1, (out, args, kwargs or _NO_KWARGS), None, nbytes)
            self._overhead.seconds += self._now() - h0
        return out

    def _charge_watched(self, entry, func, args, kwargs, out, t0, t1) -> None:
        """Charge an op that other sources watch: an observer charges the ops it handles
        (collectives); the memory source sees the model's ops' outputs; collectives in
        flight are credited with the op's time."""
        source = self._source
        observer = source.observers.get(func)
        if observer is not None:
            observer(entry, func, args, kwargs, out, t0, t1)
            path = None
        else:
            nbytes = entry.io(out, args, kwargs) if entry.io is not None else 0
            if entry.formula is ZERO:
                path = self._charge(entry, t0, t1, (), ZERO_STATS, nbytes)
            else:
                path = self._charge(entry, t0, t1, (out, args, kwargs), None, nbytes)
        if source.memory is not None and path is not None:  # the model's op: its new storages
            source.memory.outputs(out, path, self._attribution.last_phase)
        flight = source.in_flight
        if flight is not None and flight.busy and self._stamp_is_now:  # compute overlapping communication
            flight.ran(t0, t1)


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


_EAGER = _EagerStance()


class CountingSource:
    """Installs the counting dispatch mode between ``start`` and ``stop``."""

    def __init__(self, attribution: Attribution):
        self._attribution = attribution
        self._mode: _CountingMode | None = None
        #: op overload -> handler, for ops another source records more about
        #: (``handler(entry, func, args, kwargs, out, t0, t1)`` charges the op itself)
        self.observers: dict = {}
        #: the collectives in flight (:class:`~.communication.InFlight`), whose overlap with
        #: each op the mode reports (None outside torch.distributed)
        self.in_flight = None
        #: a :class:`~.memory.MemorySource` to hand each op's outputs to (None: not tracked)
        self.memory = None

    def start(self, ctx: CaptureContext) -> None:
        prime_modes()
        for hop in flex_attention_ops():  # higher-order ops run their aten ops under the mode
            allow_under_mode(hop, _CountingMode)
        _EAGER.acquire()
        try:
            self._mode = _CountingMode(ctx, self._attribution, self)  # after the sources that watch it
            self._mode.__enter__()
        except BaseException:
            _EAGER.release()
            raise

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
            mode.__exit__(None, None, None)
        finally:
            _EAGER.release()
