"""Capture source: every aten op, counted by its formula, through a TorchDispatchMode.

A dispatch mode sees each aten op after autograd and composite decompositions, which is
where ``@``, ``einsum``, ``F.linear`` and custom ops all become the same few kernels,
identically on CPU, CUDA and meta. It only observes: it calls the op unchanged and
returns its result.
"""

from __future__ import annotations

import torch

from .._torch_private import TorchDispatchMode, allow_under_mode, flex_attention_ops, prime_modes
from ..formulas.registry import ZERO
from ..stats import ZERO_STATS
from .attribution import Attribution
from .context import CaptureContext

__all__ = ["CountingSource"]

_NO_KWARGS: dict = {}  # shared, never written to


class _CountingMode(TorchDispatchMode):
    def __init__(self, ctx: CaptureContext, attribution: Attribution):
        super().__init__()
        # bound once: this runs for every op of the model
        self._ctx = ctx
        self._stamp, self._now = ctx.clock.stamp, ctx.clock.now
        self._overhead = ctx.overhead
        self._resolve = ctx.registry.resolve
        self._charge = attribution.charge
        # on a host clock the op's end stamp is also when the profiler's own work starts
        self._stamp_is_now = self._stamp is self._now

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        stamp = self._stamp
        t0 = stamp()
        out = func(*args, **kwargs) if kwargs else func(*args)
        t1 = stamp()
        ctx = self._ctx
        if not ctx.suppressed and not ctx.paused:
            h0 = t1 if self._stamp_is_now else self._now()
            entry = self._resolve(func)
            if entry.formula is ZERO:  # most ops (views, copies) cost nothing: skip the formula
                self._charge(entry, t0, t1, cost=ZERO_STATS)
            else:
                self._charge(entry, t0, t1, out, args, kwargs or _NO_KWARGS)
            self._overhead.seconds += self._now() - h0
        return out


class CountingSource:
    """Installs the counting dispatch mode between ``start`` and ``stop``."""

    def __init__(self, attribution: Attribution):
        self._attribution = attribution
        self._mode: _CountingMode | None = None

    def start(self, ctx: CaptureContext) -> None:
        prime_modes()
        for hop in flex_attention_ops():  # higher-order ops run their aten ops under the mode
            allow_under_mode(hop, _CountingMode)
        # Count eagerly: under a dispatch mode dynamo compiles nothing, and eager
        # flex_attention's torch.compile(fullgraph=True) raises for compiling nothing unless
        # the stance is not the default. Restored on stop.
        self._stance = torch.compiler.set_stance("force_eager")
        self._stance.__enter__()
        try:
            self._mode = _CountingMode(ctx, self._attribution)
            self._mode.__enter__()
        except BaseException:
            self._stance.__exit__(None, None, None)
            raise

    def stop(self, ctx: CaptureContext) -> None:
        mode, self._mode = self._mode, None
        try:
            if mode is not None:
                mode.__exit__(None, None, None)
        finally:
            self._stance.__exit__(None, None, None)
