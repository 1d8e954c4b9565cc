"""Paired timing, shared by the benchmarks: every variant runs right after a plain call of its
own, so slow drift of the machine cancels in the ratio of the two.

>>> calls = []
>>> rounds = paired_rounds(lambda: calls.append("p"), {"v": lambda: calls.append("v")}, rounds=2)
>>> calls, len(rounds["v"]["time"]), len(rounds["v"]["plain"])
(['p', 'v', 'p', 'v'], 2, 2)
"""

from __future__ import annotations

import time
from typing import Callable

__all__ = ["paired_rounds"]


def paired_rounds(plain: Callable[[], object], runs: dict[str, Callable[[], object]], rounds: int) -> dict[str, dict]:
    """Per variant: ``time`` (its seconds each round), ``plain`` (the seconds of the plain call
    run just before it) and ``result`` (what it returned)."""
    out = {k: {"time": [], "plain": [], "result": []} for k in runs}
    for _ in range(rounds):
        for key, fn in runs.items():
            t0 = time.perf_counter()
            plain()
            t1 = time.perf_counter()
            result = fn()
            t2 = time.perf_counter()
            out[key]["plain"].append(t1 - t0)
            out[key]["time"].append(t2 - t1)
            out[key]["result"].append(result)
    return out
