"""Capture source: wall-clock spans of the iteration (start to stop) and backward passes.

Backward passes are timed around ``Tensor.backward`` / ``torch.autograd.backward`` /
``torch.autograd.grad`` (seen through the function interceptor); nested calls belong to the
outer one. A span's seconds leave out the profiler's own overhead inside it, where the
clock allows (host clocks).
"""

from __future__ import annotations

import torch

from .context import CaptureContext
from .functions import FunctionInterceptor

__all__ = ["SpanTimer", "BACKWARD_ENTRY_POINTS"]

#: Where a backward pass starts from Python: timed as a whole, and checked for a loss that
#: cannot be differentiated.
BACKWARD_ENTRY_POINTS = (torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad)


class SpanTimer:
    """Records ``(kind, start stamp, end stamp, overhead at start, overhead at end)``."""

    def __init__(self, functions: FunctionInterceptor | None = None):
        self.spans: list[tuple] = []
        self._open: dict[str, tuple] = {}  # kind -> (start stamp, overhead) of a span in progress
        self._ctx: CaptureContext | None = None
        if functions is not None:
            for function in BACKWARD_ENTRY_POINTS:
                functions.handlers[function] = self.run_backward

    def start(self, ctx: CaptureContext) -> None:
        # started last (after every other source is installed) so the span is the user's code
        self._ctx = ctx
        self.begin("iteration")

    def stop(self, ctx: CaptureContext) -> None:
        # a span still open ends here: profiling stopped inside an optimizer step (DeepSpeed's
        # engine prints its profile from inside engine.step())
        for kind in [k for k in self._open if k != "iteration"]:
            self.end(kind)
        self.end("iteration")

    def begin(self, kind: str) -> None:
        self._open[kind] = (self._ctx.clock.stamp(), self._ctx.overhead.seconds)

    def opened(self, kind: str) -> tuple | None:
        """(start stamp, overhead then) of the ``kind`` span in progress, or None."""
        return self._open.get(kind)

    def end(self, kind: str) -> None:
        opened = self._open.pop(kind, None)
        if kind in ("backward", "step"):
            self._ctx.last_phase = kind
        if opened is not None:
            self.spans.append((kind, opened[0], self._ctx.clock.stamp(), opened[1], self._ctx.overhead.seconds))

    def run_backward(self, func, args, kwargs):
        """Run a backward entry point (``func(*args, **kwargs)``, its first argument the loss)
        as a backward span. While it runs, what runs outside the autograd nodes (a wrapper's
        gradient reduction after ``loss.backward()``) is the backward phase's."""
        ctx = self._ctx
        if "backward" in self._open or ctx.paused:
            return func(*args, **kwargs)
        outputs = args[0] if args else kwargs.get("tensors", kwargs.get("outputs", kwargs.get("loss")))
        outputs = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs or ())
        if outputs and not any(t.requires_grad for t in outputs if isinstance(t, torch.Tensor)):
            raise RuntimeError(
                "flopsight: backward() on a tensor that does not require grad: its forward ran without "
                "autograd (under torch.no_grad() or torch.inference_mode(), or with every parameter frozen), "
                "so there is no backward pass to measure"
            )
        phase, ctx.phase = ctx.phase, "backward"
        self.begin("backward")
        try:
            return func(*args, **kwargs)
        finally:
            self.end("backward")
            ctx.phase = phase
