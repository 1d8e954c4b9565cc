"""The capture sessions running on the current thread, innermost last: the call trackers read it
to tell their own thread's calls from another profile's (the module hooks are process-wide).

>>> running_here()
[]
"""

from __future__ import annotations

import threading

__all__ = ["running_here"]

_active = threading.local()  # .sessions: the sessions running on this thread, innermost last


def running_here() -> list:
    """The list of this thread's running sessions (the session module appends and removes)."""
    sessions = getattr(_active, "sessions", None)
    if sessions is None:
        sessions = _active.sessions = []
    return sessions
