"""The engine's step before the profiled one, timed at its phases' boundaries only: the
latencies the engine drop-in reports.

A counted step carries the profiler's own cost, on every rank: its host time per op and per
module call (on a launch-bound GPU, the device's idle time), and a rank waiting in a
collective for another rank's profiler. No subtraction takes all of that out, and on a
device's clock none can. So the step before the profiled one is timed with two stamps per
phase (the engine's forward calls, its ``backward`` calls, its ``step()`` at the
gradient-accumulation boundary, and the whole from the first forward's start to that step's
end) and nothing else: no hook inside the model, nothing counted. Its figures become the
result's ``timed.<kind>`` spans (:data:`~flopsight.result.iteration.TIMED`), which
``result.iteration`` reports; the counts, the module times and the step anatomy stay the
counted step's (docs/distributed.md).

>>> import torch
>>> from flopsight.capture.runtime.timing import FakeClock
>>> class Engine(torch.nn.Linear):  # what a DeepSpeed engine offers here
...     def backward(self, loss): loss.backward()
...     def step(self): pass
...     def is_gradient_accumulation_boundary(self): return True
>>> from flopsight._wrap import wrap_method
>>> engine = Engine(2, 2)
>>> timed = TimedStep(engine, FakeClock(step=1.0))
>>> unwrap = wrap_method(engine, "backward", timed.backward)  # its owner's, before the step
>>> # the idiom that looks ``backward`` up before the forward (in its arguments) begins the step
>>> def train_step(): engine.backward(_begun(timed) or engine(torch.ones(1, 2)).sum()); engine.step()
>>> def _begun(t): t.begin()            # from the engine's forward pre-hook
>>> train_step()
>>> timed.done, timed.spans()           # a tick per stamp: 6 stamps, 2 per phase
(True, {'timed.forward': [1.0], 'timed.backward': [1.0], 'timed.step': [1.0], 'timed.iteration': [5.0]})
>>> "step" in vars(engine), len(engine._forward_hooks)   # nothing left installed but its owner's
(False, 0)
>>> failing = TimedStep(engine, FakeClock()); failing.begin()
>>> try:
...     engine.step(None)                   # raises: the step is not timed
... except TypeError:
...     pass
>>> failing.done, "step" in vars(engine), len(engine._forward_pre_hooks)
(False, False, 0)
>>> unwrap()
"""

from __future__ import annotations

from typing import Any

from ..._wrap import wrap_method
from ...capture.runtime.timing import Clock
from ...result.iteration import TIMED

__all__ = ["TimedStep"]


class TimedStep:
    """Times one step of a DeepSpeed ``engine`` on ``clock`` (see the module docstring):
    :meth:`begin` at its first forward (from the engine's forward pre-hook, before the call
    runs), ``done`` once its boundary ``step()`` has returned; :meth:`remove` takes off what it
    installed (it does so itself when done). Its owner routes ``engine.backward`` through
    :meth:`backward` before the step: ``engine.backward(loss_fn(engine(x), y))`` looks the
    method up before the forward in its arguments begins the step."""

    def __init__(self, engine: Any, clock: Clock):
        self._engine, self._clock = engine, clock
        self._pairs: dict[str, list[list]] = {"forward": [], "backward": [], "step": []}
        self._first = self._last = None
        self._undo: list = []
        self.done = False

    def begin(self) -> None:
        """The step's first forward begins now (later ones are heard by a pre-hook; one added
        from inside a pre-hook runs from the next call on)."""
        engine = self._engine
        self._first = self._open("forward")
        self._undo = [engine.register_forward_pre_hook(self._forward_begins).remove,
                      engine.register_forward_hook(self._forward_ends, always_call=True).remove,
                      wrap_method(engine, "step", self._step)]

    def backward(self, call, args, kwargs):
        """``engine.backward(...)``, timed while the step runs (begun, not done)."""
        if not self._undo:
            return call(*args, **kwargs)
        return self._around("backward")(call, args, kwargs)

    def _forward_begins(self, module, args) -> None:
        pairs = self._pairs["forward"]
        if not pairs or pairs[-1][1] is not None:  # not the call begin() opened
            self._open("forward")

    def _forward_ends(self, module, args, output) -> None:
        self._close("forward")

    def _open(self, phase: str):
        stamp = self._clock.stamp()
        self._pairs[phase].append([stamp, None])
        return stamp

    def _close(self, phase: str):
        stamp = self._clock.stamp()
        pairs = self._pairs[phase]
        if pairs and pairs[-1][1] is None:
            pairs[-1][1] = stamp
        return stamp

    def _around(self, phase: str):
        def around(call, args, kwargs):
            self._open(phase)
            try:
                out = call(*args, **kwargs)
            except BaseException:
                self.remove()  # a failed step is not timed, and keeps nothing installed
                raise
            self._close(phase)
            return out

        return around

    def _step(self, call, args, kwargs):
        """``engine.step()``: the step phase at the boundary (before it only a micro-step,
        which is no phase), whose end is the timed step's."""
        boundary = getattr(self._engine, "is_gradient_accumulation_boundary", None)
        if callable(boundary) and not boundary():
            return call(*args, **kwargs)
        out = self._around("step")(call, args, kwargs)
        self._last = self._pairs["step"][-1][1]
        self.done = True
        self.remove()
        return out

    def remove(self) -> None:
        """Take off the hooks and wrappers (last installed first)."""
        while self._undo:
            self._undo.pop()()

    def spans(self) -> dict[str, list[float]]:
        """The timed step's seconds as the result's ``timed.<kind>`` spans: each forward call,
        backward call and the boundary step, and the whole step; empty unless it is done."""
        if not self.done:
            return {}
        clock = self._clock
        clock.finish()  # a device's clock: one synchronize, then every stamp reads
        out = {TIMED[phase]: [clock.seconds(a, b) for a, b in pairs if b is not None]
               for phase, pairs in self._pairs.items()}
        out[TIMED["iteration"]] = [clock.seconds(self._first, self._last)]
        return out
