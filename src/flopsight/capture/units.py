"""Capture source: torch functions counted whole ("units": attention, RNNs, dropout...).

Their aten decomposition depends on the device or the kernel picked, so each call is
counted once from its arguments by the registry's unit formula and the aten ops it runs are
not counted again; its backward is charged once from the unit's backward formula.
"""

from __future__ import annotations

from .._torch_private import autograd_sequence_nr
from .attribution import Attribution
from .context import CaptureContext
from .functions import FunctionInterceptor

__all__ = ["UnitSource", "run_whole"]


class UnitSource:
    def __init__(self, attribution: Attribution, functions: FunctionInterceptor, units: dict, counting):
        self._attribution = attribution
        self._counting = counting  # its mode steps aside while a unit runs
        self._units = units  # function -> Unit
        self._functions = functions
        self._ctx: CaptureContext | None = None

    def start(self, ctx: CaptureContext) -> None:
        self._ctx = ctx
        self._functions.handlers.update(dict.fromkeys(self._units, self._run))

    def stop(self, ctx: CaptureContext) -> None:
        pass

    def _run(self, func, args, kwargs):
        ctx = self._ctx
        if ctx.suppressed or ctx.paused:
            return func(*args, **kwargs)
        unit = self._units[func]
        with self._counting.aside():
            out, t0, t1, seq_start, seq_end = run_whole(ctx, func, args, kwargs)
        flight = self._counting.in_flight
        if flight is not None and flight.busy and ctx.clock.stamp is ctx.clock.now:  # compute during communication
            flight.ran(t0, t1)
        h0 = ctx.overhead.begin()
        bound = unit.bind(args, kwargs)  # None if no schema fits: reported as a failed formula
        self._attribution.charge_whole(unit, t0, t1, out, bound, seq_start, seq_end)
        ctx.overhead.end(h0)
        return out


def run_whole(ctx: CaptureContext, call, args: tuple, kwargs: dict) -> tuple:
    """Run a call counted whole: (its result, start and end stamps, and the range of sequence
    numbers of the autograd nodes it made). The ops it runs are not counted again."""
    stamp = ctx.clock.stamp
    ctx.suppressed += 1
    try:
        seq_start = autograd_sequence_nr()
        t0 = stamp()
        out = call(*args, **kwargs)
        t1 = stamp()
        return out, t0, t1, seq_start, autograd_sequence_nr()
    finally:
        ctx.suppressed -= 1
