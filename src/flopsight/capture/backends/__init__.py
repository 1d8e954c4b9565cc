"""The hot path of a capture, behind one :class:`Backend` protocol, chosen once per capture.

A backend owns the three things that run per op or per module call:

* **op capture and costing**: each aten op (and each unit the recorder sees whole), charged
  through the attribution object with the registry's formulas;
* **module-call tracking**: the stack of active calls and the call log (:mod:`..calls`);
* **phase changes**: ``ctx.settle()`` is called by every writer of the state that decides
  where a cost goes (the stack, the phase, a call counted whole, a pause) just before it changes
  it; a backend that charges later (the native one) installs it while it runs, to charge what
  ran under the state that is ending.

Two implementations: :mod:`.python` (a dispatch mode and Python module hooks: the fallback,
and the check in tests) and :mod:`.native` (``RecordFunction`` and C++ module hooks, in
``recorder.cpp``). :func:`choose` picks one from the options and the sources that
subscribed; the session makes it once, and nothing downstream decides again.

``backend="auto"`` (the default, or ``$FLOPSIGHT_BACKEND``) counts natively where the recorder
gives the Python path's numbers (checked once per build, :mod:`.native.self_check`) and
no source needs each op in Python; ``"native"`` asks for it (an error when it cannot be built;
the same fall-backs otherwise, each named in ``result.metadata.backend_note``); ``"python"``
always uses the Python backend.

>>> check_backend("python")
'python'
"""

from __future__ import annotations

import os
from typing import Callable, ContextManager, Protocol

__all__ = ["Backend", "BACKENDS", "check_backend", "choose"]

BACKENDS = ("auto", "native", "python")
ENVIRONMENT = "FLOPSIGHT_BACKEND"


class Backend(Protocol):
    """The per-op and per-call capture of one session (see the module docstring)."""

    #: whether it publishes the model's memory to ``ctx.events.allocations`` (else the memory
    #: source reads each op's outputs)
    tracks_memory: bool

    def start(self, ctx) -> None:
        """Install the module-call tracking, then the op capture."""

    def stop(self, ctx) -> None:
        """Charge what is left, then remove everything installed (also after a failed start)."""

    def collect(self, ctx) -> tuple:
        """Its parts of the raw capture: :class:`~..calls.ModuleCalls`, and
        :class:`~..counts.Counts` when it counts."""

    def unrecorded(self) -> ContextManager:
        """A context in which the profiler's own torch ops are not recorded (a formula reading values)."""

    def function_routing(self, handlers: dict) -> tuple[bool, Callable | None]:
        """Whether the function mode routing ``handlers`` is needed (a unit it cannot count
        itself may run), and a faster ``__torch_function__`` for it (None: the mode's own)."""


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


def choose(ctx) -> Backend:
    """The backend for the session of context ``ctx`` (its options read, its other sources
    already subscribed to ``ctx.events``)."""
    from .native import native_backend
    from .python import PythonBackend

    backend, note = native_backend(ctx)
    return backend if backend is not None else PythonBackend(ctx, note)
