"""Counting modes: every aten op, and a few torch functions counted as units.

:class:`CountingMode` is a TorchDispatchMode: it sees each aten op after autograd and
composite decompositions, which is where ``@``, ``einsum``, ``F.linear`` and custom ops
all become the same few kernels, identically on CPU, CUDA and meta.

:class:`UnitMode` is a TorchFunctionMode that intercepts the handful of functions whose
aten decomposition depends on the device or on the kernel picked (attention, RNNs,
dropout, rms_norm). Each is counted once from its arguments; while it runs, the
dispatch mode does not count the ops underneath.

Both only observe: they call the op unchanged and return its result.
"""

from __future__ import annotations

import warnings

import torch
from torch.overrides import TorchFunctionMode

from .._compat import TorchDispatchMode, autograd_sequence_nr

__all__ = ["CountingMode", "UnitMode", "UnsupportedOpWarning", "UnprofiledForwardWarning"]


class UnsupportedOpWarning(UserWarning):
    """An operator ran that no formula counts; it is listed in ``result.unsupported_ops``."""


def warn_unsupported(name: str) -> None:
    # The message names the op, so Python's default filter shows it once per op.
    warnings.warn(
        f"flopsight: no formula for operator {name!r}; its cost is not counted and it is "
        "listed in result.unsupported_ops. Register one with flopsight.register_formula "
        "or mark it with flopsight.mark_zero_cost.",
        UnsupportedOpWarning,
        stacklevel=3,
    )


def warn_formula_failed(name: str, error: Exception) -> None:
    warnings.warn(
        f"flopsight: the formula for {name!r} failed ({error!r}); its cost is not counted and it is "
        "listed in result.unsupported_ops",
        UnsupportedOpWarning,
        stacklevel=3,
    )


class UnprofiledForwardWarning(UserWarning):
    """A backward pass ran through a graph whose forward was not profiled."""


def warn_unprofiled_forward() -> None:
    warnings.warn(
        "flopsight: the backward pass runs through autograd nodes created before profiling started (their "
        "forward was not profiled), so they cannot be attributed to modules and their cost goes to the root. "
        "Start profiling before the forward pass.",
        UnprofiledForwardWarning,
        stacklevel=3,
    )


class CountingMode(TorchDispatchMode):
    """Records each aten op's cost against the session's current module and phase."""

    def __init__(self, session):
        super().__init__()
        self.session = session
        # bound once: this runs for every op of the model
        self._stamp, self._now, self._record = session.clock.stamp, session.clock.now, session.record_op
        # on a host clock the op's end stamp is also when the profiler's own work starts
        self._stamp_is_now = self._stamp is self._now

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        stamp = self._stamp
        t0 = stamp()
        out = func(*args, **kwargs) if kwargs else func(*args)
        t1 = stamp()
        session = self.session
        if not session.unit_depth:
            now = self._now
            h0 = t1 if self._stamp_is_now else now()
            self._record(func, out, args, kwargs or _NO_KWARGS, t0, t1)
            session.overhead += now() - h0
        return out


class UnitMode(TorchFunctionMode):
    """Counts registered unit functions as a whole and passes everything else through."""

    def __init__(self, session):
        super().__init__()
        self.session = session
        # the functions this mode acts on, in one table: it is looked up for every torch call
        self._special = {**session.registry.units(), **dict.fromkeys(BACKWARD_ENTRY_POINTS, _BACKWARD)}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = _NO_KWARGS
        try:
            unit = self._special.get(func)
        except TypeError:  # an unhashable callable is neither a unit nor a backward
            unit = None
        if unit is None:
            return func(*args, **kwargs)
        session = self.session
        if unit is _BACKWARD:
            return session.run_backward(func, args, kwargs)
        if session.unit_depth:
            return func(*args, **kwargs)
        stamp = session.clock.stamp
        session.unit_depth += 1
        try:
            seq_start = autograd_sequence_nr()
            t0 = stamp()
            out = func(*args, **kwargs)
            t1 = stamp()
            seq_end = autograd_sequence_nr()  # the unit's autograd nodes are numbered in between
        finally:
            session.unit_depth -= 1
        h0 = session.clock.now()
        session.record_unit(unit, out, args, kwargs, t0, t1, seq_start, seq_end)
        session.overhead += session.clock.now() - h0
        return out


_NO_KWARGS: dict = {}  # shared, never written to

#: Where a backward pass starts from Python: timed as a whole, and checked for a loss that
#: cannot be differentiated.
BACKWARD_ENTRY_POINTS = frozenset({torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad})
_BACKWARD = object()
