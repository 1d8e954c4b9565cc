"""Raw tallies of one capture: per (module path, phase), per operator, a :class:`Stats`.

While capturing, latencies are stamp differences (summed as they come on a linear clock) or
lists of stamp pairs (CUDA events, resolved once at the end).

>>> tally = Tally(linear=True)
>>> tally.add("fc", "forward", "aten.mm", Stats(4, 8), 1.0, 1.5)
>>> tally.add("fc", "forward", "aten.mm", Stats(4, 8), 2.0, 2.25)
>>> tally.resolve(lambda a, b: b - a, scale=1.0)[("fc", "forward")]["aten.mm"]
Stats(macs=8, flops=16, latency=0.75, calls=2)
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

from ..stats import ZERO_STATS, Stats, make_stats

__all__ = ["Tally"]


class Tally:
    """Operator costs per (path, phase), each top-level forward call's cost, unsupported ops."""

    def __init__(self, linear: bool):
        self.linear = linear
        self.ops: dict[tuple[str, str], dict[str, Stats]] = {}
        self.stamps: dict[tuple[str, str, str], list] = {}  # (path, phase, op) -> stamp pairs
        self.tops: list[list[int]] = []  # [macs, flops] of each top-level forward call
        self.unsupported: Counter = Counter()

    def add(self, path: str, phase: str, name: str, cost: Stats, t0, t1, calls: int = 1) -> None:
        key = (path, phase)
        ops = self.ops.get(key)
        if ops is None:
            ops = self.ops[key] = {}
        macs, flops, latency, n = ops.get(name, ZERO_STATS)
        if self.linear:
            ops[name] = make_stats(macs + cost[0], flops + cost[1], latency + (t1 - t0), n + calls)
        else:
            ops[name] = make_stats(macs + cost[0], flops + cost[1], 0.0, n + calls)
            self.stamps.setdefault((path, phase, name), []).append((t0, t1))

    def add_top(self, top_id: int, cost: Stats) -> None:
        tops = self.tops
        while len(tops) <= top_id:
            tops.append([0, 0])
        acc = tops[top_id]
        acc[0] += cost[0]
        acc[1] += cost[1]

    def resolve(self, seconds: Callable, scale: float | None) -> dict[tuple[str, str], dict[str, Stats]]:
        """Per (path, phase), per op: costs with latencies in seconds."""
        out = {}
        for key, ops in self.ops.items():
            resolved = {}
            for name, s in ops.items():
                if scale is not None:
                    latency = s.latency * scale
                else:
                    latency = sum(seconds(a, b) for a, b in self.stamps.get((*key, name), ()))
                resolved[name] = make_stats(s.macs, s.flops, latency, s.calls)
            out[key] = resolved
        return out
