"""Capture source: memory, counted from the tensors' storages (CPU, CUDA and meta alike).

* **Activations**: every tensor autograd saves for backward passes through a
  ``saved_tensors_hooks`` pack hook; its storage's bytes (once per storage, parameters left
  out) are charged to the module whose forward saved it.
* **Live bytes and peaks**: the counting mode hands over each op's outputs; a storage seen
  for the first time adds its bytes, and a weak reference to its Python object, which torch
  keeps alive exactly as long as the storage, takes them off when it is freed. The peak of each
  module call (the most bytes live while it ran, above what was live when profiling began)
  is a running maximum kept per call and passed up to the caller when the call ends; the
  span's peak is kept per phase.

Parameters, gradients and optimizer state are read off the model and the optimizer when the
capture stops (see :class:`MemoryTotals` in :mod:`flopsight.result.memory`).
"""

from __future__ import annotations

import weakref
from functools import partial

import torch

from .._torch_private import storage_key
from .context import CaptureContext

__all__ = ["MemorySource", "tensor_bytes"]


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


class MemorySource:
    """Tracks saved activations per module and live bytes per module call and phase."""

    def __init__(self, tracker, param_keys: set, gradient_bytes=lambda: 0) -> None:
        self._tracker = tracker
        self._gradient_bytes = gradient_bytes  # bytes of the gradients held now
        self.grads_at_step = 0  # the most gradient bytes held when a step began
        self._params = param_keys  # storage keys of the model's parameters: not activations
        self.activations: dict[str, int] = {}  # module path -> bytes its forward saved
        self.peaks: dict[tuple[str, str], int] = {}  # (path, phase) -> peak bytes over its calls
        self.phase_peaks: dict[str, int] = {}
        self.live = 0
        self._saved: set = set()
        #: storage key -> (bytes, weak reference calling back when it is freed) of the
        #: storages allocated while profiling and alive
        self._tracked: dict = {}
        self._call_max: list[list] = []  # [call record, running max] of the calls on the stack
        self._ctx: CaptureContext | None = None
        self._hooks = None
        self._active = False

    # -- lifecycle ----------------------------------------------------------------------
    def start(self, ctx: CaptureContext) -> None:
        self._ctx = ctx
        self._active = True
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)
        self._hooks.__enter__()

    def stop(self, ctx: CaptureContext) -> None:
        self._active = False
        self._tracked.clear()  # drops the weak references: storages still alive go unwatched
        hooks, self._hooks = self._hooks, None
        if hooks is not None:
            hooks.__exit__(None, None, None)

    # -- saved for backward -------------------------------------------------------------
    def _pack(self, tensor):
        ctx = self._ctx
        if ctx.stack and not ctx.paused and isinstance(tensor, torch.Tensor):
            key = storage_key(tensor)
            if key is not None and key not in self._saved and key not in self._params:
                self._saved.add(key)
                path = ctx.stack[-1].path
                self.activations[path] = self.activations.get(path, 0) + tensor.untyped_storage().nbytes()
        return tensor

    # -- live bytes -----------------------------------------------------------------------
    def outputs(self, out, path: str, phase: str) -> None:
        """An op charged to ``path`` and ``phase`` returned ``out`` (a tensor, or a tuple or
        list of them)."""
        if isinstance(out, torch.Tensor):
            self._allocated(out, path, phase)
        elif isinstance(out, (tuple, list)):
            for t in out:
                if isinstance(t, torch.Tensor):
                    self._allocated(t, path, phase)

    def _allocated(self, t: torch.Tensor, path: str, phase: str) -> None:
        if t._base is not None:  # a view: its storage is its base's, seen (or not ours) already
            return
        key = storage_key(t)
        if key is None or key in self._tracked or key in self._params:
            return
        storage = t.untyped_storage()
        nbytes = storage.nbytes()
        self._tracked[key] = (nbytes, weakref.ref(storage, partial(self._freed, key)))
        self.live += nbytes
        live = self.live
        if self._call_max and live > self._call_max[-1][1]:
            self._call_max[-1][1] = live
        if live > self.phase_peaks.get(phase, 0):
            self.phase_peaks[phase] = live
        if phase == "backward" and live > self.peaks.get((path, phase), 0):  # no call stack in backward
            self.peaks[(path, phase)] = live

    def _freed(self, key, _ref=None) -> None:
        tracked = self._tracked.pop(key, None)
        if tracked is not None and self._active:
            self.live -= tracked[0]

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
