"""Which capture sources run, in one table: :data:`PLAN`, filtered by :func:`plan`.

Each :class:`Row` names a source, how to make it from the session's context, and when it
runs. Sources are made in the table's order (each subscribes to ``ctx.events`` in its
constructor), started in that order and stopped in the reverse one. The backend (the hot
path: ops, module calls, phase changes; :mod:`.backends`) is chosen once, made after every
other source has subscribed (what they need decides which backend can serve them); the span
timer is last (the iteration span is the user's code, not the profiler's setup). Adding a
measurement is one new file in ``capture/sources/`` and one row here.

>>> from flopsight.capture.context import CaptureContext
>>> from flopsight.capture.timing import HostClock
>>> from flopsight.formulas import REGISTRY
>>> timing_pass = CaptureOptions(infos={}, count=False)
>>> [row.name for row in plan(timing_pass, CaptureContext.create(HostClock(), REGISTRY))]
['optimizer', 'backend', 'spans']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from .backends import choose
from .options import CaptureOptions
from .sources.autograd_functions import AutogradFunctions
from .sources.collectives import CollectivesSource
from .sources.device_usage import DeviceUsageSource
from .sources.functions import FunctionInterceptor
from .sources.kernels import KernelTrace
from .sources.memory import MemorySource
from .sources.module_rules import ModuleRules
from .sources.optimizer import OptimizerSteps
from .sources.spans import SpanTimer
from .sources.units import UnitSource
from .timing import CudaEventClock

__all__ = ["CaptureOptions", "Row", "PLAN", "plan"]


@dataclass(frozen=True)
class Row:
    """A source of the plan: ``make(ctx)`` builds it when ``when(options, ctx)`` holds."""

    name: str
    make: Callable[[Any], Any]
    when: Callable[[CaptureOptions, Any], bool] = lambda options, ctx: True
    #: made after every other row (it reads what they subscribed to), started in its place
    made_last: bool = False


def _counting(options: CaptureOptions, ctx) -> bool:
    return options.count


def backend(ctx):
    """The session's backend (:func:`.backends.choose`), made the context's."""
    ctx.backend = choose(ctx)
    return ctx.backend


def _gpu(ctx) -> DeviceUsageSource:
    """The GPU a CUDA clock times: its utilisation through NVML, the allocator's peak."""
    return DeviceUsageSource(ctx.clock.device or torch.device("cuda"))


PLAN: tuple[Row, ...] = (
    Row("optimizer", OptimizerSteps),
    # listening to every module call costs: only when some module class has a rule
    Row("module rules", ModuleRules, lambda o, ctx: o.count and ctx.registry.has_module_rules()),
    Row("memory", MemorySource, lambda o, ctx: o.count and o.memory),
    Row("units", UnitSource, _counting),
    Row("autograd functions", AutogradFunctions, _counting),
    Row("collectives", CollectivesSource, _counting),
    Row("functions", FunctionInterceptor, _counting),
    # made after every source that watches ops or calls (what they need decides the backend),
    # started after the modes of the sources that route torch functions
    Row("backend", backend, made_last=True),
    Row("device usage", _gpu, lambda o, ctx: isinstance(ctx.clock, CudaEventClock)),
    # started after the other sources, so their setup is not in its trace
    Row("kernels", KernelTrace, lambda o, ctx: o.kernels),
    Row("spans", SpanTimer),
)


def plan(options: CaptureOptions, ctx=None, table: tuple[Row, ...] = PLAN) -> list[Row]:
    """The rows of ``table`` that run for ``options`` (``ctx``: the session's context, for
    the rows that depend on its clock or registry)."""
    return [row for row in table if row.when(options, ctx)]
