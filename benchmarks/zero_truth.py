"""The truth the ZeRO answer is checked against: unprofiled steps, every collective timed.

    DS_ACCELERATOR=cpu deepspeed --num_gpus 2 benchmarks/zero_truth.py
    DS_ACCELERATOR=cpu deepspeed --num_gpus 2 benchmarks/zero_truth.py --stages 0,1,2,3 --json truth.json
    DS_ACCELERATOR=cpu deepspeed --num_gpus 2 benchmarks/zero_truth.py --flopsight

The seed user's ``Net`` (examples/zero_stages.py) in one DeepSpeed engine per ZeRO stage
(``--stages``, default 0 and 3), trained in turns in one process, a step of each at a time,
each starting at a barrier, as the example trains them, with no profiler at all. Every collective call of
``torch.distributed`` (the functions DeepSpeed's communication backend calls) is timed on the
host's clock: a blocking call from its start to its return, an asynchronous one by the time
its caller waits on the handle it returned. What a step spent so is its communication (the
time the rank waited for the others and for the transfers); the rest of its wall time is
everything else (compute, framework, hooks). Rank 0 prints, per stage, the step's and the
communication's median and interquartile range over ``--steps`` steps, and each stage's
change from the first: the Hodges-Lehmann shift with its 95% interval, the statistic
flopsight's verdict gives (``flopsight.analysis.diff.stats.shift``).

``--flopsight`` trains a second engine per stage in the same turns, each step profiled as
examples/zero_stages.py profiles it, and prints the truth's changes beside flopsight's
verdict's: one run, one busy spell of the machine for both (docs/distributed.md, the ten-run
table).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings

import deepspeed
import torch
import torch.distributed as dist
from torch import nn

import flopsight
from flopsight.analysis.diff.stats import shift
from flopsight.analysis.diff.verdict import verdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from zero_stages import Net, remove_shared_buffers  # noqa: E402

#: the collectives timed, in torch.distributed and in distributed_c10d (DeepSpeed calls both)
COLLECTIVES = ("all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor", "_all_gather_base",
               "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "broadcast", "reduce",
               "all_to_all", "all_to_all_single")
WAITED = [0.0]  # seconds spent in collectives since the last reset
#: per kind (all_gather, reduce_scatter, ...): [calls, seconds] since the last reset
BY_KIND: dict[str, list] = {}


def _kind(name: str) -> str:
    """``all_gather`` for ``_all_gather_base`` and ``all_gather_into_tensor``, and so on."""
    for kind in ("all_to_all", "all_gather", "reduce_scatter", "all_reduce", "broadcast", "reduce"):
        if kind in name:
            return kind
    return name


def _add(kind: str, seconds: float, calls: int = 0) -> None:
    WAITED[0] += seconds
    k = BY_KIND.setdefault(kind, [0, 0.0])
    k[0] += calls
    k[1] += seconds


class _TimedWork:
    """An asynchronous collective's handle: the time its caller waits on it is communication."""

    def __init__(self, work, kind: str):
        self._work, self._kind = work, kind

    def wait(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return self._work.wait(*args, **kwargs)
        finally:
            _add(self._kind, time.perf_counter() - t0)

    def __getattr__(self, name):
        return getattr(self._work, name)


_INSIDE = [0]  # timed calls running: one that calls another (_all_gather_base calls
#              all_gather_into_tensor) is timed once, as the outer call


def _timed(function, kind: str):
    def timed(*args, **kwargs):
        if _INSIDE[0]:
            return function(*args, **kwargs)
        _INSIDE[0] += 1
        t0 = time.perf_counter()
        try:
            work = function(*args, **kwargs)
        finally:
            _INSIDE[0] -= 1
            _add(kind, time.perf_counter() - t0, 1)
        return _TimedWork(work, kind) if work is not None and hasattr(work, "wait") else work

    return timed


def time_collectives() -> None:
    """Time every collective of :data:`COLLECTIVES`, before DeepSpeed reads them."""
    for module in (dist, dist.distributed_c10d):
        for name in COLLECTIVES:
            if hasattr(module, name):
                setattr(module, name, _timed(getattr(module, name), _kind(name)))


def _engine(stage: int, batch_size: int):
    torch.manual_seed(0)
    config = {"train_micro_batch_size_per_gpu": batch_size,
              "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
              "zero_optimization": {"stage": stage}}
    return deepspeed.initialize(model=Net(), config=config)[0]


def train(stages: list[int], batch_size: int, warm_up: int, steps: int,
          profiled: bool = False) -> tuple[dict[int, dict[str, list[float]]], dict[int, flopsight.ProfileResult]]:
    """Each stage's engine trained in turns; per stage, each measured step's ``wall`` and
    ``communication`` seconds on this rank, and per collective kind its ``calls.<kind>`` and
    ``seconds.<kind>``. ``profiled``: a second engine per stage trains in
    the same turns, each step profiled as examples/zero_stages.py profiles it: its results,
    one per stage (every step's in ``result.samples``; rank 0's hold every rank's)."""
    engines = {(stage, False): _engine(stage, batch_size) for stage in stages}
    if profiled:
        engines.update({(stage, True): _engine(stage, batch_size) for stage in stages})
    loss_fn = nn.CrossEntropyLoss()
    measured = {stage: {"wall": [], "communication": []} for stage in stages}
    results: dict[int, list] = {stage: [] for stage in stages}
    for step in range(warm_up + steps):
        for (stage, profile), engine in engines.items():
            x, y = torch.randn(batch_size, 3, 32, 32), torch.randint(0, 10, (batch_size,))
            # the ranks start each step together, as a training loop's steps do (each ends in
            # a collective): what came before (rank 0 gathering the profile of the step
            # before, on its own) does not make one rank late to this step's first collective
            dist.barrier()
            if profile:
                if step < warm_up:
                    engine.backward(loss_fn(engine(x), y))
                    engine.step()
                    continue
                with flopsight.Profiler(engine.module, optimizer=engine, memory=True) as prof:
                    engine.backward(loss_fn(engine(x), y))
                    engine.step()
                results[stage].append(prof.result)
                continue
            WAITED[0] = 0.0
            BY_KIND.clear()
            t0 = time.perf_counter()
            engine.backward(loss_fn(engine(x), y))
            engine.step()
            wall = time.perf_counter() - t0
            if step >= warm_up:
                measured[stage]["wall"].append(wall)
                measured[stage]["communication"].append(WAITED[0])
                for kind, (calls, seconds) in BY_KIND.items():
                    measured[stage].setdefault(f"calls.{kind}", []).append(calls)
                    measured[stage].setdefault(f"seconds.{kind}", []).append(seconds)
    return measured, {stage: flopsight.combine_steps(r) for stage, r in results.items() if r}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def _quartiles(values: list[float]) -> str:
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return f"{_ms(q2)} ({_ms(q1)} .. {_ms(q3)})"


def _change(xs: list[float], ys: list[float]) -> dict[str, float]:
    delta, low, high = shift(xs, ys)
    return {"delta": delta, "low": low, "high": high}


def said(d: dict[str, float]) -> str:
    """A change in ms with its interval: ``+5.82 ms (+3.10 .. +8.44)``."""
    return f"{d['delta'] * 1e3:+.2f} ms ({d['low'] * 1e3:+.2f} .. {d['high'] * 1e3:+.2f})"


def compare(measured: dict[int, dict[str, list[float]]], results: dict[int, flopsight.ProfileResult],
            stages: list[int]) -> dict[int, dict]:
    """Prints, per stage after the first, the truth's changes beside flopsight's verdict's
    (each the shift with its 95% interval): the step, communication (flopsight's exposed
    communication), and the rest (flopsight's framework, compute, other and profiler parts);
    returns flopsight's verdicts."""
    first = stages[0]
    print(f"\nthe change from ZeRO-{first}: the truth beside flopsight's verdict (profiled engines, the same turns)")
    print("| ZeRO stage | step: truth | step: flopsight | communication: truth | communication: flopsight | "
          "flopsight over truth | the rest: truth | flopsight's causes |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    out = {}
    for stage in stages[1:]:
        v = verdict(results[first], results[stage])
        truth = {k: _change(measured[first][k], measured[stage][k]) for k in ("wall", "communication")}
        rest = _change([w - c for w, c in zip(measured[first]["wall"], measured[first]["communication"])],
                       [w - c for w, c in zip(measured[stage]["wall"], measured[stage]["communication"])])
        comm = v.parts["communication"]

        causes = ", ".join(f"{c.part} {c.difference.delta * 1e3:+.2f} ms" for c in v.causes)
        ratio = comm.delta / truth["communication"]["delta"] if truth["communication"]["delta"] else float("nan")
        print(f"| {stage} | {said(truth['wall'])} | {said(v.step.to_dict())} | {said(truth['communication'])} | "
              f"{said(comm.to_dict())} | "
              f"{ratio:.2f}x | {said(rest)} | {causes} |")
        out[stage] = {"verdict": v.to_dict(), "truth": {**truth, "rest": rest}}
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local_rank", type=int, default=0, help=argparse.SUPPRESS)  # set by the launcher
    parser.add_argument("--stages", default="0,3", help="ZeRO stages, the first the reference (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--warm-up", type=int, default=2)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--flopsight", action="store_true",
                        help="also profile a second engine per stage in the same turns, as examples/zero_stages.py "
                             "does, and put its verdict's changes beside the truth's")
    parser.add_argument("--json", help="also write the figures to this file (rank 0)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", category=FutureWarning)
    stages = [int(s) for s in args.stages.split(",")]
    time_collectives()
    measured, results = train(stages, args.batch_size, args.warm_up, args.steps, profiled=args.flopsight)
    if dist.get_rank() == 0:
        first = stages[0]
        out = {"steps": args.steps, "stages": {}}
        print(f"Unprofiled steps, every collective timed: {args.steps} steps per stage on {dist.get_world_size()} "
              f"ranks (rank 0), medians (IQR)")
        print("| ZeRO stage | step | communication | the rest | step change | communication change |")
        print("|---:|---:|---:|---:|---:|---:|")
        for stage in stages:
            m = measured[stage]
            rest = [w - c for w, c in zip(m["wall"], m["communication"])]
            changes = {k: _change(measured[first][k], m[k]) for k in ("wall", "communication")}
            told = [said(c) if stage != first else "" for c in changes.values()]
            print(f"| {stage} | {_quartiles(m['wall'])} | {_quartiles(m['communication'])} | {_quartiles(rest)} | "
                  f"{told[0]} | {told[1]} |")
            out["stages"][stage] = {**m, "change_from_first": changes}
        print("\nper collective kind, rank 0: calls per step, and seconds per step (median)")
        for stage in stages:
            kinds = sorted(k.split(".", 1)[1] for k in measured[stage] if k.startswith("calls."))
            print(f"  ZeRO-{stage}: " + ", ".join(
                f"{k} {statistics.median(measured[stage]['calls.' + k]):g} calls "
                f"{_ms(statistics.median(measured[stage]['seconds.' + k]))}" for k in kinds))
        if results:
            out["flopsight"] = compare(measured, results, stages)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
    dist.barrier()
    remove_shared_buffers()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
