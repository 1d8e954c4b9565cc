"""The native backend (:mod:`flopsight.capture.backends.native`): its calls and ops composed."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from torch import nn

from ...._torch_private import is_higher_order_op
from ...runtime.running import RUNNING
from ...runtime.timing import on_device
from ..composed import CallsAndOps
from ..python.calls import PythonCalls
from .calls import NativeCalls
from .ops import NativeCountingSource
from .recorder import RECORDER
from .stamps import OpStamps

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["NativeBackend"]


class NativeBackend(CallsAndOps):
    """See the module docstring: ``ops``, the native counting (None in a timing session);
    ``native_calls``, whether the C++ hooks track the module calls; ``stamps``, whether a timing
    session times the ops too (:mod:`.stamps`; with the C++ hooks only)."""

    calls: NativeCalls | PythonCalls
    ops: NativeCountingSource | None

    def __init__(self, ctx, recorder, ops: NativeCountingSource | None, native_calls: bool, stamps: bool = False):
        self.ops = ops
        self.stamps = OpStamps(recorder, ctx.registry) if stamps and native_calls and ops is None else None
        #: memory from the allocators' reports (published to ``ctx.events.allocations``)
        self.tracks_memory = ops is not None and ops.memory
        #: the C++ hooks hear every thread's calls; inside phases a device's clock times, they
        #: stamp the calls on the host
        self.hears_all_threads = native_calls
        self.host_call_stamps = native_calls and ops is not None and on_device(ctx.clock)
        settle = ops.settle if ops is not None else None
        if native_calls:
            calls = self.calls = NativeCalls(ctx, recorder, drains=ops is None, settle=settle, stamps=self.stamps)
            if ops is not None:
                ops.replay_call = calls.replay
                # the C++ hooks' stack says which call runs, nothing charged first
                self.innermost_module = calls.innermost_module  # type: ignore[method-assign]
            settle = calls.settle
        else:
            self.calls = PythonCalls(ctx, settle)
        # (instance attributes over the methods: the context calls them at every boundary)
        if settle is not None:
            self.settle = settle  # type: ignore[method-assign]
        if ops is not None:
            self.settle_later = ops.settle_later  # type: ignore[method-assign]
            self.in_order = ops.in_order  # type: ignore[method-assign]
        self._ctx = ctx

    def start(self, ctx) -> None:
        # One native session at a time: a session chosen while none ran may start after
        # another thread's has; then it must fail before its module tracking replaces the running
        # one's in the recorder (one process-wide set of C++ hooks), and leave that one running.
        with RECORDER.starting:
            if RECORDER.busy:
                raise RuntimeError(
                    "backend: flopsight's native recorder is already running a profile on another thread "
                    "(it runs one at a time); profile on this thread with backend='python'")
            super().start(ctx)

    def collect(self, ctx) -> tuple:
        parts = super().collect(ctx)
        return (*parts, self.stamps.collect()) if self.stamps is not None else parts

    def aside(self):
        return self.ops.aside() if self.ops is not None else contextlib.nullcontext()

    def unrecorded(self):
        return self.ops.unrecorded() if self.ops is not None else RUNNING.own_code()

    def function_routing(self, handlers: dict) -> tuple[bool, Callable | None]:
        """Whether a function mode is needed, and its ``__torch_function__`` in C: the same
        routing, with the units the recorder counts whole let through. Only where a unit it
        cannot record may run (one written in Python, a user's, a handler that is not a unit)."""
        if self.ops is None:
            return bool(handlers), None
        passthrough = self.ops.passthrough
        registry, modules = self._ctx.registry, self._modules()
        answers: dict = {}  # may_run -> its answer (several functions share one unit's)
        # a higher-order operator (flex attention) is routed through its class without a mode
        needed = any(_may_run(registry.unit(f), modules, answers) for f in handlers
                     if f not in passthrough and not is_higher_order_op(f))
        return needed, self.ops.recorder.function_mode_hook(handlers, set(passthrough)) if needed else None

    def _modules(self) -> list | None:
        """The profiled modules; None when the session counts a span of code with no model in
        it (a bare root): then any unit may run."""
        modules = [info.module for info in self._ctx.options.infos.values()]
        if len(modules) == 1 and type(modules[0]) is nn.Module:
            return None
        return modules


def _may_run(unit, modules: list | None, answers: dict) -> bool:
    if unit is None or unit.may_run is None or modules is None:
        return True
    answer = answers.get(unit.may_run)
    if answer is None:
        answer = answers[unit.may_run] = bool(unit.may_run(modules))
    return answer
