"""The host time profiling adds per op and per module call: the CPU proxies of the GPU-timing issue (28).

    python benchmarks/host_cost.py                 # 21 rounds, one thread
    python benchmarks/host_cost.py --rounds 51

On a launch-bound GPU every microsecond the host spends per op or per module call becomes GPU
idle time, so these are measured on the CPU, where they are the host's alone. Two models:

* ``ops``: one module whose forward is 4,000 one-element adds (ops, no module calls);
* ``calls``: 1,000 tiny modules in a row, each one add (a module call per op).

Four ways of running each, against a plain forward in the same round:

* **the timed pass**: the pass ``profile(warm_up >= 1)`` times, a capture session that counts
  nothing (module calls only: each module's forward wrapped in C++, no global hook; the calls
  it records are replayed when the session stops, after the forward, which is printed apart),
  as on a device's clock; and **with the ops' stamps**, as the host clock's timed pass runs it
  (each op stamped to time the operators in the same pass, its cost then left out of the spans:
  the last column of ``benchmarks/overhead.py`` measures what remains);
* **the single pass**: ``Profiler(model, memory=True)``, counting and timing together;
* **the single pass, memory off**: ``Profiler(model)``;
* **torch's floor**: a global forward pre-hook and an always-called forward hook that do
  nothing, which is what observing module calls through global hooks costs before any work.

From the two models: per op, (pass - plain) / ops on ``ops``; per call, what ``calls`` adds
beyond its ops' share, ((pass - plain) - per op x ops) / calls. Medians over the rounds,
paired round by round: the ways take turns at going first, and the plain forward goes first in
every other turn (what ran just before a forward moves its time). For the single passes, the
part of the per-op time spent charging the native recorder's records in Python
(``NativeCountingSource.settle``) is given too; the rest is recording. Targets (issue 28):
the timed pass at most 0.2 us per op and 1.5 us per module call; the single pass at most 1 us
per op with memory on.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
from torch import nn

import flopsight
from flopsight.capture.backends.native.ops import NativeCountingSource
from flopsight.capture.model.modules import describe
from flopsight.capture.runtime.timing import HostClock
from flopsight.profiler import open_session

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead import SMALL_OPS, build  # noqa: E402

CALLS = 1000


class _Add(nn.Module):
    def forward(self, x):
        return x + 1


def models() -> dict[str, tuple[nn.Module, int, int]]:
    """name -> (model, ops per forward, module calls per forward beyond the root's)."""
    small_ops, _, _ = build("small-ops")
    return {"ops": (small_ops, SMALL_OPS, 0),
            "calls": (nn.Sequential(*(_Add() for _ in range(CALLS))), CALLS, CALLS)}


def timed_pass(op_times: bool):
    def start(model):
        """A session as profile()'s timed pass opens it: module spans (and the ops' stamps), nothing counted."""
        options = flopsight.ProfileOptions()
        session = open_session(describe(model), options, options.formulas, HostClock(), count=False,
                               op_times=op_times)
        return session.stop

    return start


def single_pass(memory: bool):
    def start(model):
        prof = flopsight.Profiler(model, memory=memory)
        prof.start()
        return prof.stop

    return start


def empty_global_hooks(model):
    pre = nn.modules.module.register_module_forward_pre_hook(lambda module, args: None)
    post = nn.modules.module.register_module_forward_hook(lambda module, args, out: None, always_call=True)

    def remove():
        pre.remove()
        post.remove()

    return remove


WAYS = {"timed pass": timed_pass(False), "timed pass, with the ops' stamps": timed_pass(True),
        "single pass, memory on": single_pass(True),
        "single pass, memory off": single_pass(False), "empty global module hooks (torch's floor)": empty_global_hooks}

_CHARGING = [0.0]  # seconds spent in NativeCountingSource.settle since it was last reset


def _timed_settle(settle):
    def timed(self):
        t0 = time.perf_counter()
        try:
            settle(self)
        finally:
            _CHARGING[0] += time.perf_counter() - t0

    return timed


def measure(built: dict, rounds: int) -> tuple[dict, dict, dict]:
    """(way -> model -> seconds added over the plain forward, per round; way -> model -> seconds
    of it charging the records in Python, per round; way -> model -> seconds its stop took, per
    round) for the ``built`` models."""
    x = torch.ones(4)
    added: dict[str, dict[str, list[float]]] = {w: {m: [] for m in built} for w in WAYS}
    charging: dict[str, dict[str, list[float]]] = {w: {m: [] for m in built} for w in WAYS}
    stopping: dict[str, dict[str, list[float]]] = {w: {m: [] for m in built} for w in WAYS}
    settle = NativeCountingSource.settle
    NativeCountingSource.settle = _timed_settle(settle)
    try:
        _rounds(built, rounds, x, added, charging, stopping)
    finally:
        NativeCountingSource.settle = settle
    return added, charging, stopping


def _rounds(built: dict, rounds: int, x, added: dict, charging: dict, stopping: dict) -> None:
    with torch.no_grad():
        for model, _, _ in built.values():  # warm every path up (the native build, lazy imports)
            for start in WAYS.values():
                stop = start(model)
                model(x)
                stop()
        for i in range(rounds):
            for name, (model, _, _) in built.items():
                ways = list(WAYS.items())
                # the ways in turn first (what ran just before a way moves its figures here), and
                # the plain forward before the profiled one in every other round
                for way, start in ways[i % len(ways):] + ways[:i % len(ways)]:
                    plain = _plain(model, x) if i // len(ways) % 2 == 0 else None
                    stop = start(model)
                    try:
                        _CHARGING[0] = 0.0
                        t0 = time.perf_counter()
                        model(x)
                        profiled = time.perf_counter() - t0
                        charging[way][name].append(_CHARGING[0])
                    finally:
                        t0 = time.perf_counter()
                        stop()
                        stopping[way][name].append(time.perf_counter() - t0)
                    if plain is None:
                        plain = _plain(model, x)
                    added[way][name].append(profiled - plain)


def _plain(model, x) -> float:
    t0 = time.perf_counter()
    model(x)
    return time.perf_counter() - t0


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    built = models()
    added, charging, stopping = measure(built, args.rounds)
    (_, ops, _), (_, call_ops, calls) = built["ops"], built["calls"]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.rounds} rounds; "
          f"{ops:,} one-element adds in one module, and {calls:,} modules of one add each\n")
    print("| way | host time added per op | of it, charging in Python | per module call | target |")
    print("|---|---:|---:|---:|---|")
    targets = {"timed pass": "<= 0.2 us per op, <= 1.5 us per call", "single pass, memory on": "<= 1 us per op"}
    for way, by_model in added.items():
        per_op = statistics.median(by_model["ops"]) / ops
        per_call = (statistics.median(by_model["calls"]) - per_op * call_ops) / calls
        charged = statistics.median(charging[way]["ops"]) / ops
        print(f"| {way} | {per_op * 1e6:.2f} us | {charged * 1e6:.2f} us | {per_call * 1e6:.2f} us | "
              f"{targets.get(way, '')} |")
    timed = stopping["timed pass"]
    after = (statistics.median(timed["calls"]) - statistics.median(timed["ops"])) / calls
    print(f"\nAfter the forward, the timed pass's stop takes {after * 1e6:.2f} us more per module called once "
          "(its call records replayed, each forward put back), out of the timed forward")


if __name__ == "__main__":
    main()
