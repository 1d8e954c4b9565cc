"""What both backends are made of (:class:`CallsAndOps`): their module-call tracking and their
op capture, started, stopped and collected in one order."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol

from ..runtime.context import innermost_path

__all__ = ["CallsAndOps"]


class _Part(Protocol):
    """What the backend does with each of its parts (a subclass names their own types)."""

    def start(self, ctx) -> None: ...

    def stop(self, ctx) -> None: ...

    def collect(self, ctx) -> object: ...


class _Calls(_Part, Protocol):
    def paused(self) -> contextlib.AbstractContextManager: ...


class CallsAndOps:
    """What both backends are made of: ``calls`` (module-call tracking, started first, stopped
    last) and ``ops`` (op capture, None in a session that counts nothing). Nothing to settle
    unless a part says so."""

    calls: _Calls  # (each backend's constructor sets it)
    ops: _Part | None = None
    tracks_memory = hears_all_threads = host_call_stamps = False

    def settle(self) -> None:
        pass

    def settle_later(self) -> None:
        self.settle()

    def in_order(self, action) -> None:
        self.settle_later()  # (what ran before it charged first: a part may hold it)
        action()

    def unrecorded(self) -> contextlib.AbstractContextManager:
        raise NotImplementedError

    @contextlib.contextmanager
    def not_run_for_real(self) -> Iterator[None]:
        """Code that runs the model not for real (a pipeline stage's shape inference on meta
        tensors): neither its ops nor its module calls are recorded."""
        with self.unrecorded(), self.calls.paused():
            yield

    def innermost_module(self, stack: list) -> str | None:
        return innermost_path(stack)  # (Python's hooks push and pop the calls as they happen)

    def start(self, ctx) -> None:
        self.calls.start(ctx)
        if self.ops is not None:
            try:
                self.ops.start(ctx)
            except BaseException:
                self.calls.stop(ctx)
                raise

    def stop(self, ctx) -> None:
        try:
            if self.ops is not None:
                self.ops.stop(ctx)  # charges what is left (the native backend replays its calls)
        finally:
            self.calls.stop(ctx)

    def collect(self, ctx) -> tuple:
        """The parts of the raw capture: the calls', and the ops' (one part, or a tuple of them:
        a backend's own measurement is one more part, read by whoever knows its type)."""
        ops = self.ops.collect(ctx) if self.ops is not None else None
        return (self.calls.collect(ctx), *(ops if isinstance(ops, tuple) else (ops,)))
