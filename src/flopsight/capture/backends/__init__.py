"""The hot path of a capture, behind one :class:`Backend` protocol, chosen once per capture.

A backend owns the three things that run per op or per module call:

* **op capture and costing**: each aten op (and each unit the recorder sees whole), charged
  through the attribution object with the registry's formulas;
* **module-call tracking**: the stack of active calls and the call log (:mod:`..calls`);
* **settling**: a backend may charge ops later than they run (the native one charges its
  records in batches); :meth:`Backend.settle` charges what ran so far under the state it ran
  in, and the context calls it whenever that state is about to change (a call counted whole:
  :class:`~..context.CaptureContext`), the call tracking before it pushes or pops a call, the
  attribution object before it charges a call itself. Where only the phase changes or a span
  ends, :meth:`Backend.settle_later` sets what ran aside under the state it ran in (the native
  backend charges it at the next settle, at the latest when the capture is collected). No
  source calls either.

Two implementations: :mod:`.python` (a dispatch mode and Python module hooks: the fallback,
and the check in tests) and :mod:`.native` (``RecordFunction`` and C++ module hooks, in
``recorder.cpp``). :func:`choose` picks one from the options and what the sources need, before
they are made; the session makes it once, and nothing downstream decides again.

``backend="auto"`` (the default, or ``$FLOPSIGHT_BACKEND``) counts natively where the recorder
gives the Python path's numbers (checked once per build, :mod:`.native.self_check`) and it
serves what the sources need (memory from the allocators' reports where they give it);
``"native"`` asks for it (an error when it cannot be built; the same fall-backs otherwise, each
named in ``result.metadata.backend_note``); ``"python"`` always uses the Python backend.

>>> check_backend("python")
'python'
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol

__all__ = ["Backend", "BACKENDS", "check_backend", "choose"]

BACKENDS = ("auto", "native", "python")
ENVIRONMENT = "FLOPSIGHT_BACKEND"


class Backend(Protocol):
    """The per-op and per-call capture of one session (see the module docstring)."""

    #: whether it publishes the model's memory to ``ctx.events.allocations`` (else the memory
    #: source reads each op's outputs)
    tracks_memory: bool
    #: whether its module-call tracking hears every thread's calls of the model (the native
    #: recorder's process-wide C++ hooks): another thread may not profile one of its modules
    hears_all_threads: bool
    #: whether it stamps module calls on the host inside phases a device's clock times (the
    #: native recorder's hooks, in a counting session on a CUDA clock)
    host_call_stamps: bool

    def start(self, ctx) -> None:
        """Install the module-call tracking, then the op capture."""

    def stop(self, ctx) -> None:
        """Charge what is left, then remove everything installed (also after a failed start)."""

    def collect(self, ctx) -> tuple:
        """Its parts of the raw capture: :class:`~..calls.ModuleCalls`, and
        :class:`~..counts.Counts` when it counts."""

    def settle(self) -> None:
        """Charge what ran so far under the state it ran in (the context's, now)."""

    def settle_later(self) -> None:
        """The state that decides where a cost goes is about to change (a phase, a span's
        boundary): what ran so far goes under the state it ran in, charged now or at the next
        :meth:`settle` (the native backend sets its records aside: nothing reads them until a
        settle)."""

    def in_order(self, action: Callable[[], None]) -> None:
        """Do ``action`` (a source's, on what it saw happen now) in order with what is charged:
        after what ran before now, before what runs after (at once where nothing waits; the
        native backend marks its place in the recorder's stream)."""

    def innermost_module(self, stack: list) -> str | None:
        """The path of the innermost module call running now (None outside every call): the
        top of ``stack`` (the context's) where the module calls are pushed as they happen,
        else known without it (the native recorder's C++ hooks keep their own stack)."""

    def aside(self) -> AbstractContextManager:
        """A context in which a call counted whole runs: its ops are not counted again."""

    def unrecorded(self) -> AbstractContextManager:
        """A context in which the profiler's own torch ops are recorded by no session (a
        formula reading values)."""

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


def choose(ctx, needs: frozenset = frozenset()) -> Backend:
    """The backend for the session of context ``ctx`` (its options read), whose sources need
    ``needs`` of it (:data:`~..plan.NEEDS`). Chosen before any source is made."""
    from .native import native_backend
    from .python import PythonBackend

    backend, note = native_backend(ctx, needs)
    return backend if backend is not None else PythonBackend(ctx, note)
