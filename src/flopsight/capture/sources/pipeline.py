"""Capture source: pipeline parallelism (``torch.distributed.pipelining``), seen from a stage.

A schedule's first step has each ``PipelineStage`` run its submodule on meta tensors to learn
the shapes it sends and receives (its metadata inference; from torch 2.13 a backward too,
and the shapes exchanged with its neighbours). That is not the stage's work: while any
capture runs, those methods run with every open session's ops, module calls and collectives
unrecorded (the backend's ``not_run_for_real``); their time stays in the step, as framework.
Each schedule ``step`` that runs a stage of the profiled model is noted
(:class:`PipelineRuns`): the schedule, its micro-batches, the stages this rank runs and how
many the pipeline has. The classes' own methods are put back when the last capture stops,
and by :func:`flopsight._process.reset`.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass
from typing import Any

from ..._process import PROCESS
from ..._torch_private import pipeline_methods, schedule_plan
from .routes import Routes

__all__ = ["PipelineRuns", "PipelineSteps", "PIPELINES"]


@dataclass(frozen=True)
class PipelineRuns:
    """The pipeline schedule this rank ran a stage of the model in: ``schedule`` (its class),
    ``micro_batches`` per step, ``stages`` (the indices of the stages this rank runs: one,
    or several for an interleaved schedule), ``num_stages`` (of the whole pipeline) and
    ``steps`` (how many steps ran while profiling).

    >>> PipelineRuns("Schedule1F1B", 4, (1,), 2, 1).ranks
    2
    """

    schedule: str
    micro_batches: int
    stages: tuple[int, ...]
    num_stages: int
    steps: int

    @property
    def ranks(self) -> int:
        """The pipeline-parallel size: its stages over the stages each rank runs."""
        return max(self.num_stages // max(len(self.stages), 1), 1)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stages"] = list(self.stages)
        return d


class PipelineSteps:
    """Notes the schedule steps that run the profiled model's stages (see the module docstring)."""

    def __init__(self, ctx):
        self._ctx = ctx
        #: the profiled model's modules (none: a profile of everything the span runs)
        self._modules = {id(info.module) for info in ctx.options.infos.values()}
        self._runs: PipelineRuns | None = None

    def start(self, ctx) -> None:
        PIPELINES.open(self)

    def stop(self, ctx) -> None:
        PIPELINES.close(self)

    def not_run_for_real(self) -> contextlib.AbstractContextManager:
        return self._ctx.backend.not_run_for_real()

    def step_begins(self, schedule) -> None:
        name, micro_batches, stages = schedule_plan(schedule)
        mine = tuple(s.stage_index for s in stages if not self._modules or id(s.submod) in self._modules)
        if not mine:
            return
        steps = self._runs.steps + 1 if self._runs is not None else 1
        self._runs = PipelineRuns(name, micro_batches, mine, int(stages[0].num_stages), steps)

    def collect(self, ctx) -> PipelineRuns | None:
        return self._runs


class PipelinePatches(Routes):
    """The process's patched pipeline methods and the sources open (see :class:`.Routes`)."""

    def install(self) -> None:
        inference, steps = pipeline_methods()
        for cls, name in inference:
            self.route(cls, name, self._inference)
        for cls, name in steps:
            self.route(cls, name, self._step)

    def _inference(self, own):
        def inference(stage, *args, **kwargs):
            with contextlib.ExitStack() as unrecorded:
                for source in list(self.sources):
                    unrecorded.enter_context(source.not_run_for_real())
                return own(stage, *args, **kwargs)

        return inference

    def _step(self, own):
        def step(schedule, *args, **kwargs):
            for source in list(self.sources):
                source.step_begins(schedule)
            return own(schedule, *args, **kwargs)

        return step


#: the process's patched pipeline methods
PIPELINES: PipelinePatches = PROCESS.own("pipelines", PipelinePatches)
