"""The capture sessions running on the current thread, innermost last: the call trackers read it
to tell their own thread's calls from another profile's (the module hooks are process-wide).

>>> running_here(), elsewhere(threading.get_ident())
([], False)
"""

from __future__ import annotations

import threading

__all__ = ["running_here", "elsewhere"]

_active = threading.local()  # .sessions: the sessions running on this thread, innermost last


def running_here() -> list:
    """The list of this thread's running sessions (the session module appends and removes)."""
    sessions = getattr(_active, "sessions", None)
    if sessions is None:
        sessions = _active.sessions = []
    return sessions


def elsewhere(home: int) -> bool:
    """Whether the call being heard is another profile's: the module hooks are process-wide, so
    a session whose thread is ``home`` also hears the calls a profiler on another thread makes,
    where that profiler's own session runs (a thread the model's forward starts, or the autograd
    engine's, has none)."""
    return threading.get_ident() != home and bool(running_here())
