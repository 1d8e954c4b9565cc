"""Capture source: ``torch.autograd.Function`` subclasses counted whole
(``Registry.register_function``).

A function mode does not see ``Function.apply``, so while capturing, each registered class
gets an ``apply`` of its own that counts the call and then runs the original; ``stop`` takes
it off again (the class is left exactly as it was). Only classes the user registered are
touched; torch's own functions never are.
"""

from __future__ import annotations

import inspect

from .._torch_private import autograd_sequence_nr
from .attribution import Attribution
from .context import CaptureContext

__all__ = ["AutogradFunctions"]

_ABSENT = object()


class AutogradFunctions:
    def __init__(self, attribution: Attribution, functions: dict):
        self._attribution = attribution
        self._functions = functions  # Function subclass -> Unit
        self._saved: list[tuple[type, object]] = []

    def start(self, ctx: CaptureContext) -> None:
        for cls, unit in self._functions.items():
            self._saved.append((cls, cls.__dict__.get("apply", _ABSENT)))
            original = inspect.getattr_static(cls, "apply")  # the classmethod, unbound
            cls.apply = classmethod(self._counted_apply(ctx, unit, original.__func__))

    def stop(self, ctx: CaptureContext) -> None:
        while self._saved:
            cls, original = self._saved.pop()
            if original is _ABSENT:
                del cls.apply
            else:
                cls.apply = original

    def _counted_apply(self, ctx: CaptureContext, unit, apply):
        attribution = self._attribution

        def counted(cls, *args, **kwargs):
            if ctx.suppressed or ctx.paused:
                return apply(cls, *args, **kwargs)
            stamp = ctx.clock.stamp
            ctx.suppressed += 1
            try:
                seq_start = autograd_sequence_nr()
                t0 = stamp()
                out = apply(cls, *args, **kwargs)
                t1 = stamp()
                seq_end = autograd_sequence_nr()
            finally:
                ctx.suppressed -= 1
            h0 = ctx.overhead.begin()
            bound = unit.bind(args, kwargs)
            path = attribution.charge(unit, t0, t1, (out, bound))
            if path is not None and unit.backward is not None:
                cost = attribution.evaluate(unit.backward_entry, out, bound)
                attribution.expect_backward(seq_start, seq_end, path, unit.name, cost)
            ctx.overhead.end(h0)
            return out

        return counted
