"""Capture source: wall-clock spans of the iteration (start to stop), backward passes and
optimizer steps, and the phase they put the capture in.

The span timer is the one writer of the current phase (``ctx.phase``) and of the phase that
came last (``ctx.last_phase``): spans are where phases begin and end. A backward span
opens when the autograd engine reaches the first node of a top-level forward's outputs (a
pre-hook on their ``grad_fn``, registered when that forward returns) and closes when the
engine finishes that backward pass (a callback queued on the engine, run after the callbacks
queued before it: a wrapper's gradient reduction). This covers ``Tensor.backward``,
``torch.autograd.backward`` and ``torch.autograd.grad`` alike, with no function mode; a
wrapper's own ``backward(loss)`` (DeepSpeed's engine) is timed around the call
(:meth:`SpanTimer.run_backward`). Nested backward passes belong to the outer one. Steps are
opened and closed by the optimizer hooks (:mod:`.optimizer`). A span's seconds leave out the
profiler's own overhead inside it, where the clock allows (host clocks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from ..._torch_private import queue_engine_callback
from ...formulas.shapes import nested_tensors
from ..charging.notices import warn_backward_elsewhere
from ..runtime.context import CaptureContext

__all__ = ["SpanTimer", "SpanTimes", "SpanStamps", "TimedSpan"]


class SpanStamps(NamedTuple):
    """One span: its kind, its start and end stamps, the profiler's own seconds at each."""

    kind: str
    start: Any
    end: Any
    ovh_start: float
    ovh_end: float


class TimedSpan(NamedTuple):
    stamps: SpanStamps
    seconds: float  # its wall seconds, the profiler's own left out where the clock allows


@dataclass
class SpanTimes:
    """The span timer's part of a raw capture: each span (:class:`TimedSpan`) in the order they
    ended, and ``origin``, (stamp, overhead) where the iteration began (None before it began);
    ``subtracted``: the clock took the profiler's own measured time out of the seconds (a
    host's clock), else it is left in them (a device's)."""

    timed: list[TimedSpan] = field(default_factory=list)
    origin: tuple | None = None
    subtracted: bool = True

    def seconds(self) -> dict[str, list[float]]:
        """Kind -> the seconds of each span of that kind, kinds in the order one first ended."""
        out: dict[str, list[float]] = {}
        for (kind, *_), seconds in self.timed:
            out.setdefault(kind, []).append(seconds)
        return out


class SpanTimer:
    """Records each span's :class:`SpanStamps`."""

    def __init__(self, ctx: CaptureContext):
        self._ctx = ctx
        self.spans: list[SpanStamps] = []
        self._open: dict[str, tuple] = {}  # kind -> (start stamp, overhead) of a span in progress
        self._outer_phase: list[str] = []  # the phase each open backward or step span interrupted
        self._gradless: list = []  # parameters without a gradient when the span began
        self._gained = False  # whether one of them had one when it ended
        self._node_hooks: list = []  # the pre-hooks on the top-level forwards' output nodes
        ctx.events.forwards.append(self)

    def start(self, ctx: CaptureContext) -> None:
        # parameters without a gradient: one that gains one with no backward span here was
        # given it by a backward pass on another thread, which nothing counts
        if ctx.options.count and ctx.params is not None and torch.is_grad_enabled():
            self._gradless = [p for p in ctx.params.tensors if p.requires_grad and p.grad is None]
        # started last (after every other source is installed) so the span is the user's code
        self.begin("iteration")

    def stop(self, ctx: CaptureContext) -> None:
        # a span still open ends here: profiling stopped inside an optimizer step (DeepSpeed's
        # engine prints its profile from inside engine.step())
        self._close_backward()
        if "step" in self._open:
            self.end_step()
        self.end("iteration")
        for hook in self._node_hooks:
            hook.remove()
        self._node_hooks.clear()
        gradless, self._gradless = self._gradless, []
        self._gained = any(p.grad is not None for p in gradless)

    def collect(self, ctx: CaptureContext) -> SpanTimes:
        # counted (once charged: the backend's part is collected first): the backward span opens
        # on whichever thread runs it, the counting follows
        if self._gained and not any(phase == "backward" for _, phase in ctx.tally.ops):
            self._gained = False
            warn_backward_elsewhere()
        origin = next(((start, overhead) for kind, start, _, overhead, _ in self.spans if kind == "iteration"),
                      self._open.get("iteration"))
        return SpanTimes([TimedSpan(s, ctx.span_seconds(*s[1:])) for s in self.spans], origin,
                         ctx.clock.subtracts_overhead)

    # -- spans ---------------------------------------------------------------------------
    def begin(self, kind: str) -> None:
        self._open[kind] = (self._ctx.clock.stamp(), self._ctx.overhead.seconds)

    def end(self, kind: str) -> None:
        end, overhead = self._ctx.boundary()  # what ran so far ran inside the span
        opened = self._open.pop(kind, None)
        if kind in ("backward", "step"):
            self._ctx.last_phase = kind
        if opened is not None:
            self.spans.append(SpanStamps(kind, opened[0], end, opened[1], overhead))

    # -- phases ----------------------------------------------------------------------------
    def forward_begins(self, record) -> None:
        """A top-level forward call begins (from the call tracker)."""
        self._close_backward()  # a backward pass that raised never ran its engine callbacks
        self._ctx.last_phase = "forward"

    def forward_ends(self, record, output) -> None:
        """A top-level forward call returned ``output``: the backward pass of its tensors opens
        the backward span (a pre-hook on each one's ``grad_fn``). A timing pass times the
        forward calls only."""
        if not self._ctx.options.count or not torch.is_grad_enabled():
            return
        hooked = set()
        for tensor in nested_tensors(output):
            node = tensor.grad_fn
            if node is not None and id(node) not in hooked:
                hooked.add(id(node))
                self._node_hooks.append(node.register_prehook(self._backward_reached))

    def _backward_reached(self, grad_outputs):
        """The engine runs the first node of a profiled forward's outputs (on its thread)."""
        if "backward" in self._open:
            return None
        self._enter("backward")
        self.begin("backward")
        queue_engine_callback(self._backward_finishing)
        return None

    def _backward_finishing(self) -> None:
        # queued when the pass began: callbacks queued since (DDP's gradient reduction, FSDP's
        # post-backward) run after this one, and belong to the pass: end after them
        queue_engine_callback(self._close_backward)

    def _close_backward(self) -> None:
        if "backward" in self._open:
            self.end("backward")
            self._leave()

    def begin_step(self) -> None:
        """``optimizer.step()`` begins: the step phase and its span."""
        self._enter("step")
        self.begin("step")

    def end_step(self) -> None:
        self.end("step")
        self._leave()

    def _enter(self, phase: str) -> None:  # always before begin(): what ran so far ran before the span
        self._outer_phase.append(self._ctx.change_phase(phase))
        for listener in self._ctx.events.phases:
            listener.phase_begins(phase)

    def _leave(self) -> None:  # always after end()
        for listener in self._ctx.events.phases:
            listener.phase_ends(self._ctx.phase)
        self._ctx.change_phase(self._outer_phase.pop() if self._outer_phase else "forward")

    def run_backward(self, func, args, kwargs):
        """Run a wrapper's ``backward(loss)`` (``func(*args, **kwargs)``) as a backward span:
        while it runs, what runs outside the autograd nodes (its gradient reduction after
        ``loss.backward()``) is the backward phase's."""
        if "backward" in self._open:
            return func(*args, **kwargs)
        outputs = args[0] if args else kwargs.get("loss")  # a wrapper's backward(loss)
        outputs = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs or ())
        if outputs and not any(t.requires_grad for t in outputs if isinstance(t, torch.Tensor)):
            raise RuntimeError(
                "flopsight: backward() on a tensor that does not require grad: its forward ran without "
                "autograd (under torch.no_grad() or torch.inference_mode(), or with every parameter frozen), "
                "so there is no backward pass to measure"
            )
        self._enter("backward")
        self.begin("backward")
        try:
            return func(*args, **kwargs)
        finally:
            self.end("backward")
            self._leave()
