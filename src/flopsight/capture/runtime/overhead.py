"""The profiler's own host time (:class:`Overhead`), so spans can leave it out.

>>> from flopsight.capture.runtime.timing import FakeClock
>>> overhead = Overhead(FakeClock().now)
>>> h0 = overhead.begin(); overhead.end(h0); overhead.seconds
0.0
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Overhead"]


class Overhead:
    """Host seconds spent in the profiler's own code, so spans can leave them out."""

    __slots__ = ("now", "seconds")

    def __init__(self, now: Callable[[], float]):
        self.now = now
        self.seconds = 0.0

    def begin(self) -> float:
        return self.now()

    def end(self, started: float) -> None:
        """The profiler's own work that began at host time ``started`` ends now."""
        self.seconds += self.now() - started
