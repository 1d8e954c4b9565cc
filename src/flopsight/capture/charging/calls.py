"""Module calls, as both backends record them: :class:`CallRecord` (one call),
:func:`unwind` (the one "unwind to my frame" rule of the stack of active calls),
:class:`ModuleCalls` (the part of a raw capture they make) and :class:`CallTracking`, the
state and the collection the two backends' call trackers share
(``backends/python/calls.py``: Python hooks; ``backends/native/calls.py``: C++ hooks).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import nn

from ..model.inputs import batch_size
from ..model.scripted import is_scripted
from ..runtime.running import RUNNING

__all__ = ["CallRecord", "begun", "unwind", "ModuleCalls", "TopCall", "CallTracking", "choose_path",
           "autocast_dtypes", "note_error", "failure_text"]


def _parent_of(path: str) -> str:
    return path.rpartition(".")[0]


def choose_path(paths: list[str], caller: str | None) -> str:
    """The path of a module object for one call, given the path of the calling module.

    >>> choose_path(["enc.norm", "dec.norm"], "dec")
    'dec.norm'
    >>> choose_path(["enc.norm", "dec.norm"], "dec.layer.0")  # closest shared prefix
    'dec.norm'
    """
    if len(paths) == 1 or caller is None:
        return paths[0]
    for p in paths:
        if _parent_of(p) == caller:
            return p

    def shared_prefix(p: str) -> int:
        a, b = p.split("."), caller.split(".")
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    return max(paths, key=shared_prefix)


class CallRecord:
    """One module call: its path, phase, the stamps around it and the autograd nodes it made."""

    __slots__ = (
        "index", "path", "phase", "module", "parent", "start", "end", "ovh_start", "ovh_end", "exc",
        "seq_start", "seq_end", "top_id", "batch_size", "thread",
    )

    def __init__(self, index: int, path: str, phase: str, module: nn.Module, parent: int, exc):
        self.index = index  # position in the call log
        self.path = path
        self.phase = phase  # "forward", or "recompute" for a forward re-run during backward
        self.module = module
        self.parent = parent  # log index of the enclosing call, -1 for none
        self.exc = exc  # the exception being handled when the call began, if any
        # the clock's stamps (whatever its stamps are: see Clock.stamp), None until taken
        self.start: Any = None
        self.end: Any = None
        self.ovh_start = self.ovh_end = 0.0
        # autograd nodes created by this call are numbered seq_start <= n < seq_end
        self.seq_start: int | None = None
        self.seq_end: int | None = None
        self.top_id = -1  # index among the top-level forward calls, -1 for nested ones
        self.batch_size: int | None = None
        #: whose autograd sequence counter numbered its nodes: 0 the profiling thread's, else
        #: the thread ident of the backward thread it was re-run on (CUDA's, see CallOwners)
        self.thread = 0


class TopCall(NamedTuple):
    """A top-level forward call: its module path, its seconds, its batch size (None: unknown)."""

    path: str
    seconds: float
    batch_size: int | None


@dataclass
class ModuleCalls:
    """The call tracker's part of a raw capture: per (path, phase), the calls and the
    seconds spent in the module's own code (its children's spans left out); the top-level
    forward calls; the first inputs the model was called with; the error it raised.

    ``log`` and ``seconds`` (each call record and the seconds its span measured, 0 for one
    that did not end) are what the timeline is placed from."""

    calls: dict[tuple[str, str], int] = field(default_factory=dict)
    latency: dict[tuple[str, str], float] = field(default_factory=dict)
    #: each top-level forward call
    top_calls: list[TopCall] = field(default_factory=list)
    first_inputs: tuple | None = None  # (args, kwargs) of the first top-level module call
    #: device type -> the autocast dtype enabled for it when the first top-level call began
    #: (read inside the span: users enter autocast around the forward, not around the profiler)
    autocast: dict[str, str] = field(default_factory=dict)
    error: str | None = None  # what the profiled call raised, if it did
    log: list = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    @property
    def forward_spans(self) -> list[float]:
        """Seconds of each top-level forward call (the model, or what modules of it the
        caller ran directly): the wall time of the forward phase."""
        return [self.seconds[r.index] for r in self.log if r.parent < 0 and r.phase == "forward"]


def begun(index: int, paths: list[str], caller: CallRecord | None, phase: str, module: nn.Module, seq: int,
          exc=None) -> CallRecord:
    """The record of a module call that begins, however it was heard (a Python hook, the native
    recorder's replay): ``index`` in the call log, its path among the module's ``paths`` by its
    ``caller``'s (the innermost call running, None for a top-level call, which is its parent),
    ``phase``, the autograd sequence counter ``seq`` then, the exception being handled then.

    >>> outer = begun(0, [""], None, "forward", "M", 5)
    >>> inner = begun(1, ["enc.norm", "dec.norm"], begun(0, ["dec"], None, "forward", "D", 5), "forward", "N", 7)
    >>> (outer.parent, outer.seq_start), (inner.path, inner.parent, inner.seq_start)
    ((-1, 5), ('dec.norm', 0, 7))
    """
    path = paths[0] if len(paths) == 1 else choose_path(paths, caller.path if caller is not None else None)
    rec = CallRecord(index, path, phase, module, caller.index if caller is not None else -1, exc)
    rec.seq_start = seq
    return rec


def unwind(stack: list, module: nn.Module) -> CallRecord | None:
    """The innermost active call of ``module`` (left on ``stack``), once the calls above it are
    dropped; None when ``module`` has no active call. A child whose exception the caller
    caught never reached its own post-hook: it is abandoned here, by the parent's post-hook.

    >>> a, b = CallRecord(0, "", "forward", "A", -1, None), CallRecord(1, "x", "forward", "B", 0, None)
    >>> stack = [a, b]
    >>> unwind(stack, "A") is a, stack == [a]
    (True, True)
    """
    while stack and stack[-1].module is not module:
        stack.pop()
    return stack[-1] if stack else None


class CallTracking:
    """What both backends' call trackers keep (the model's paths per module object, the
    top-level forward calls, the first inputs, autocast, the error the model raised) and
    how they turn the call log into :class:`ModuleCalls`. A capture source: the backend
    starts and stops it."""

    def __init__(self, ctx):
        options = ctx.options
        #: forward calls made from outside the model: of the model itself, or of a submodule
        #: called directly (generate() runs an encoder-decoder's encoder that way)
        self.top_calls: list[CallRecord] = []
        self.first_inputs: tuple | None = None
        self.autocast: dict[str, str] | None = None
        self.error: str | None = None
        self.paths: dict[int, list[str]] = {}  # id(module) -> its paths in the model
        for info in options.infos.values():
            if not options.ignore(info.module):
                self.paths.setdefault(id(info.module), []).append(info.path)
        self.root = options.infos[""].module
        # A scripted or traced root refuses hooks of its own (the global hooks still see its
        # calls): its inputs are recorded from the global pre-hook instead
        self.root_is_script = is_scripted(self.root)

    def tracked_modules(self, ctx) -> list[nn.Module]:
        """The model's module objects whose calls are tracked, each once."""
        return list({id(info.module): info.module for info in ctx.options.infos.values()
                     if id(info.module) in self.paths}.values())

    def record_inputs(self, ctx):
        """The hook that records the model's first inputs and each top-level call's batch size."""
        home = threading.get_ident()

        def record_inputs(module, args, kwargs=None) -> None:
            # runs after the global pre-hook, so the root's call record is on top of the stack.
            # kwargs=None: torch looks a hook's with_kwargs flag up at each call, so a call running
            # while another thread's profiler adds or removes its own hook of the root may miss it
            if RUNNING.elsewhere(home):  # another thread's profile
                return
            kwargs = {} if kwargs is None else kwargs
            if self.first_inputs is None:
                self.first_inputs = (args, kwargs)
            if ctx.stack and ctx.stack[-1].top_id >= 0:
                ctx.stack[-1].batch_size = batch_size(args, kwargs)

        return record_inputs

    def collect(self, ctx) -> ModuleCalls:
        """Each call's span in seconds (the profiler's overhead left out) and, per (path,
        phase), its calls and own time: its span less its children's."""
        log = list(ctx.calls)
        part = ModuleCalls(first_inputs=self.first_inputs, error=self.error, log=log, autocast=self.autocast or {})
        span = part.seconds = [0.0] * len(log)
        for rec in log:
            key = (rec.path, rec.phase)
            part.calls[key] = part.calls.get(key, 0) + 1
            if rec.end is not None:
                span[rec.index] = ctx.span_seconds(rec.start, rec.end, rec.ovh_start, rec.ovh_end)
        children = [0.0] * len(log)
        for rec in reversed(log):  # children are logged after their parent
            if rec.end is None:
                continue
            key = (rec.path, rec.phase)
            part.latency[key] = part.latency.get(key, 0.0) + max(span[rec.index] - children[rec.index], 0.0)
            if rec.parent >= 0:
                children[rec.parent] += span[rec.index]
        part.top_calls = [TopCall(rec.path, span[rec.index], rec.batch_size) for rec in self.top_calls]
        return part


def autocast_dtypes() -> dict[str, str]:
    """Device type -> the dtype autocast runs eligible ops in, for each device type where it
    is enabled now.

    >>> with torch.autocast("cpu", dtype=torch.bfloat16):
    ...     autocast_dtypes()
    {'cpu': 'bfloat16'}
    """
    on = {}
    for device_type in ("cuda", "cpu"):
        if torch.is_autocast_enabled(device_type):
            on[device_type] = str(torch.get_autocast_dtype(device_type)).replace("torch.", "")
    return on


_NOTE_PREFIX = "flopsight: raised in module"


def note_error(record: CallRecord, exc: BaseException, root: bool) -> str | None:
    """A module's forward raised: name the module on the exception (once, innermost first);
    at the root, say that the profiled call failed (returns what the result records). Counting
    goes on: the caller may catch the exception and run the model again."""
    notes = getattr(exc, "__notes__", None) or []
    if not any(str(n).startswith(_NOTE_PREFIX) for n in notes):
        note = f"{_NOTE_PREFIX} {record.path or '<root>'!r} ({type(record.module).__name__})"
        if hasattr(exc, "add_note"):
            exc.add_note(note)
        else:  # Python 3.10: the attribute add_note would set
            exc.__notes__ = [*notes, note]  # type: ignore[attr-defined]  # 3.10's stubs declare no __notes__
    if root:
        return failure_text(exc)
    return None


def failure_text(exc: BaseException) -> str:
    """What raised and where, read off the note :func:`note_error` put on the exception (the
    innermost module's): ``"RuntimeError raised in module 'fc' (Linear)"``; the exception's
    type alone if no module of a profiled model raised it.

    >>> failure_text(ValueError("x"))
    'ValueError'
    """
    prefix = _NOTE_PREFIX + " "
    where = next((str(n)[len(prefix):] for n in getattr(exc, "__notes__", None) or () if str(n).startswith(prefix)),
                 None)
    return f"{type(exc).__name__} raised in module {where}" if where else type(exc).__name__
