"""One thread of the process for work that must not run on the caller's critical path (a
detached profile's finish: :meth:`flopsight.Profiler.stop_detached`): :data:`BACKGROUND`.

Starting a thread costs a few hundred microseconds (its start waits for the new thread to run),
about a tenth of the DeepSpeed engine's step it would be started on; so the thread is started
once, where nothing is timed (:meth:`Background.ready`: when the engine's profiler is made),
and takes the work in turn. The interpreter's exit waits for the work handed to it (it is a
``concurrent.futures`` worker); handed over while the interpreter shuts down, the work runs at
once, on the caller's thread.

>>> BACKGROUND.submit(sum, [1, 2]).result()
3
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ._process import PROCESS

__all__ = ["BACKGROUND", "Background"]


class Background:
    """See the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._pid = 0  # the process that made the executor (a forked child makes its own)

    def ready(self) -> None:
        """Start the thread now, if it is not running, so the first work handed over later
        does not wait for it to start."""
        self.submit(_nothing)

    def submit(self, work: Callable[..., Any], *args: Any) -> Future:
        """``work(*args)`` on the thread, after the work handed over before it."""
        try:
            return self._executor_now().submit(work, *args)
        except RuntimeError:  # the interpreter is shutting down: no new work there
            done: Future = Future()
            try:
                done.set_result(work(*args))
            except BaseException as e:
                done.set_exception(e)
            return done

    def _executor_now(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None or self._pid != os.getpid():
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="flopsight-background")
                self._pid = os.getpid()
            return self._executor

    def reset(self) -> None:
        """Wait for the work handed over, then as a fresh process has it (no thread)."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None and self._pid == os.getpid():
            executor.shutdown(wait=True)


def _nothing() -> None:
    pass


#: the process's background thread
BACKGROUND: Background = PROCESS.own("background", Background)
