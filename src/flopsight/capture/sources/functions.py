"""Capture source: one TorchFunctionMode for every source that acts on torch-level calls.

Sources subscribe a handler per function to ``ctx.events.functions`` (the units); everything
else passes straight through. One mode, one table: it is looked up for every torch call, and
installed only where the backend needs it (:meth:`~..backends.Backend.function_routing`): a
native session records the builtin units itself, so it installs the mode only where a unit
written in Python may run, and runs its lookup in C. Without a mode, the calls a tensor
subclass takes over in Python still reach their handler (:class:`SubclassRoutes`).
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable

from torch.overrides import TorchFunctionMode

from ..._process import PROCESS
from ..._torch_private import active_function_modes, exit_mode, is_higher_order_op, torch_function_subclasses
from ..runtime.context import CaptureContext
from ..runtime.running import OWN_CODE

__all__ = ["FunctionInterceptor", "SubclassRoutes"]

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
        if handler is None or OWN_CODE.depth:  # no handler, or the profiler's own call
            return func(*args, **kwargs)
        return handler(func, args, kwargs)


class Routes:
    """The routes open in this process (:class:`SubclassRoutes`): innermost last; what each
    wrapped class held before; and, per thread, whether a handler runs."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.open: list = []  # the routes open, innermost last
        self.saved: dict = {}  # (class, attribute) -> what it held before
        self.inside = threading.local()  # .depth: handlers running on this thread


#: the process's open routes
ROUTES: Routes = PROCESS.own("routes", Routes)


class SubclassRoutes:
    """Where no function mode runs, the calls that bypass the backend still reach their handler:
    those a tensor subclass takes over in Python (a jagged nested tensor's own attention), and
    the higher-order operators that are units (flex attention). While routes are open, each such
    subclass's ``__torch_function__`` and each such operator's class's ``__call__`` is wrapped
    (put back exactly when the last route closes; a subclass defined meanwhile is not). Routes
    open and close in any order: the innermost open one routes; inside a handler, nothing is
    routed again (as inside a mode's handler).
    """

    def __init__(self, handlers: dict) -> None:
        self.handlers = handlers

    def open(self) -> None:
        routes = ROUTES
        if not routes.open:
            for cls in torch_function_subclasses():
                original = cls.__dict__["__torch_function__"]
                routes.saved[(cls, "__torch_function__")] = original
                # (a tensor subclass's own classmethod, replaced: ``type`` declares none)
                cls.__torch_function__ = classmethod(_routed(original))  # type: ignore[attr-defined]
            for cls in {type(f) for f in self.handlers if is_higher_order_op(f)}:
                original = cls.__dict__.get("__call__", _INHERITED)
                routes.saved[(cls, "__call__")] = original
                cls.__call__ = _routed_call(cls.__call__)
        routes.open.append(self)

    def close(self) -> None:
        routes = ROUTES
        if self in routes.open:
            routes.open.remove(self)
        if not routes.open:
            saved, routes.saved = routes.saved, {}
            for (cls, name), original in saved.items():
                if original is _INHERITED:
                    delattr(cls, name)
                else:
                    setattr(cls, name, original)


_INHERITED = object()  # a class that had no attribute of its own


def _handler_of(func):
    """The innermost open route's handler of ``func`` (None: none, or inside a handler)."""
    if getattr(ROUTES.inside, "depth", 0) or not ROUTES.open:
        return None
    try:
        return ROUTES.open[-1].handlers.get(func)
    except TypeError:  # an unhashable callable has no handler
        return None


def _handled(handler, func, args, kwargs):
    inside = ROUTES.inside
    inside.depth = 1
    try:
        return handler(func, args, kwargs or {})
    finally:
        inside.depth = 0


def _routed_call(original):
    def __call__(self, *args, **kwargs):
        handler = _handler_of(self)
        if handler is not None:
            return _handled(handler, self, args, kwargs)
        return original(self, *args, **kwargs)

    return __call__


def _routed(original: classmethod):
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        handler = _handler_of(func)
        if handler is not None:
            return _handled(handler, func, args, kwargs)
        return original.__get__(None, cls)(func, types, args, kwargs)

    return __torch_function__


class FunctionInterceptor:
    """Capture source: routes the functions subscribed to ``ctx.events.functions`` to their
    handler (``handler(func, args, kwargs) -> result``, which must call ``func``)."""

    def __init__(self, ctx: CaptureContext) -> None:
        self._handlers: dict[Callable, Callable] = ctx.events.functions
        self._mode: _InterceptMode | None = None
        self._routes: SubclassRoutes | None = None
        self._paused = False

    def start(self, ctx: CaptureContext) -> None:
        needed, hook = ctx.backend.function_routing(self._handlers)
        if needed:
            self._mode = _InterceptMode(self._handlers)
            if hook is not None:  # the same routing, faster (the native backend's, in C)
                # an instance attribute over the method: torch looks it up on the mode object
                self._mode.__torch_function__ = types.MethodType(hook, self._mode)  # type: ignore[method-assign]
            self._mode.__enter__()
        elif self._handlers:  # plain tensors' calls are the backend's; a subclass's still come here
            self._routes = SubclassRoutes(self._handlers)
            self._routes.open()

    def stop(self, ctx: CaptureContext) -> None:
        mode, self._mode = self._mode, None
        if mode is not None and not self._paused:
            exit_mode(mode)  # another profiler's mode may have entered above it
        routes, self._routes = self._routes, None
        if routes is not None:
            routes.close()
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
