"""The Python backend: ops through a dispatch mode (:mod:`.ops`), module calls through Python
hooks (:mod:`.calls`). It serves every case, so it is the fallback, and the check the native
backend is tested against."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from ...runtime.running import RUNNING
from ..composed import CallsAndOps
from .calls import PythonCalls
from .ops import CountingSource

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["PythonBackend"]


class PythonBackend(CallsAndOps):
    """See the module docstring; ``note``: why the native backend was not used (its counting
    source puts it in the result's metadata)."""

    tracks_memory = False  # the memory source reads each op's output storages itself
    calls: PythonCalls
    ops: CountingSource | None

    def __init__(self, ctx, note: str | None = None):
        self.calls = PythonCalls(ctx)
        self.ops = CountingSource(ctx, note) if ctx.options.count else None

    def aside(self):  # a call counted whole: the dispatch mode off while it runs
        return self.ops.aside() if self.ops is not None else contextlib.nullcontext()

    def unrecorded(self):  # the profiler's own ops: no session records them (see ...running)
        return RUNNING.own_code()

    def function_routing(self, handlers: dict) -> tuple[bool, Callable | None]:  # every unit is seen in Python
        return bool(handlers), None
