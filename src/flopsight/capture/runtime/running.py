"""The capture sessions running in this process, and what happens when it ends while some run.

Sessions run on any thread and nest or overlap in any order. :data:`RUNNING` keeps each
running session's thread and modules (the native recorder's hooks hear every thread's calls,
so two threads may not profile one model with it), torch's dispatch-mode flags as the first
running session found them (put back when the last one stops), and each thread's sessions in
the order they started (:meth:`RunningSessions.here`).

**The end of the process.** However it ends with a profile open (the script's end, an uncaught
exception, ``sys.exit``, ``SIGTERM`` from a launcher tearing its ranks down), the exit handler
first runs the callbacks front-ends registered with :meth:`RunningSessions.at_exit` (a profile
that writes a report writes what it measured, marked incomplete), newest first, then stops every
session still running, newest first. Nothing of flopsight (hooks, modes, the native recorder's
callbacks) is left when the interpreter finalises, and the process ends with the status it
would have had: a ``SIGTERM`` handler is installed only while such a callback is registered,
only where the signal's handler was the default one, and after saving it ends the process by
the same signal. A ``SIGTERM`` that arrives while the callbacks save (a rank that raised, torn
down by its launcher meanwhile) ends the process once they are done.

**Several at once.** Sessions nest and overlap freely; none pauses another. Each counts the
ops that run inside its own model during its own span, as if it ran alone: a profile of a
training step keeps the forward that a library profiles inside it, and an outer profile
includes what an inner one counted. What keeps them apart is the profiler's own code (a
formula reading a mask, a native batch charged in Python, the meta tensors of a signature):
it runs inside :meth:`RunningSessions.own_code`, which no session records. And the profiler's
own time is one clock per thread (:meth:`RunningSessions.overhead`), which every session on it
adds to and reads differences of, so each leaves the others' time out of its spans as it
leaves out its own.

>>> RUNNING.here(), RUNNING.elsewhere(threading.get_ident()), OWN_CODE.depth
([], False, 0)
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

from ..._process import PROCESS
from ..._torch_private import dispatch_mode_flags, set_dispatch_mode_flags
from .overhead import Overhead

__all__ = ["RUNNING", "RunningSessions", "OWN_CODE"]


class _OwnCode(threading.local):
    """How deep this thread is in the profiler's own code (0: the user's): read per op."""

    depth = 0


#: the profiler's own code running on this thread (see :meth:`RunningSessions.own_code`)
OWN_CODE = _OwnCode()


class _OwnCodeSpan:
    """See :meth:`RunningSessions.own_code`."""

    __slots__ = ("_unrecorded",)

    def __init__(self, unrecorded: AbstractContextManager | None) -> None:
        self._unrecorded = unrecorded

    def __enter__(self) -> None:
        OWN_CODE.depth += 1
        if self._unrecorded is not None:
            try:
                self._unrecorded.__enter__()
            except BaseException:
                OWN_CODE.depth -= 1
                raise

    def __exit__(self, *exc: Any) -> None:
        try:
            if self._unrecorded is not None:
                self._unrecorded.__exit__(*exc)
        finally:
            OWN_CODE.depth -= 1


class Running(NamedTuple):
    """A running session: its thread, the ids of its modules, whether the native recorder's
    process-wide hooks track its calls."""

    session: Any
    thread: int
    modules: frozenset
    native: bool


class RunningSessions:
    """See the module docstring. One per process: :data:`RUNNING`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()  # .sessions: this thread's, innermost last
        self.reset()
        atexit.register(self._exit)

    def reset(self) -> None:
        self._running: dict[int, Running] = {}  # id(session) -> Running, in the order they started
        self._flags_before: dict | None = None
        self._exit_callbacks: list[Callable[[], None]] = []
        self._sigterm_before: Any = None  # the SIGTERM handler replaced (None: not replaced)
        self._saving = False  # the exit's saves are running: a SIGTERM waits for them
        self._terminate_after = False  # a SIGTERM came while they ran
        self._local = threading.local()

    # -- the sessions ------------------------------------------------------------------------
    def here(self) -> list:
        """This thread's running sessions, innermost last (the session appends and removes)."""
        sessions = getattr(self._local, "sessions", None)
        if sessions is None:
            sessions = self._local.sessions = []
        return sessions

    def elsewhere(self, home: int) -> bool:
        """Whether the call being heard is another profile's: module hooks are process-wide, so
        a session whose thread is ``home`` also hears the calls a profiler on another thread
        makes, where that profiler's own session runs (a thread the model's forward starts, or
        the autograd engine's, has none)."""
        return threading.get_ident() != home and bool(getattr(self._local, "sessions", None))

    def own_code(self, unrecorded: AbstractContextManager | None = None) -> AbstractContextManager:
        """The profiler's own code runs torch ops meanwhile: no session records them (its
        dispatch mode and function mode pass them through; ``unrecorded``: a context that
        takes a backend's recording off, the native recorder's). A plain object, not a
        generator: a collective's handler enters one per call."""
        return _OwnCodeSpan(unrecorded)

    def overhead(self, now: Callable[[], float]) -> Overhead:
        """The profiler's own time on this thread, as measured with clock ``now``: one object
        that every session of this thread on that clock adds to (see the module docstring)."""
        kept = getattr(self._local, "overheads", None)
        if kept is None:
            kept = self._local.overheads = {}
        found = kept.get(now)
        if found is None:
            found = kept[now] = Overhead(now)
        return found

    def claim(self, session: Any, modules: frozenset, native: bool) -> None:
        """Register ``session`` (its modules' ids; whether the native recorder's hooks track
        them), or refuse: another thread profiles one of the same modules and either session
        is tracked by those hooks, which hear every thread's calls (its calls would count twice)."""
        me = threading.get_ident()
        with self._lock:
            for other in self._running.values():
                if other.thread != me and (native or other.native) and not modules.isdisjoint(other.modules):
                    raise RuntimeError(
                        "model: another thread is profiling this model (or one of its modules), and flopsight's "
                        "native recorder, which one of the two profiles uses, hears every thread's calls of it: "
                        "profile the model on one thread at a time, or pass backend='python' to both profiles")
            if not self._running:
                self._flags_before = dispatch_mode_flags()
            self._running[id(session)] = Running(session, me, modules, native)

    def release(self, session: Any) -> None:
        """``session`` stopped: torch's dispatch-mode flags put back after the last one."""
        with self._lock:
            if self._running.pop(id(session), None) is not None and not self._running \
                    and self._flags_before is not None:
                set_dispatch_mode_flags(self._flags_before)
                self._flags_before = None

    def sessions(self) -> list:
        """Every running session, in the order they started."""
        with self._lock:
            return [r.session for r in self._running.values()]

    # -- the end of the process ------------------------------------------------------------
    def at_exit(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback()`` if the process ends before it is removed (see the module
        docstring); returns the function that removes it."""
        with self._lock:
            self._exit_callbacks.append(callback)
        self._watch_sigterm()

        def remove() -> None:
            with self._lock:
                if callback in self._exit_callbacks:
                    self._exit_callbacks.remove(callback)
                last = not self._exit_callbacks
            if last and not self._saving:  # (the exit's saves put the handler back once done)
                self._unwatch_sigterm()

        return remove

    def _exit(self) -> None:
        """Save what front-ends asked to save, then stop every session still running."""
        with self._lock:
            callbacks, self._exit_callbacks = self._exit_callbacks[::-1], []
        # a launcher tearing the ranks down sends SIGTERM while a failed rank saves: the
        # signal's handler stays until the saves are done, and then ends the process
        self._saving = True
        try:
            for callback in callbacks:
                try:
                    callback()
                except BaseException as e:  # one line: the process is ending for a reason of its own
                    print(f"flopsight: saving an incomplete profile at exit failed: {type(e).__name__}: {e}",
                          file=sys.stderr)
        finally:
            self._saving = False
        self._unwatch_sigterm()
        for session in reversed(self.sessions()):
            try:
                session.abandon()
            except BaseException:  # noqa: S110 - nothing can be done about it at exit
                pass
        if self._terminate_after:
            self._terminate_after = False
            _end_by_sigterm()

    def _watch_sigterm(self) -> None:
        """While a callback is registered: SIGTERM saves, then ends the process as it would have."""
        if self._sigterm_before is not None or threading.current_thread() is not threading.main_thread():
            return
        try:
            if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:  # the program's own handler
                return
            self._sigterm_before = signal.signal(signal.SIGTERM, self._terminated)
        except (ValueError, OSError, AttributeError):  # no signals here (an embedded interpreter)
            self._sigterm_before = None

    def _unwatch_sigterm(self) -> None:
        before, self._sigterm_before = self._sigterm_before, None
        if before is None or threading.current_thread() is not threading.main_thread():
            return
        try:
            if signal.getsignal(signal.SIGTERM) == self._terminated:
                signal.signal(signal.SIGTERM, before)
        except (ValueError, OSError):
            pass

    def _terminated(self, signum: int, frame: Any) -> None:
        if self._saving:  # the exit's saves go on: the signal ends the process after them
            self._terminate_after = True
            return
        self._exit()
        _end_by_sigterm()


def _end_by_sigterm() -> None:
    """End the process as SIGTERM's default action does."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


#: the process's running sessions
RUNNING: RunningSessions = PROCESS.own("sessions", RunningSessions)
