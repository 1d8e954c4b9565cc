"""Raw tallies of one capture: per (module path, phase), per operator, a :class:`Stats`.

While capturing, latencies are stamp differences (summed as they come on a linear clock) or
lists of stamp pairs (CUDA events, resolved once at the end). On a clock that is not linear,
a pair of host seconds (``float``: the native backend stamps each op on the host, never with a
device event) is summed as it comes, in seconds.

>>> tally = Tally(linear=True)
>>> tally.add("fc", "forward", "aten.mm", Stats(4, 8), 1.0, 1.5)
>>> tally.add("fc", "forward", "aten.mm", Stats(4, 8), 2.0, 2.25)
>>> tally.resolve(lambda a, b: b - a, scale=1.0)[("fc", "forward")]["aten.mm"]
Stats(macs=8, flops=16, latency=0.75, calls=2)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from ...result.stats import Stats, make_stats

__all__ = ["Tally"]


class Tally:
    """Operator costs per (path, phase), each top-level forward call's cost, unsupported ops.

    While capturing, each (path, phase, op) sums into a mutable ``[macs, flops, latency,
    calls, bytes moved]`` list (no record is built per op); :meth:`resolve` turns them into ``Stats``.
    """

    def __init__(self, linear: bool):
        self.linear = linear
        self.ops: dict[tuple[str, str], dict[str, list]] = {}
        self.stamps: dict[tuple[str, str, str], list] = {}  # (path, phase, op) -> stamp pairs
        self.tops: list[list[int]] = []  # [macs, flops] of each top-level forward call
        self.unsupported: Counter = Counter()

    def add(self, path: str, phase: str, name: str, cost: Stats, t0, t1, calls: int = 1, top_id: int = -1,
            nbytes: int = 0) -> None:
        """One call of op ``name`` from stamp ``t0`` to ``t1`` that moved ``nbytes``;
        ``top_id`` (if >= 0) is the top-level forward call whose cost it also adds to."""
        ops = self.ops.get((path, phase))
        if ops is None:
            ops = self.ops[(path, phase)] = {}
        acc = ops.get(name)
        if acc is None:
            acc = ops[name] = [0, 0, 0.0, 0, 0]
        macs, flops = cost[0], cost[1]
        acc[0] += macs
        acc[1] += flops
        acc[3] += calls
        acc[4] += nbytes
        if self.linear or type(t0) is float:
            acc[2] += t1 - t0
        else:
            self.stamps.setdefault((path, phase, name), []).append((t0, t1))
        if top_id >= 0 and (macs or flops):
            tops = self.tops
            while len(tops) <= top_id:
                tops.append([0, 0])
            top = tops[top_id]
            top[0] += macs
            top[1] += flops

    def resolve(self, seconds: Callable, scale: float | None) -> dict[tuple[str, str], dict[str, Stats]]:
        """Per (path, phase), per op: costs with latencies in seconds."""
        out = {}
        for key, ops in self.ops.items():
            resolved = {}
            for name, (macs, flops, latency, calls, _) in ops.items():
                if scale is not None:
                    latency = latency * scale
                else:  # host seconds summed as they came, and device stamps resolved now
                    latency += sum(seconds(a, b) for a, b in self.stamps.get((*key, name), ()))
                resolved[name] = make_stats(macs, flops, latency, calls)
            out[key] = resolved
        return out

    def bytes_moved(self) -> dict[tuple[str, str], dict[str, int]]:
        """Per (path, phase), per op that moved any: the bytes it read and wrote."""
        out = {}
        for key, ops in self.ops.items():
            moved = {name: acc[4] for name, acc in ops.items() if acc[4]}
            if moved:
                out[key] = moved
        return out
