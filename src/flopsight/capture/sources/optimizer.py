"""Capture source: ``optimizer.step()`` is the ``step`` phase.

Its ops are counted like any others (AdamW's per-element arithmetic...), its wall time is a
span. ``optimizer`` restricts this to one optimizer (default: any torch optimizer, seen
through torch's global step hooks). An optimizer that is not a ``torch.optim.Optimizer``
but has a ``step()`` (DeepSpeed's ZeRO and mixed-precision wrappers, whose step reduces,
unscales and copies around the inner torch optimizer's) is timed around its own ``step``,
and its ``backward(loss)``, if it has one (loss scaling, ``loss.backward()``, gradient
reduction), is a backward span: while capturing, the object gets attributes of its own that
call the originals, removed again on stop.
"""

from __future__ import annotations

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from ..._wrap import wrap_method
from ..runtime.context import CaptureContext
from .functions import FunctionInterceptor
from .spans import SpanTimer

__all__ = ["OptimizerSteps", "check_optimizer"]


def check_optimizer(optimizer, arg: str = "optimizer"):
    """``optimizer`` if it is a torch optimizer or has a ``step()`` method (or is None)."""
    if optimizer is None or isinstance(optimizer, torch.optim.Optimizer) or callable(getattr(optimizer, "step", None)):
        return optimizer
    raise TypeError(
        f"{arg}: expected a torch.optim.Optimizer, an object with a step() method (a DeepSpeed ZeRO "
        f"optimizer) or None, got {type(optimizer).__name__}"
    )


class OptimizerSteps:
    """Capture source: ``optimizer.step()`` calls, as the span timer's step spans (and the
    step phase); the sources subscribed to ``ctx.events.steps`` hear when each begins."""

    def __init__(self, ctx: CaptureContext):
        self._optimizer = ctx.options.optimizer
        self._depth = 0
        self._removers: list = []

    def start(self, ctx: CaptureContext) -> None:
        spans = ctx.get(SpanTimer)
        if spans is None:  # (every plan has one: the steps are its spans)
            raise RuntimeError("optimizer: the session has no span timer to time the steps with")
        # paused during a step: no unit runs there (None in a session that counts nothing)
        functions = ctx.get(FunctionInterceptor)
        listeners = ctx.events.steps
        stepping = False  # the step's span is open (not while its closure runs)

        def enter(optimizer) -> None:
            nonlocal stepping
            stepping = True
            for listener in listeners:  # what stands when the step begins (gradients)
                listener.step_begins(optimizer)
            if functions is not None:
                functions.pause()
            spans.begin_step()

        def leave() -> None:
            nonlocal stepping
            if stepping:
                stepping = False
                spans.end_step()
                if functions is not None:
                    functions.resume()

        def outside_step(optimizer, closure):
            """``closure`` run as what it is: ``step(closure)`` (Lightning's automatic
            optimization, LBFGS) calls it from inside the step to run the forward and the
            backward, which are theirs, not the step's. The step's span begins after it."""
            def run(*args, **kwargs):
                if self._depth != 1:  # called outside the step, or from a nested one
                    return closure(*args, **kwargs)
                leave()  # LBFGS calls it again, mid-step
                try:
                    return closure(*args, **kwargs)
                finally:
                    enter(optimizer)

            return run

        def begins(optimizer, args, kwargs, bound: bool = False):
            if self._optimizer is None or optimizer is self._optimizer:
                self._depth += 1
                if self._depth == 1:
                    # torch's hooks see step()'s self among args; a wrapper's bound step does not
                    changed = _with_closure(args, kwargs, 0 if bound else 1, lambda c: outside_step(optimizer, c))
                    if changed is None:
                        enter(optimizer)
                    return changed
            return None

        def ends(optimizer, args, kwargs) -> None:
            if (self._optimizer is None or optimizer is self._optimizer) and self._depth:
                self._depth -= 1
                if self._depth == 0:
                    leave()

        if self._optimizer is None or isinstance(self._optimizer, torch.optim.Optimizer):
            self._removers = [register_optimizer_step_pre_hook(begins).remove,
                              register_optimizer_step_post_hook(ends).remove]
        else:  # a wrapper: its own step is the step, the inner optimizer's hooks never match it
            wrapper = self._optimizer
            # a DeepSpeed engine's step() before the gradient-accumulation boundary only counts
            # the micro-step: the update, the step, is the one at the boundary
            boundary = getattr(wrapper, "is_gradient_accumulation_boundary", None)

            def step(call, args, kwargs):
                if callable(boundary) and not boundary():
                    return call(*args, **kwargs)
                args, kwargs = begins(wrapper, args, kwargs, bound=True) or (args, kwargs)
                try:
                    return call(*args, **kwargs)
                finally:
                    ends(wrapper, args, kwargs)

            self._removers = [wrap_method(wrapper, "step", step)]
            if callable(getattr(wrapper, "backward", None)):
                # its backward(loss) (scaling, loss.backward(), gradient reduction) is the backward
                self._removers.append(wrap_method(wrapper, "backward", spans.run_backward))

    def stop(self, ctx: CaptureContext) -> None:
        for remove in self._removers:
            remove()
        self._removers.clear()


def _with_closure(args: tuple, kwargs: dict, first: int, wrap) -> tuple[tuple, dict] | None:
    """``step()``'s arguments with its closure (``closure=`` or the positional argument
    ``args[first]``) wrapped by ``wrap``; None when it has none."""
    if callable(kwargs.get("closure")):
        return args, {**kwargs, "closure": wrap(kwargs["closure"])}
    if len(args) > first and callable(args[first]):
        return (*args[:first], wrap(args[first]), *args[first + 1:]), kwargs
    return None
