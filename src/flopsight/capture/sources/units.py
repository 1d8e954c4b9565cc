"""Capture source: torch functions counted whole ("units": attention, RNNs, dropout...).

Their aten decomposition depends on the device or the kernel picked, so each call is
counted once from its arguments by the registry's unit formula and the aten ops it runs are
not counted again (op-level counting is set aside while it runs); its backward is charged
once from the unit's backward formula. Each call is published to ``ctx.events.calls``.
"""

from __future__ import annotations

from ..._torch_private import autograd_sequence_nr
from ..runtime.context import CaptureContext
from ..runtime.events import OpEvent
from ..runtime.running import OWN_CODE

__all__ = ["UnitSource", "run_whole", "publish_whole"]


class UnitSource:
    def __init__(self, ctx: CaptureContext):
        self._ctx = ctx
        self._units = ctx.registry.units()  # function -> Unit
        ctx.events.functions.update(dict.fromkeys(self._units, self._run))

    def start(self, ctx: CaptureContext) -> None:
        pass

    def stop(self, ctx: CaptureContext) -> None:
        pass

    def _run(self, func, args, kwargs):
        ctx = self._ctx
        if ctx.suppressed or OWN_CODE.depth:
            return func(*args, **kwargs)
        unit = self._units[func]
        out, t0, t1, seq_start, seq_end = run_whole(ctx, func, args, kwargs)
        h0 = ctx.overhead.begin()
        bound = unit.bind(args, kwargs)  # None if no schema fits: reported as a failed formula
        where = ctx.attribution.charge_whole(unit, t0, t1, out, bound, seq_start, seq_end)
        publish_whole(ctx, unit, func, args, kwargs, out, t0, t1, where)
        ctx.overhead.end(h0)
        return out


def run_whole(ctx: CaptureContext, call, args: tuple, kwargs: dict) -> tuple:
    """Run a call counted whole: (its result, start and end stamps, and the range of sequence
    numbers of the autograd nodes it made). The ops it runs are not counted again."""
    stamp = ctx.clock.stamp
    with ctx.counted_whole():
        seq_start = autograd_sequence_nr()
        t0 = stamp()
        out = call(*args, **kwargs)
        t1 = stamp()
        return out, t0, t1, seq_start, autograd_sequence_nr()


def publish_whole(ctx: CaptureContext, unit, func, args, kwargs, out, t0, t1, where) -> None:
    """Tell the sources subscribed to ``ctx.events.calls`` that a call counted whole ran,
    charged ``where`` ((path, phase), or None when it is not the model's)."""
    if ctx.events.calls or ctx.events.ran:
        path, phase = where if where is not None else (None, None)
        ctx.events.publish_call(OpEvent(unit, func, args, kwargs, out, t0, t1, path, phase))
