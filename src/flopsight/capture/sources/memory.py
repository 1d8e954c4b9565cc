"""Capture source: memory, counted from the tensors' storages (CPU, CUDA and meta alike).

* **Activations**: every tensor autograd saves for backward passes through a
  ``saved_tensors_hooks`` pack hook; its storage's bytes (once per storage, parameters left
  out) are charged to the module whose forward saved it.
* **Live bytes and peaks**: the counting mode hands over each op's outputs; a storage seen
  for the first time adds its bytes, and a weak reference to its Python object, which torch
  keeps alive exactly as long as the storage, takes them off when it is freed. The peak of each
  module call (the most bytes live while it ran, above what was live when profiling began)
  is a running maximum kept per call and passed up to the caller when the call ends; the
  span's peak is kept per phase, both as what was allocated while profiling and as everything
  live at once: what was live when the span began (:class:`LiveAtStart`) and lost as the span
  releases it, plus what the span allocated.

Parameters, gradients and optimizer state are read off the model and the optimizer when the
capture stops (see :class:`MemoryTotals` in :mod:`flopsight.result.memory`).

The source hears each op's outputs (``ctx.events.ops``), each module call (``.modules``) and
each optimizer step (``.steps``); a saved tensor belongs where the attribution object says.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial

import torch

from ..._torch_private import OpOverload, dtensor_local, op_schema, storage_key, tensor_storage
from ...result.memory import Buffer
from ..model.wrappers import gradients, local_shard, optimizer_state_tensors
from ..runtime.context import CaptureContext
from ..runtime.events import OpEvent

__all__ = ["MemorySource", "MemoryFigures", "LiveAtStart", "tensor_bytes", "NO_PEAK"]

NO_PEAK = -(2**63)  # a run of blocks' peak when none was allocated (see MemorySource.allocated_run)


def tensor_bytes(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors`` (views of one storage count once).

    >>> x = torch.ones(4, 4)
    >>> tensor_bytes([x, x[0], torch.ones(2, dtype=torch.float64)])
    80
    """
    seen, total = set(), 0
    for t in tensors:
        if isinstance(t, torch.Tensor):
            key = storage_key(t)
            if key is not None and key not in seen:
                seen.add(key)
                total += t.untyped_storage().nbytes()
    return total


@dataclass
class MemoryFigures:
    """The memory source's part of a raw capture: per module path the bytes its forward saved
    for backward, per (path, phase) its peak, and the totals of the span
    (:class:`~flopsight.result.memory.MemoryTotals`' fields)."""

    activations: dict[str, int] = field(default_factory=dict)
    peaks: dict[tuple[str, str], int] = field(default_factory=dict)
    totals: dict = field(default_factory=dict)
    #: per module path, the most bytes one of its ops held only while it ran (native only)
    temporaries: dict[str, int] = field(default_factory=dict)


class LiveAtStart:
    """What was live when the span began, and what of it the span released since.

    On a CUDA device the native backend reads, the allocator's figure
    (``torch.cuda.memory_allocated``: every block), and its reports of the blocks released
    (:meth:`MemorySource.freed_before`); elsewhere the model's parameters, their gradients and
    the optimizer's state, each storage once, a weak reference to each telling when the span
    releases it (c10's CPU allocator does not report the release of a block it handed out
    before memory was reported: other tensors live at the start are not seen there)."""

    def __init__(self, tensors: list, device: torch.device | None,
                 in_order: Callable[[Callable[[], None]], None] | None = None) -> None:
        self.released = 0
        #: a release told in order with the blocks allocated (the backend's
        #: :meth:`~flopsight.capture.backends.Backend.in_order`: it may count them later)
        self._in_order = in_order
        self.from_allocator = device is not None
        self._watched: list = []
        if device is not None:
            self.bytes = torch.cuda.memory_allocated(device)
            return
        self.bytes = 0
        seen = set()
        for t in tensors:
            storage = tensor_storage(t) if isinstance(t, torch.Tensor) else None
            if storage is None or storage._cdata in seen:
                continue
            seen.add(storage._cdata)
            nbytes = storage.nbytes()
            self.bytes += nbytes
            self._watched.append(weakref.ref(storage, partial(self._gone, nbytes)))

    def _gone(self, nbytes: int, _ref=None) -> None:
        if self._in_order is not None:
            self._in_order(partial(self._released, nbytes))
        else:
            self._released(nbytes)

    def _released(self, nbytes: int) -> None:
        self.released += nbytes

    def close(self) -> None:
        """Stop watching (what the span released is known)."""
        self._watched.clear()


class MemorySource:
    """Tracks saved activations per module and live bytes per module call and phase."""

    def __init__(self, ctx: CaptureContext) -> None:
        self._ctx = ctx
        self._optimizer = ctx.options.optimizer
        self._params = {storage_key(p) for p in ctx.params.tensors}  # not activations
        self.grads_at_step = 0  # the most gradient bytes held when a step began
        self.activations: dict[str, int] = {}  # module path -> bytes its forward saved
        self.peaks: dict[tuple[str, str], int] = {}  # (path, phase) -> peak bytes over its calls
        self.phase_peaks: dict[str, int] = {}  # of the bytes allocated while profiling
        #: of everything live: the bytes allocated while profiling less those of the start released
        self.phase_peaks_live: dict[str, int] = {}
        self._start: LiveAtStart | None = None
        self.temporaries: dict[str, int] = {}  # module path -> most bytes one op held while it ran
        self._temporary = 0  # bytes of the running op's temporaries
        self.live = 0
        self.largest = Buffer(0, "", "", "")  # the largest storage allocated
        self._saved: set = set()
        #: storage key -> (bytes, weak reference calling back when it is freed) of the
        #: storages allocated while profiling and alive
        self._tracked: dict = {}
        self._call_max: list[list] = []  # [call record, running max] of the calls on the stack
        self._hooks: torch.autograd.graph.saved_tensors_hooks | None = None
        self._active = False
        ctx.events.calls_in_order.append(self)  # in order with the blocks: the C++ hooks serve it
        ctx.events.steps.append(self)
        # live bytes from the allocators' reports where the backend reads them (native), else
        # from each op's output storages, read here (the Python backend publishes every op)
        if ctx.backend.tracks_memory:
            ctx.events.allocations.append(self)
        else:  # the outputs of each op, and of each call counted whole (its ops are not published)
            ctx.events.ops.append(self._op)
            ctx.events.calls.append(self._op)

    # -- lifecycle ----------------------------------------------------------------------
    def start(self, ctx: CaptureContext) -> None:
        params = ctx.params.tensors
        # the allocator's figures where it reports every block (CUDA's, through the native backend)
        cuda = next((p.device for p in params if p.device.type == "cuda"), None)
        self._start = LiveAtStart([*map(local_shard, params), *gradients(params, self._optimizer),
                                   *optimizer_state_tensors(self._optimizer)],
                                  cuda if ctx.backend.tracks_memory else None, ctx.backend.in_order)
        self._active = True
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)
        self._hooks.__enter__()

    def stop(self, ctx: CaptureContext) -> None:
        self._active = False
        self._tracked.clear()  # drops the weak references: storages still alive go unwatched
        if self._start is not None:
            self._start.close()
        hooks, self._hooks = self._hooks, None
        if hooks is not None:
            hooks.__exit__(None, None, None)

    def collect(self, ctx: CaptureContext) -> MemoryFigures:
        params = ctx.params.tensors
        at_start = self._start.bytes if self._start is not None else 0
        # everything live at once: what was live at the start, less what the span released of
        # it until then, plus what it allocated; the span itself (nothing allocated) counts too
        phase_peaks = {phase: at_start + peak for phase, peak in self.phase_peaks_live.items()}
        return MemoryFigures(dict(self.activations), dict(self.peaks), temporaries=dict(self.temporaries), totals={
            "params": tensor_bytes(local_shard(p) for p in params),
            "grads": max(self.grads_at_step, self._gradient_bytes()),
            "optimizer_state": tensor_bytes(optimizer_state_tensors(self._optimizer)),
            "activations": sum(self.activations.values()),
            "peak": max([at_start, *phase_peaks.values()]),
            "phase_peaks": phase_peaks,
            "live_at_start": at_start,
            "peak_allocated": max(self.phase_peaks.values(), default=0),
            "largest_buffer": asdict(self.largest) if self.largest.bytes else None,
        })

    def _gradient_bytes(self) -> int:
        """Bytes of the gradients held now."""
        return tensor_bytes(gradients(self._ctx.params.tensors, self._optimizer))

    # -- saved for backward -------------------------------------------------------------
    def _pack(self, tensor):
        ctx = self._ctx
        if isinstance(tensor, torch.Tensor):
            path = ctx.module_now()
            if path is None:
                return tensor
            key = storage_key(tensor)
            if key is not None and key not in self._saved and key not in self._params:
                self._saved.add(key)
                self.activations[path] = self.activations.get(path, 0) + tensor.untyped_storage().nbytes()
        return tensor

    # -- live bytes -----------------------------------------------------------------------
    def _op(self, event: OpEvent) -> None:
        if event.path is not None and event.phase is not None:  # the model's op (it has both): its new storages
            self.outputs(event.out, event.path, event.phase, event.entry, _aliased_returns(event.func))

    def outputs(self, out, path: str, phase: str, entry=None, aliased: tuple = ()) -> None:
        """An op (``entry``, its registry entry) charged to ``path`` and ``phase`` returned
        ``out`` (a tensor, or a tuple or list of them); ``aliased``: for each return, whether it
        is one of the op's inputs or a view of one (an in-place op's, ``out=``'s: not new)."""
        if isinstance(out, torch.Tensor):
            if not (aliased and aliased[0]):
                self._allocated(out, path, phase, entry)
        elif isinstance(out, (tuple, list)):
            for i, t in enumerate(out):
                if isinstance(t, torch.Tensor) and not (i < len(aliased) and aliased[i]):
                    self._allocated(t, path, phase, entry)

    def _allocated(self, t: torch.Tensor, path: str, phase: str, entry=None) -> None:
        local = dtensor_local(t)
        if local is not None:  # a DTensor (FSDP2's parameters, their gradients): what this rank holds
            t = local
        if t._base is not None:  # a view: its storage is its base's, seen (or not ours) already
            return
        key = storage_key(t)
        if key is None or key in self._tracked or key in self._params:
            return
        storage = t.untyped_storage()
        nbytes = storage.nbytes()
        self._tracked[key] = (nbytes, weakref.ref(storage, partial(self._freed, key)))
        self.allocated(nbytes, path, phase, getattr(entry, "name", None))

    def allocated(self, nbytes: int, path: str, phase: str, op: str | None = None) -> None:
        """``nbytes`` more are live, allocated by ``op`` for module ``path`` in ``phase`` (the
        native backend's blocks come in runs: :meth:`allocated_run`)."""
        if nbytes > self.largest.bytes:
            self.largest = Buffer(nbytes, op or "an op", path, phase)
        self.live += nbytes
        self._reached(self.live, path, phase)

    def allocated_run(self, path: str, phase: str, change: int, peak: int, largest: int, op: str | None,
                      temporaries: int, temporaries_peak: int) -> None:
        """Blocks allocated (and some of them released) one after another for module ``path``
        in ``phase``, summed by the native recorder (``recorder.cpp``'s drain_runs): what
        :meth:`allocated` and :meth:`freed` called for each in turn would leave. ``change``:
        the live bytes' change; ``peak``: its highest point after an allocation (``NO_PEAK``:
        none); ``largest``: the largest block, allocated by ``op``; ``temporaries`` and
        ``temporaries_peak``: the same two for the blocks their ops released before returning.
        (Perhaps after the span: the backend charges its records when the capture is collected.)"""
        if temporaries_peak != NO_PEAK:
            held = self._temporary + temporaries_peak
            if held > self.temporaries.get(path, 0):
                self.temporaries[path] = held
        self._temporary += temporaries
        if largest > self.largest.bytes:
            self.largest = Buffer(largest, op or "an op", path, phase)
        if peak != NO_PEAK:
            self._reached(self.live + peak, path, phase)
        self.live += change

    def _reached(self, live: int, path: str, phase: str) -> None:
        """Live bytes reached ``live`` for module ``path`` in ``phase``: the peaks it may raise."""
        if self._call_max and live > self._call_max[-1][1]:
            self._call_max[-1][1] = live
        if live > self.phase_peaks.get(phase, 0):
            self.phase_peaks[phase] = live
        live_now = live - self._start.released if self._start is not None else live
        if live_now > self.phase_peaks_live.get(phase, NO_PEAK):
            self.phase_peaks_live[phase] = live_now
        if phase == "backward" and live > self.peaks.get((path, phase), 0):  # no call stack in backward
            self.peaks[(path, phase)] = live

    def _freed(self, key, _ref=None) -> None:
        tracked = self._tracked.pop(key, None)
        if tracked is not None and self._active:
            self.freed(tracked[0])

    def freed(self, nbytes: int, temporary: bool = False) -> None:
        """``nbytes`` allocated while profiling were released (the native backend's reports
        may be charged after the span)."""
        if temporary:
            self._temporary -= nbytes
        else:
            self.live -= nbytes

    def freed_before(self, address: int, nbytes: int) -> None:
        """A block of ``nbytes`` allocated before the span was released (the native backend's
        allocator reports): counted where the live bytes at the start are the allocator's."""
        if self._start is not None and self._start.from_allocator:
            self._start.released += nbytes

    # -- optimizer steps (an optimizer-steps listener) -------------------------------------
    def step_begins(self, optimizer) -> None:
        self.grads_at_step = max(self.grads_at_step, self._gradient_bytes())

    # -- module calls (a tracker listener) -----------------------------------------------
    def call_begins(self, rec) -> None:
        self._call_max.append([rec, self.live])

    def call_ends(self, rec, args, kwargs, output) -> None:
        peak = None
        while self._call_max:  # calls abandoned by a caught exception end here too
            entry, peak = self._call_max.pop()
            if self._call_max and peak > self._call_max[-1][1]:
                self._call_max[-1][1] = peak
            if entry is rec:
                break
        if peak is not None and peak > self.peaks.get((rec.path, rec.phase), 0):
            self.peaks[(rec.path, rec.phase)] = peak


def _unpack(tensor):
    return tensor


_ALIASED: dict = {}  # op overload -> _aliased_returns


def _aliased_returns(func) -> tuple:
    """For each return of op overload ``func``, whether its schema says it aliases an input
    (``Tensor(a!)``: an in-place or ``out=`` op gives back storage it was given); () for a
    call counted whole (no schema: its outputs are taken as new).

    >>> _aliased_returns(torch.ops.aten.add_.Tensor), _aliased_returns(torch.ops.aten.add.Tensor)
    ((True,), (False,))
    """
    known = _ALIASED.get(func)
    if known is None:
        known = _ALIASED[func] = tuple(r.alias_info is not None for r in op_schema(func).returns) \
            if isinstance(func, OpOverload) else ()
    return known
