"""Collective communication as the result stores it: one record per module, phase, kind,
group size and peer (of a send or receive), with bandwidths as DeepSpeed's communication logger defines them.

``bytes`` is the payload per rank, summed over the calls: the tensor reduced (all-reduce),
this rank's contribution (all-gather, all-to-all, gather), this rank's share of the result
(reduce-scatter, scatter), the tensor sent, received or broadcast; a barrier moves none.
Bandwidths follow ``deepspeed.utils.comms_logging.calc_bw_log`` with ``n`` the group size:

* all-reduce: algbw = 2 * size / t, busbw = size / t * 2 (n - 1) / n
* all-gather, reduce-scatter: size = n * bytes; algbw = size / t, busbw = algbw * (n - 1) / n
* all-to-all: algbw = size / t, busbw = algbw * (n - 1) / n
* broadcast, send, recv, barrier: algbw = busbw = size / t

They are in bytes per second here (DeepSpeed prints Gbit/s: ``* 8 / 1e9``).

>>> c = Collective("all_reduce", "", "backward", count=2, bytes=1000, latency=0.001, group_size=4)
>>> c.algbw, c.busbw   # 2 * 1000 / 1 ms; 1000 / 1 ms * 2 * 3 / 4
(2000000.0, 1500000.0)
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["Collective", "KINDS", "bandwidths"]

#: Every kind of collective, in report order.
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "gather", "scatter",
         "send", "recv", "barrier")


def bandwidths(kind: str, size: int, seconds: float, n: int) -> tuple[float, float]:
    """(algbw, busbw) in bytes/s of ``size`` payload bytes per rank moved in ``seconds`` by a
    group of ``n`` ranks (0 when no time was measured)."""
    if seconds <= 0:
        return 0.0, 0.0
    n = max(n, 1)
    if kind == "all_reduce":
        return 2 * size / seconds, size / seconds * 2 * (n - 1) / n
    if kind in ("all_gather", "reduce_scatter"):
        algbw = size * n / seconds
        return algbw, algbw * (n - 1) / n
    if kind == "all_to_all":
        algbw = size / seconds
        return algbw, algbw * (n - 1) / n
    algbw = size / seconds
    return algbw, algbw


class Collective(NamedTuple):
    """``count`` collectives of one ``kind`` that ``module`` issued in ``phase`` on a group of
    ``group_size`` ranks (0 if unknown): ``bytes`` payload per rank and ``latency`` seconds
    (issue to completion), summed over the calls. Of the latency, ``overlapped`` is the time
    the rank spent running ops meanwhile (communication hidden behind compute) and
    ``exposed`` the rest (the rank waited for it); both are host time, measured on CPU runs."""

    kind: str
    module: str
    phase: str
    count: int  # type: ignore[assignment]  # shadows tuple.count (a method): a public field, kept
    bytes: int
    latency: float
    group_size: int
    exposed: float = 0.0
    overlapped: float = 0.0
    #: a send's or receive's other rank, its rank in the group (-1: any other kind)
    peer: int = -1

    @property
    def algbw(self) -> float:
        """Algorithm bandwidth, bytes/s (DeepSpeed's definition, per call averaged over time)."""
        return bandwidths(self.kind, self.bytes, self.latency, self.group_size)[0]

    @property
    def busbw(self) -> float:
        """Bus bandwidth, bytes/s (DeepSpeed's definition)."""
        return bandwidths(self.kind, self.bytes, self.latency, self.group_size)[1]

    def to_dict(self) -> dict[str, Any]:
        d = self._asdict()
        if d["peer"] < 0:  # written for sends and receives only: other results read as before
            del d["peer"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Collective:
        return cls(**d)
