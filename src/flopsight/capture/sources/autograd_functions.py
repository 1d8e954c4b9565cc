"""Capture source: ``torch.autograd.Function`` subclasses counted whole
(``Registry.register_function``).

A function mode does not see ``Function.apply``, so while capturing, each registered class
gets an ``apply`` of its own that counts the call and then runs the original; ``stop`` takes
it off again (the class is left exactly as it was). Only classes the user registered are
touched; torch's own functions never are. Each call is published to ``ctx.events.calls``.
"""

from __future__ import annotations

import inspect

import torch

from ..runtime.context import CaptureContext
from ..runtime.running import OWN_CODE
from .units import publish_whole, run_whole

__all__ = ["AutogradFunctions"]

_ABSENT = object()


class AutogradFunctions:
    def __init__(self, ctx: CaptureContext):
        self._functions = ctx.registry.functions()  # Function subclass -> Unit
        self._saved: list[tuple[type[torch.autograd.Function], object]] = []

    def start(self, ctx: CaptureContext) -> None:
        for cls, unit in self._functions.items():
            self._saved.append((cls, cls.__dict__.get("apply", _ABSENT)))
            # the classmethod as the class holds it: a Python classmethod up to torch 2.14, a C
            # classmethod_descriptor from 2.15 (Function.apply moved to C); either binds to a class
            original = inspect.getattr_static(cls, "apply")
            cls.apply = classmethod(self._counted_apply(ctx, unit, original))

    def stop(self, ctx: CaptureContext) -> None:
        while self._saved:
            cls, original = self._saved.pop()
            if original is _ABSENT:
                del cls.apply
            else:  # the class's own attribute as it held it (a classmethod object, or a C descriptor)
                cls.apply = original  # type: ignore[method-assign, assignment]

    def _counted_apply(self, ctx: CaptureContext, unit, apply):
        attribution = ctx.attribution

        def counted(cls, *args, **kwargs):
            bound = apply.__get__(None, cls)
            if ctx.suppressed or OWN_CODE.depth:
                return bound(*args, **kwargs)
            out, t0, t1, seq_start, seq_end = run_whole(ctx, bound, args, kwargs)
            h0 = ctx.overhead.begin()
            where = attribution.charge_whole(unit, t0, t1, out, unit.bind(args, kwargs), seq_start, seq_end)
            publish_whole(ctx, unit, cls, args, kwargs, out, t0, t1, where)
            ctx.overhead.end(h0)
            return out

        return counted
