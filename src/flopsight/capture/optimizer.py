"""Capture source: ``optimizer.step()`` is the ``step`` phase (torch's global step hooks).

Its ops are counted like any others (AdamW's per-element arithmetic...), its wall time is a
span. ``optimizer`` restricts this to one optimizer (default: any).
"""

from __future__ import annotations

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from .context import CaptureContext
from .functions import FunctionInterceptor
from .spans import SpanTimer

__all__ = ["OptimizerSteps"]


class OptimizerSteps:
    def __init__(self, spans: SpanTimer, optimizer: torch.optim.Optimizer | None = None,
                 functions: FunctionInterceptor | None = None):
        self._spans = spans
        self._optimizer = optimizer
        self._functions = functions  # paused during a step: no unit runs there
        self._depth = 0
        self._handles: list = []

    def start(self, ctx: CaptureContext) -> None:
        def begins(optimizer, args, kwargs) -> None:
            if (self._optimizer is None or optimizer is self._optimizer) and not ctx.paused:
                self._depth += 1
                if self._depth == 1:
                    ctx.phase = "step"
                    if self._functions is not None:
                        self._functions.pause()
                    self._spans.begin("step")

        def ends(optimizer, args, kwargs) -> None:
            if (self._optimizer is None or optimizer is self._optimizer) and self._depth:
                self._depth -= 1
                if self._depth == 0:
                    self._spans.end("step")
                    if self._functions is not None:
                        self._functions.resume()
                    ctx.phase = "forward"

        self._handles = [register_optimizer_step_pre_hook(begins), register_optimizer_step_post_hook(ends)]

    def stop(self, ctx: CaptureContext) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
