"""Clocks: where latencies come from.

A clock hands out *stamps* at module and op boundaries and turns pairs of stamps into
seconds once the capture is over (``finish``), so a CUDA clock can record events
without synchronising per module and synchronise once at the end. ``now`` is host time,
used to measure the profiler's own overhead.

>>> clock = FakeClock(step=0.5)
>>> a, b = clock.stamp(), clock.stamp()
>>> clock.finish(); clock.seconds(a, b)
0.5
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import torch

__all__ = ["Clock", "HostClock", "CudaEventClock", "FakeClock", "default_clock"]


class Clock(Protocol):
    #: Name recorded in the result metadata.
    name: str
    #: Whether spans and overhead are on the same timeline, so that the profiler's own
    #: host-side overhead can be subtracted from spans.
    subtracts_overhead: bool
    #: Seconds per unit of stamp difference when ``seconds(a, b) == (b - a) * scale`` (so
    #: differences can be summed as they come), None when stamps resolve only at ``finish``.
    scale: float | None

    def stamp(self) -> Any: ...

    def now(self) -> float: ...

    def finish(self) -> None: ...

    def seconds(self, start: Any, end: Any) -> float: ...


class HostClock:
    """``time.perf_counter``: the clock for CPU (and meta) execution."""

    name = "perf_counter"
    subtracts_overhead = True
    scale = 1.0

    def __init__(self) -> None:
        self.stamp = time.perf_counter
        self.now = time.perf_counter

    def finish(self) -> None:
        pass

    @staticmethod
    def seconds(start: float, end: float) -> float:
        return end - start


class CudaEventClock:
    """CUDA events recorded on the current stream of the model's device (not the current
    device's: a model on ``cuda:1`` without ``set_device(1)`` is timed on its own stream);
    one synchronize of that device in ``finish``: every stamp is on it, so any two compare.

    Spans are GPU time, so host-side overhead is not subtracted from them. While a CUDA graph
    is being captured on the stream no event is recorded (it would be part of the graph, and
    its time unreadable): the stamp is None and a span touching it reads 0.
    """

    name = "cuda_events"
    subtracts_overhead = False
    scale = None

    def __init__(self, device: torch.device | None = None) -> None:
        self.device = device
        self.now = time.perf_counter

    def stamp(self) -> torch.cuda.Event | None:
        if torch.cuda.is_current_stream_capturing():
            return None
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def finish(self) -> None:
        torch.cuda.synchronize(self.device)

    @staticmethod
    def seconds(start: torch.cuda.Event | None, end: torch.cuda.Event | None) -> float:
        if start is None or end is None:
            return 0.0
        return start.elapsed_time(end) / 1e3


class FakeClock:
    """A deterministic clock for tests: each stamp is ``step`` seconds after the last.

    ``now`` never advances, so the measured profiler overhead is zero and latencies
    depend only on how many stamps fell inside a span.
    """

    name = "fake"
    subtracts_overhead = True

    def __init__(self, step: float = 1e-3) -> None:
        if not step > 0:
            raise ValueError(f"step: expected a positive number of seconds, got {step!r}")
        self.step = self.scale = step
        self._ticks = 0

    def stamp(self) -> int:
        self._ticks += 1
        return self._ticks

    def now(self) -> float:
        return 0.0

    def finish(self) -> None:
        pass

    def seconds(self, start: int, end: int) -> float:
        return (end - start) * self.step


def default_clock(device: torch.device) -> Clock:
    """CUDA events for CUDA models, perf_counter for everything else."""
    if device.type == "cuda":
        return CudaEventClock(device)
    return HostClock()
