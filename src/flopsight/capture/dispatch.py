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

from torch.overrides import TorchFunctionMode

from .._compat import TorchDispatchMode

__all__ = ["CountingMode", "UnitMode", "UnsupportedOpWarning"]


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


class CountingMode(TorchDispatchMode):
    """Records each aten op's cost against the session's current module and phase."""

    def __init__(self, session):
        super().__init__()
        self.session = session
        # bound once: this runs for every op of the model
        self._stamp, self._now, self._record = session.clock.stamp, session.clock.now, session.record_op

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        stamp = self._stamp
        t0 = stamp()
        out = func(*args, **kwargs) if kwargs else func(*args)
        t1 = stamp()
        session = self.session
        if not session.unit_depth:
            now = self._now
            h0 = now()
            self._record(func, out, args, kwargs or _NO_KWARGS, t0, t1)
            session.overhead += now() - h0
        return out


class UnitMode(TorchFunctionMode):
    """Counts registered unit functions as a whole and passes everything else through."""

    def __init__(self, session):
        super().__init__()
        self.session = session
        self._unit = session.registry.unit

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = _NO_KWARGS
        session = self.session
        unit = self._unit(func)
        if unit is None or session.unit_depth:
            return func(*args, **kwargs)
        stamp = session.clock.stamp
        session.unit_depth += 1
        try:
            t0 = stamp()
            out = func(*args, **kwargs)
            t1 = stamp()
        finally:
            session.unit_depth -= 1
        h0 = session.clock.now()
        session.record_unit(unit, out, args, kwargs, t0, t1)
        session.overhead += session.clock.now() - h0
        return out


_NO_KWARGS: dict = {}  # shared, never written to
