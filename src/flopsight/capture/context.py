"""What the capture sources of one session share: clock, overhead, phase and the records.

Each field has one writer: the module tracker owns the call stack, the optimizer hooks and
backward spans set ``phase`` while they run, the sources that count a call whole (units,
module rules, autograd functions) hold ``suppressed`` above zero while it runs so the aten
ops underneath are not counted again. :class:`Overhead` is the profiler's own host time, handed to every source.

>>> from flopsight.capture.timing import FakeClock
>>> overhead = Overhead(FakeClock().now)
>>> h0 = overhead.begin(); overhead.end(h0); overhead.seconds
0.0
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..formulas.registry import Registry
from .tally import Tally
from .timing import Clock

__all__ = ["Overhead", "CaptureContext"]


class Overhead:
    """Host seconds spent in the profiler's own code, so spans can leave them out."""

    __slots__ = ("now", "seconds")

    def __init__(self, now: Callable[[], float]):
        self.now = now
        self.seconds = 0.0

    def begin(self) -> float:
        return self.now()

    def end(self, started: float) -> None:
        self.seconds += self.now() - started


@dataclass(eq=False)
class CaptureContext:
    """The shared state of one capture session (see the module docstring for who writes what)."""

    clock: Clock
    registry: Registry
    overhead: Overhead
    tally: Tally
    #: ops outside every module call belong to the root (a profiled call of the model's own
    #: method, e.g. generate()); False for a span of user code, where they are not the model's
    outside_to_root: bool = False
    phase: str = "forward"  # "step" in optimizer.step(), "backward" in a backward call, else "forward"
    #: the phase of the last top-level forward call begun or backward or step span ended:
    #: where communication between them belongs (a wrapper's gradient reduction after backward)
    last_phase: str = "forward"
    suppressed: int = 0  # > 0 while a call counted whole runs
    paused: bool = False  # a profile nested inside this one is running: record nothing
    stack: list = field(default_factory=list)  # active module calls, innermost last
    first_inputs: tuple | None = None  # (args, kwargs) of the first top-level module call
    error: str | None = None  # what the profiled call raised, if it did

    @classmethod
    def create(cls, clock: Clock, registry: Registry, **kwargs) -> "CaptureContext":
        return cls(clock, registry, Overhead(clock.now), Tally(clock.scale is not None), **kwargs)
