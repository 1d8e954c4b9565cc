"""Capture source: one TorchFunctionMode for every source that acts on torch-level calls.

Sources subscribe a handler per function to ``ctx.events.functions`` (the units); everything
else passes straight through. One mode, one table: it is looked up for every torch call, and
installed only where the backend needs it (:meth:`~..backends.Backend.function_routing`): a
native session records the builtin units itself, so it installs the mode only where a unit
written in Python may run, and runs its lookup in C.
"""

from __future__ import annotations

import types
from typing import Callable

from torch.overrides import TorchFunctionMode

from ..._torch_private import active_function_modes, exit_mode
from ..context import CaptureContext

__all__ = ["FunctionInterceptor"]

_NO_KWARGS: dict = {}


class _InterceptMode(TorchFunctionMode):
    def __init__(self, handlers: dict):
        super().__init__()
        self._handlers = handlers

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = _NO_KWARGS
        try:
            handler = self._handlers.get(func)
        except TypeError:  # an unhashable callable has no handler
            handler = None
        if handler is None:
            return func(*args, **kwargs)
        return handler(func, args, kwargs)


class FunctionInterceptor:
    """Capture source: routes the functions subscribed to ``ctx.events.functions`` to their
    handler (``handler(func, args, kwargs) -> result``, which must call ``func``)."""

    def __init__(self, ctx: CaptureContext) -> None:
        self._handlers: dict[Callable, Callable] = ctx.events.functions
        self._mode: _InterceptMode | None = None
        self._paused = False

    def start(self, ctx: CaptureContext) -> None:
        needed, hook = ctx.backend.function_routing(self._handlers)
        if needed:
            self._mode = _InterceptMode(self._handlers)
            if hook is not None:  # the same routing, faster (the native backend's, in C)
                self._mode.__torch_function__ = types.MethodType(hook, self._mode)
            self._mode.__enter__()

    def stop(self, ctx: CaptureContext) -> None:
        mode, self._mode = self._mode, None
        if mode is not None and not self._paused:
            exit_mode(mode)  # another profiler's mode may have entered above it
        self._paused = False

    def pause(self) -> None:
        """Take the mode off while no handled function can run (an optimizer step runs
        thousands of small ops and no unit: this saves a Python call per op). Only when it
        is the innermost function mode, so the mode stack stays in order."""
        if self._mode is not None and not self._paused and active_function_modes()[-1:] == [self._mode]:
            self._mode.__exit__(None, None, None)
            self._paused = True

    def resume(self) -> None:
        if self._paused and self._mode is not None:
            self._mode.__enter__()
        self._paused = False
