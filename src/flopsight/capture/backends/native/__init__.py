"""The native counting backend: which path counts a session's ops, and why.

``backend="auto"`` (the default, or ``$FLOPSIGHT_BACKEND``) counts with the native recorder
where it gives the dispatch mode's numbers at a fraction of its cost, and with the Python
dispatch mode where a source needs each op in Python while it runs (memory tracking,
collectives under torch.distributed), where the clock stamps ops on the device (CUDA
events), inside another running native session, where the recorder cannot be built, and
where it does not count a small model as the Python path does (:mod:`.self_check`, once per
process: a torch whose rules the recorder does not know).
``"native"`` asks for the recorder (an error when it cannot be built here; the same
fall-backs otherwise, each named in ``result.metadata.backend_note``); ``"python"`` always
uses the dispatch mode.

>>> check_backend("python")
'python'
"""

from __future__ import annotations

import os

from ..timing import FakeClock, HostClock
from .build import failure, load
from .self_check import check

__all__ = ["BACKENDS", "check_backend", "choose"]

BACKENDS = ("auto", "native", "python")
ENVIRONMENT = "FLOPSIGHT_BACKEND"

_in_use = [0]  # native sessions running: the recorder is one per process


def check_backend(backend: str | None) -> str:
    """``backend`` checked (None: ``$FLOPSIGHT_BACKEND``, else ``"auto"``)."""
    if backend is None:
        value = os.environ.get(ENVIRONMENT, "").strip() or "auto"
        if value not in BACKENDS:
            raise ValueError(f"{ENVIRONMENT}: expected one of {', '.join(map(repr, BACKENDS))}, got {value!r}")
        return value
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
    return backend


def choose(backend: str, ctx) -> tuple[object | None, str | None]:
    """(the loaded recorder, or None for the Python path; why not native, or None) for a
    session asked for ``backend`` with context ``ctx`` (its sources already subscribed)."""
    if backend == "python":
        return None, None
    if ctx.events.claims:
        return None, "collectives under torch.distributed are timed op by op in Python"
    if ctx.events.ops:
        return None, "memory tracking reads each op's tensors in Python while it runs"
    if not isinstance(ctx.clock, (HostClock, FakeClock)) or (backend == "auto" and isinstance(ctx.clock, FakeClock)):
        return None, f"ops are timed on the {ctx.clock.name} clock"
    if _in_use[0]:
        return None, "a native session is already running (profiles nested in it count in Python)"
    recorder = load(quiet=False)
    if recorder is None:
        if backend == "native":
            raise RuntimeError(f"backend: 'native' was asked for, but the native recorder cannot be built here "
                               f"({failure()}); use backend='auto' or 'python'")
        return None, "the native recorder cannot be built here"
    differs = check(recorder)
    if differs is not None:
        return None, f"the native recorder disagrees with the Python path on this torch ({differs})"
    return recorder, None
