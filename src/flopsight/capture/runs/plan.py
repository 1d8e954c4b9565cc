"""Which capture sources run, in one table: :data:`PLAN`, filtered by :func:`plan`.

Each :class:`Row` names a source, how to make it from the session's context, when it runs,
and what it needs of the backend (:data:`NEEDS`). The plan picks the rows for the options,
then the backend (the hot path: ops, module calls, phase changes; :mod:`.backends`) from
their needs and the options, before any source is made: each source is then made knowing the
backend (and subscribes to ``ctx.events`` in its constructor). Sources are started in the
table's order and stopped in the reverse one; the backend starts at its row; the span timer is
last (the iteration span is the user's code, not the profiler's setup). Adding a measurement
is one new file in ``capture/sources/`` and one row here.

>>> from flopsight.capture.runtime.context import CaptureContext
>>> from flopsight.capture.runtime.timing import HostClock
>>> from flopsight.formulas import REGISTRY
>>> timing_pass = CaptureOptions(infos={}, count=False)
>>> [row.name for row in plan(timing_pass, CaptureContext.create(HostClock(), REGISTRY))]
['optimizer', 'pipeline', 'backend', 'spans']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..._torch_private import dtensor_class
from ..backends import choose
from ..runtime.options import CaptureOptions
from ..runtime.timing import CudaEventClock
from ..sources.autograd_functions import AutogradFunctions
from ..sources.collectives import CollectivesSource
from ..sources.device_usage import DeviceUsageSource
from ..sources.functions import FunctionInterceptor
from ..sources.kernels import KernelTrace
from ..sources.memory import MemorySource
from ..sources.module_rules import ModuleRules
from ..sources.optimizer import OptimizerSteps
from ..sources.pipeline import PipelineSteps
from ..sources.redistributions import Redistributions
from ..sources.spans import SpanTimer
from ..sources.units import UnitSource

__all__ = ["CaptureOptions", "Row", "PLAN", "NEEDS", "plan", "needs_of", "plan_sources"]


#: what a source may need of the backend: "ops", each op with its tensors as it runs, on
#: ``ctx.events.ops`` (the Python backend's dispatch mode); "calls", each module call as it
#: happens, with its arguments and output (Python hooks then track them); "memory", the blocks
#: of memory the model's ops allocate and release (the allocators' reports, else each op's
#: outputs in Python)
NEEDS = frozenset({"ops", "calls", "memory"})


@dataclass(frozen=True)
class Row:
    """A source of the plan: ``make(ctx)`` builds it when ``when(options, ctx)`` holds;
    ``needs``: what it needs of the backend (:data:`NEEDS`)."""

    name: str
    make: Callable[[Any], Any]
    when: Callable[[CaptureOptions, Any], bool] = lambda options, ctx: True
    needs: frozenset = frozenset()

    def __post_init__(self) -> None:
        unknown = set(self.needs) - NEEDS
        if unknown:
            raise ValueError(f"needs: {sorted(unknown)} are not among {sorted(NEEDS)}")


def _counting(options: CaptureOptions, ctx) -> bool:
    return options.count


def backend(ctx):
    """The session's backend, chosen by :func:`plan_sources` before any source was made."""
    return ctx.backend


def _gpu(ctx) -> DeviceUsageSource:
    """The GPU a CUDA clock times: its utilisation through NVML, the allocator's peak."""
    return DeviceUsageSource(ctx.clock.device or torch.device("cuda"))


PLAN: tuple[Row, ...] = (
    Row("optimizer", OptimizerSteps),
    # listening to every module call costs: only when some module class has a rule
    Row("module rules", ModuleRules, lambda o, ctx: o.count and ctx.registry.has_module_rules(),
        needs=frozenset({"calls"})),
    Row("memory", MemorySource, lambda o, ctx: o.count and o.memory, needs=frozenset({"memory"})),
    Row("units", UnitSource, _counting),
    Row("autograd functions", AutogradFunctions, _counting),
    Row("collectives", CollectivesSource, _counting),
    Row("functions", FunctionInterceptor, _counting),
    Row("pipeline", PipelineSteps),
    # DTensor's changes of placement, once it is imported (a model can hold DTensors only then)
    Row("redistributions", Redistributions, lambda o, ctx: o.count and dtensor_class() is not None),
    # started after the modes of the sources that route torch functions
    Row("backend", backend),
    Row("device usage", _gpu, lambda o, ctx: isinstance(ctx.clock, CudaEventClock)),
    # started after the other sources, so their setup is not in its trace
    Row("kernels", KernelTrace, lambda o, ctx: o.kernels, needs=frozenset({"calls"})),
    Row("spans", SpanTimer),
)


def plan(options: CaptureOptions, ctx=None, table: tuple[Row, ...] = PLAN) -> list[Row]:
    """The rows of ``table`` that run for ``options`` (``ctx``: the session's context, for
    the rows that depend on its clock or registry)."""
    return [row for row in table if row.when(options, ctx)]


def needs_of(rows: list[Row]) -> frozenset:
    """What the backend must give the sources of ``rows``."""
    return frozenset().union(*(row.needs for row in rows))


def plan_sources(options: CaptureOptions, ctx, table: tuple[Row, ...] = PLAN) -> list:
    """The sources of one session, in the table's order: the rows for ``options``, the
    backend chosen from their needs (:func:`.backends.choose`, made the context's), then each
    source made knowing it."""
    rows = plan(options, ctx, table)
    ctx.backend = choose(ctx, needs_of(rows))
    return [row.make(ctx) for row in rows]
