"""The one record of what something cost: MACs, FLOPs, latency and calls.

A formula returns it for one op call (latency and calls 0), the capture sums it per module
and phase, the result stores it, analysis adds it up. It is immutable; ``+`` adds two
records field by field and ``* k`` scales one (``k`` identical calls).

>>> a = Stats(macs=2, flops=5)
>>> a + Stats(macs=1, flops=2, latency=0.5, calls=1)
Stats(macs=3, flops=7, latency=0.5, calls=1)
>>> a * 3
Stats(macs=6, flops=15)
>>> Stats.of_product(4, extra_flops=1), Stats.of_flops(7)
(Stats(macs=4, flops=9), Stats(macs=0, flops=7))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from .._checks import is_int

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["Stats", "ZERO_STATS", "make_stats", "stats_from_dict", "seconds_from_file"]


class Stats(NamedTuple):
    """MACs, FLOPs, latency (seconds) and call count; every field defaults to zero."""

    macs: int = 0
    flops: int = 0
    latency: float = 0.0
    calls: int = 0

    @classmethod
    def of_product(cls, macs: int, extra_flops: int = 0) -> Stats:
        """A matrix-like product: 2 FLOPs per MAC, plus ``extra_flops`` (bias adds...)."""
        macs = int(macs)
        return _make(cls, (macs, 2 * macs + int(extra_flops), 0.0, 0))

    @classmethod
    def of_flops(cls, flops: int) -> Stats:
        """Arithmetic that is not a multiply-accumulate: FLOPs only."""
        return _make(cls, (0, int(flops), 0.0, 0))

    def __add__(self, other: Stats) -> Stats:  # type: ignore[override]
        if not isinstance(other, Stats):
            return NotImplemented
        a0, a1, a2, a3 = self
        b0, b1, b2, b3 = other
        return _make(Stats, (a0 + b0, a1 + b1, a2 + b2, a3 + b3))

    def __mul__(self, k: int) -> Stats:  # type: ignore[override]
        if not is_int(k):
            return NotImplemented
        m, f, t, c = self
        return _make(Stats, (m * k, f * k, t * k, c * k))

    # a method rather than ``__rmul__ = __mul__``: in a NamedTuple body type checkers read
    # that assignment as a fifth field
    def __rmul__(self, k: int) -> Stats:  # type: ignore[override]
        return self.__mul__(k)

    @property
    def flops_per_second(self) -> float:
        """Achieved FLOP/s (0 when no time was measured)."""
        return self.flops / self.latency if self.latency > 0 else 0.0

    def __repr__(self) -> str:
        # a formula's cost has no time or calls: show just what it holds
        extra = f", latency={self.latency!r}, calls={self.calls!r}" if self.latency or self.calls else ""
        return f"Stats(macs={self.macs!r}, flops={self.flops!r}{extra})"


ZERO_STATS = Stats()

#: ``_make(Stats, (macs, flops, latency, calls))``: a record without the keyword-handling
#: constructor, for the paths that run once per operator
_make = tuple.__new__


def make_stats(macs: int, flops: int, latency: float, calls: int) -> Stats:
    """``Stats(macs, flops, latency, calls)`` at the cost of a tuple (for hot paths)."""
    return _make(Stats, (macs, flops, latency, calls))


def stats_from_dict(d: dict) -> Stats:
    """A stats record as files write it; a null latency (the meta device's: nothing ran on
    hardware) reads as 0.

    >>> stats_from_dict({"macs": 1, "flops": 2, "latency": None, "calls": 1})
    Stats(macs=1, flops=2, latency=0.0, calls=1)
    """
    return Stats(**{**d, "latency": d.get("latency") or 0.0})


def seconds_from_file(values: Iterable[float | None]) -> list[float]:
    """Times as files write them; null (the meta device's) reads as 0."""
    return [v if v is not None else 0.0 for v in values]
