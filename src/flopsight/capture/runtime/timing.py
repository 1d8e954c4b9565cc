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

__all__ = ["Clock", "HostClock", "CudaEventClock", "FakeClock", "FakeDeviceClock", "default_clock", "on_device",
           "host_seconds"]


class Clock(Protocol):
    #: Name recorded in the result metadata.
    name: str
    #: Whether spans and overhead are on the same timeline, so that the profiler's own
    #: host-side overhead can be subtracted from spans.
    subtracts_overhead: bool

    # a read-only member, so that a clock may fix it as a plain float (or None) class attribute
    @property
    def scale(self) -> float | None:
        """Seconds per unit of stamp difference when ``seconds(a, b) == (b - a) * scale`` (so
        differences can be summed as they come), None when stamps resolve only at ``finish``."""

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
    #: a device's own clock: the model's work runs asynchronously to the host (see :func:`on_device`)
    on_device = True

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
    def seconds(start: torch.cuda.Event | float | None, end: torch.cuda.Event | float | None) -> float:
        if start is None or end is None:
            return 0.0
        if isinstance(start, float) or isinstance(end, float):
            return host_seconds(start, end)
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


class FakeDeviceClock:
    """A device clock for tests and dry runs on the CPU: stamps are host times resolved at
    ``finish`` (objects, as CUDA events are), and torch.profiler's trace gets simulated
    kernels: each leaf operator launches one kernel lasting ``kernel_share`` of its host
    time, run in launch order on one simulated stream (see
    :func:`~flopsight.capture.sources.kernels.simulated_kernels`). So a profile on it takes
    the CUDA path, device timing included, with figures that mean nothing about a GPU.

    >>> clock = FakeDeviceClock(kernel_share=0.5)
    >>> a, b = clock.stamp(), clock.stamp()
    >>> clock.seconds(a, b) >= 0, clock.seconds(None, b)
    (True, 0.0)
    """

    name = "fake_device"
    subtracts_overhead = False
    scale = None
    on_device = True

    def __init__(self, kernel_share: float = 0.5) -> None:
        if not 0 < kernel_share <= 1:
            raise ValueError(f"kernel_share: expected a share in (0, 1], got {kernel_share!r}")
        self.kernel_share = kernel_share
        self.now = time.perf_counter

    def stamp(self) -> list[float]:
        return [time.perf_counter()]

    def finish(self) -> None:
        pass

    @staticmethod
    def seconds(start: list[float] | float | None, end: list[float] | float | None) -> float:
        if start is None or end is None:
            return 0.0
        if isinstance(start, float) or isinstance(end, float):
            return host_seconds(start, end)
        return end[0] - start[0]


def host_seconds(start: object, end: object) -> float:
    """Seconds between two host stamps a device clock is given (``time.perf_counter``: the
    native recorder's stamps of the module calls inside a phase, where only the phases'
    boundaries are the device's); 0 between a host stamp and a device one, which no clock
    relates.

    >>> host_seconds(1.0, 3.5), host_seconds(1.0, object())
    (2.5, 0.0)
    """
    return end - start if isinstance(start, float) and isinstance(end, float) else 0.0


def on_device(clock: Clock) -> bool:
    """Whether ``clock`` is a device's (CUDA events, or a fake one): the model's work runs
    asynchronously to the host, so module times come from the kernels' own durations and the
    forward's from an uninstrumented call (docs/conventions/timing.md)."""
    return bool(getattr(clock, "on_device", False))


def default_clock(device: torch.device) -> Clock:
    """CUDA events for CUDA models, perf_counter for everything else."""
    if device.type == "cuda":
        return CudaEventClock(device)
    return HostClock()
