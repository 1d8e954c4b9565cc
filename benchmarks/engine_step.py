"""The DeepSpeed engine's profiled step: flopsight's drop-in against DeepSpeed's own profiler, in one run.

    DS_ACCELERATOR=cpu deepspeed --num_gpus 2 benchmarks/engine_step.py --rounds 11
    DS_ACCELERATOR=cpu deepspeed --num_gpus 2 benchmarks/engine_step.py --zero 3 --rounds 11
    DS_ACCELERATOR=cpu deepspeed --num_gpus 1 benchmarks/engine_step.py --rounds 31  # one rank: no waiting

On two ranks, DeepSpeed's profiler runs on rank 0 only: rank 0 then arrives last at the
backward pass's all-reduce and stops waiting for rank 1, which hides part of its cost; every
rank runs flopsight's (each rank's result is gathered). One rank shows both costs whole.

The seed user's ``Net`` (examples/zero_stages.py) in a DeepSpeed engine at the ZeRO stage
given, batch 8 per rank, with the engine's ``flops_profiler`` block at ``profile_step``
(its report written to a file, as a user would). Each round builds three engines in turns
and times their profiled step (``global_steps == profile_step``) on the wall clock, and its
phases (the engine's call, ``engine.backward``, ``engine.step()``): one with the block off
(the plain step), one with DeepSpeed's own profiler, one with ``flopsight.deepspeed.install()``
(memory at its default, on). Rank 0 prints, over the rounds (medians and interquartile
ranges, each round's figure over the plain step's of the same round):

* what each profiled step costs: the whole step and each phase (``engine.step()``, where
  both profilers print their reports, included);
* where flopsight's time goes on rank 0: the profile's start, its stop (what ran collected), and
  off the step, on a thread of its own: building this rank's result, gathering the other
  rank's, rendering and writing the report (of it, writing the file);
* what each profiler reports, read from the report it wrote: its iteration latency, fwd, bwd
  and step latencies over the plain step's wall time and phases, and its iteration latency
  over its own engine's unprofiled steps after the profiled one (issue 28: within 10%), and,
  for flopsight, over the step it timed;
* the step's communication on rank 0, the time it waited for collectives: the truth (the
  plain step's, every collective timed as benchmarks/zero_truth.py times them), the same
  timing on each profiled step, and what flopsight's anatomy says of its profiled step
  (DeepSpeed's report has none);
* flopsight's step anatomy: the shares of its framework and profiler parts (DeepSpeed's report
  has no anatomy).
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import statistics
import sys
import tempfile
import time
import warnings

import deepspeed
import torch
import torch.distributed as dist

import flopsight.deepspeed
import flopsight.integrations.deepspeed.engine
import flopsight.profiler
import flopsight.renderers.output

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from zero_stages import Net, remove_shared_buffers  # noqa: E402
from zero_truth import WAITED, time_collectives  # noqa: E402  (this script's folder)

VARIANTS = ("plain", "deepspeed", "flopsight")

#: flopsight's parts of the profiled step: (label, owner, attribute), each timed where it runs
PARTS = (("the profile's start", flopsight.profiler.Profiler, "start"),
         ("its stop (what ran collected)", flopsight.profiler.Profiler, "_end_session"),
         ("the rest, on a thread of its own, off the step:", flopsight.profiler.Profiler, "_finish_then"),
         ("  this rank's result built", flopsight.profiler, "build_result"),
         ("  gathering the other rank's result", flopsight.integrations.deepspeed.engine, "with_ranks"),
         ("  rendering and writing the report", flopsight.integrations.deepspeed.engine, "write"),
         ("    of it, writing the file", flopsight.renderers.output, "write_atomically"))
_SPENT: dict[str, float] = {}  # label -> seconds in the step being timed
#: the report's latency lines: label -> (its line's start, the plain step's phase it measures); the
#: last is flopsight's only
LATENCIES = {"iteration": ("iter latency:", "iteration"), "fwd": ("fwd latency:", "fwd"),
             "bwd": ("bwd latency:", "bwd"), "step": ("step latency:", "step"),
             "iter wall time": ("measured iter wall time", "iteration")}
_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
_LAST: dict = {}  # what the last profiled step of a variant left: "anatomy" (flopsight's)


def _timed(label: str, function):
    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            _SPENT[label] = _SPENT.get(label, 0.0) + time.perf_counter() - t0

    return timed


MEMORY: bool | None = None  # --memory on/off (None: the block's default, on)

#: unprofiled steps each engine runs after the profiled one: the reference for what it reports
AFTER = 2


def profiled_step(variant: str, stage: int, profile_step: int, out: str) -> dict[str, float]:
    """Wall seconds of the engine's step at ``global_steps == profile_step`` (the profiled one,
    unless ``plain``; its step number ``profile_step + 1``) and of its phases: ``iteration``
    (the whole step), ``fwd`` (the engine's call), ``bwd`` (``engine.backward``), ``step``
    (``engine.step()``, flopsight's and DeepSpeed's reports included); ``before``, the step
    before it (the one flopsight times: timed_step.py); ``after``, the median of the
    :data:`AFTER` unprofiled steps after it."""
    gc.collect()  # the engines of the rounds before are garbage: not collected inside the timed steps
    torch.manual_seed(0)
    config = {"train_micro_batch_size_per_gpu": 8, "zero_optimization": {"stage": stage},
              "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
              "flops_profiler": {"enabled": variant != "plain", "profile_step": profile_step, "module_depth": -1,
                                 "top_modules": 1, "detailed": True, "output_file": out}}
    if variant == "flopsight":
        flopsight.deepspeed.install(memory=None if MEMORY is None else MEMORY)
    try:
        engine, _, _, _ = deepspeed.initialize(model=Net(), config=config)
        loss_fn = torch.nn.CrossEntropyLoss()
        x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))
        clock = time.perf_counter
        walls, spent, phases = [], {}, {}  # each step's wall time; the profiled step's parts and phases
        for step in range(profile_step + 1 + AFTER):
            dist.barrier()
            _SPENT.clear()
            WAITED[0] = 0.0  # the step's collectives, timed as benchmarks/zero_truth.py times them
            t0 = clock()
            logits = engine(x)
            t1 = clock()
            loss = loss_fn(logits, y)
            t2 = clock()
            engine.backward(loss)
            t3 = clock()
            engine.step()
            t4 = clock()
            walls.append(t4 - t0)
            if step == profile_step:
                if variant == "flopsight":  # its finish, off the step on a thread of its own: done
                    engine.flops_profiler._measured()
                spent = dict(_SPENT)
                phases = {"iteration": t4 - t0, "fwd": t1 - t0, "bwd": t3 - t2, "step": t4 - t3,
                          "communication": WAITED[0]}
        _SPENT.clear()
        _SPENT.update(spent)
        if variant == "flopsight" and dist.get_rank() == 0:
            result = engine.flops_profiler.result
            _LAST["anatomy"] = result.iteration.anatomy  # (the profiled step's: its communication waited for)
            _LAST["backend"] = f"{result.metadata.backend}, memory {'on' if result.memory is not None else 'off'}"
        return {**phases, "before": walls[profile_step - 1], "after": statistics.median(walls[profile_step + 1:])}
    finally:
        if variant == "flopsight":
            flopsight.deepspeed.uninstall()


def reported(path: str) -> dict[str, float]:
    """The latencies (seconds) a report file gives on its :data:`LATENCIES` lines."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            for label, (start, _) in LATENCIES.items():
                if line.startswith(start) and label not in out:
                    value, unit = re.search(r"([-\d.]+) (s|ms|us)\s*$", line).groups()
                    out[label] = float(value) * _UNIT[unit]
    return out


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return q[0], statistics.median(values), q[2]


def ratio_line(label: str, ratios: list[float], width: int = 45, figure: int = 6) -> str:
    """A printed line: ``label`` (``width`` wide), the median of ``ratios`` (``figure`` wide)
    and their interquartile range."""
    lo, mid, hi = quartiles(ratios)
    return f"  {label:{width}s} {mid:{figure}.2f}x (IQR {lo:.2f}x .. {hi:.2f}x)"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zero", type=int, default=0, choices=range(4))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--profile-step", type=int, default=3)
    parser.add_argument("--memory", choices=("on", "off"), help="flopsight's memory counting (default: on, the "
                                                                "engine's default)")
    parser.add_argument("--local_rank", type=int, default=0, help=argparse.SUPPRESS)  # set by the launcher
    args = parser.parse_args(argv)
    global MEMORY
    MEMORY = None if args.memory is None else args.memory == "on"
    warnings.filterwarnings("ignore")
    times: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    parts: dict[str, list[float]] = {label: [] for label, _, _ in PARTS}
    latencies: dict[str, dict[str, list[float]]] = {v: {k: [] for k in LATENCIES} for v in VARIANTS[1:]}
    shares: dict[str, list[float]] = {"framework": [], "profiler": []}
    waited: list[float] = []  # flopsight's anatomy: the communication the profiled step waited for
    time_collectives()  # before the first engine: DeepSpeed's backend reads some of them once
    originals = [(owner, name, getattr(owner, name)) for _, owner, name in PARTS]
    for (label, owner, name), (_, _, original) in zip(PARTS, originals):
        setattr(owner, name, _timed(label, original))
    try:
        with tempfile.TemporaryDirectory() as folder:
            for round_ in range(args.rounds + 1):  # the first round warms every path up
                for variant in VARIANTS:
                    out = os.path.join(folder, f"{variant}.txt")
                    times[variant].append(profiled_step(variant, args.zero, args.profile_step, out))
                    if not round_ or dist.get_rank() != 0:
                        continue
                    if variant != "plain":
                        for label, seconds in reported(out).items():
                            latencies[variant][label].append(seconds / times["plain"][-1][LATENCIES[label][1]])
                    if variant == "flopsight":
                        for label in parts:
                            parts[label].append(_SPENT.get(label, 0.0))
                        anatomy = _LAST["anatomy"]
                        for part in shares:
                            shares[part].append(getattr(anatomy, part, 0.0) / anatomy.total)
                        waited.append(anatomy.communication)
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
    dist.barrier()
    remove_shared_buffers()
    if dist.get_rank() != 0:
        return
    plain = [t["iteration"] for t in times["plain"][1:]]
    q = quartiles(plain)
    print(f"ZeRO-{args.zero}, the seed's Net, {dist.get_world_size()} CPU rank(s), {args.rounds} rounds, "
          f"the step at global_steps == {args.profile_step} of each engine")
    print(f"  plain step                 {q[1] * 1e3:8.2f} ms (IQR {q[0] * 1e3:.2f} .. {q[2] * 1e3:.2f})")
    for variant in VARIANTS[1:]:
        lo, mid, hi = quartiles([p["iteration"] / b for p, b in zip(times[variant][1:], plain)])
        print(f"  {variant + ' profiled step':26s} {mid:8.2f}x plain (IQR {lo:.2f}x .. {hi:.2f}x)")
    print("each phase of the profiled step over the plain step's (step: engine.step(), the report included), "
          "medians (IQR):")
    for variant in VARIANTS[1:]:
        for phase in ("fwd", "bwd", "step"):
            print(ratio_line(variant + " " + phase,
                             [p[phase] / b[phase] for p, b in zip(times[variant][1:], times["plain"][1:])], 26, 8))
    print(f"flopsight's profiled step on rank 0 (counted by the {_LAST['backend']} backend), medians:")
    for label, spent in parts.items():
        print(f"  {label:45s} {statistics.median(spent) * 1e3:6.2f} ms")
    print("what each reports over the plain step's wall time of the same round (its phase's for fwd, bwd and "
          "step), medians (IQR):")
    for variant in VARIANTS[1:]:
        for label, ratios in latencies[variant].items():
            if not ratios:
                continue
            print(ratio_line(variant + " reported " + label + " latency", ratios))
    print(ratio_line("plain: the step before over the step",
                     [t["before"] / b for t, b in zip(times["plain"][1:], plain)]))
    print(f"what each reports over its own engine's unprofiled steps (the median of the {AFTER} after the profiled "
          "one), medians (IQR):")
    for variant in VARIANTS[1:]:
        said = latencies[variant]["iteration"]  # over the plain step's
        print(ratio_line(variant + " reported iteration latency",
                         [r * b / t["after"] for r, t, b in zip(said, times[variant][1:], plain)]))
    said = latencies["flopsight"]["iteration"]
    print(ratio_line("flopsight, over the step it timed (before)",
                     [r * b / t["before"] for r, t, b in zip(said, times["flopsight"][1:], plain)]))
    print("the step's communication on rank 0 (what it waited for), medians (IQR):")
    timed = {v: [t["communication"] for t in times[v][1:]] for v in VARIANTS}
    for label, values in (("truth: the plain step, every collective timed", timed["plain"]),
                          ("the same on DeepSpeed's profiled step", timed["deepspeed"]),
                          ("the same on flopsight's profiled step", timed["flopsight"]),
                          ("flopsight's anatomy of its profiled step", waited)):
        lo, mid, hi = quartiles(values)
        print(f"  {label:45s} {mid * 1e3:6.2f} ms (IQR {lo * 1e3:.2f} .. {hi * 1e3:.2f})")
    print(f"  {'DeepSpeed report':45s} none (it has no communication line)")
    print("the step anatomy's shares of the profiled step, medians (IQR):")
    print(f"  {'deepspeed':45s} n/a (its report has no anatomy)")
    for part, values in shares.items():
        lo, mid, hi = quartiles(values)
        print(f"  {'flopsight ' + part:45s} {mid * 100:6.1f}% (IQR {lo * 100:.1f}% .. {hi * 100:.1f}%)")


if __name__ == "__main__":
    main()
