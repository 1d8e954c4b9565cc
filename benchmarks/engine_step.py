"""The DeepSpeed engine's profiled step: flopsight's drop-in against DeepSpeed's own profiler, in one run.

    DS_ACCELERATOR=cpu deepspeed --num_gpus 2 benchmarks/engine_step.py
    DS_ACCELERATOR=cpu deepspeed --num_gpus 2 benchmarks/engine_step.py --zero 3 --rounds 11

The seed user's ``Net`` (examples/zero_stages.py) in a DeepSpeed engine at the ZeRO stage
given, batch 8 per rank, with the engine's ``flops_profiler`` block at ``profile_step``
(its report written to a file, as a user would). Each round builds three engines in turns
and times their profiled step (``global_steps == profile_step``) on the wall clock: one with the block off (the
plain step), one with DeepSpeed's own profiler, one with ``flopsight.deepspeed.install()``
(memory at its default, on). Rank 0 prints, over the rounds, each profiled step's time over
the plain step's of the same round: the median and its interquartile range; and what
flopsight's profiled step spent, on rank 0, in the profile's start, its stop (of it, gathering
the other rank's result) and printing the report (of it, writing the file), medians over the
rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings

import deepspeed
import torch
import torch.distributed as dist

import flopsight.deepspeed
import flopsight.profiler
import flopsight.renderers.output
from flopsight.integrations.deepspeed.api import FlopsProfiler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from zero_stages import Net, remove_shared_buffers  # noqa: E402

VARIANTS = ("plain", "deepspeed", "flopsight")

#: flopsight's parts of the profiled step: (label, owner, attribute), each timed where it runs
PARTS = (("the profile's start", flopsight.profiler.Profiler, "start"),
         ("its stop", flopsight.profiler.Profiler, "stop"),
         ("  of it, gathering the other rank's result", flopsight.profiler, "with_ranks"),
         ("printing the report", FlopsProfiler, "print_model_profile"),
         ("  of it, writing the file", flopsight.renderers.output, "write_atomically"))
_SPENT: dict[str, float] = {}  # label -> seconds in the step being timed


def _timed(label: str, function):
    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            _SPENT[label] = _SPENT.get(label, 0.0) + time.perf_counter() - t0

    return timed


def profiled_step(variant: str, stage: int, profile_step: int, out: str) -> float:
    """Seconds of the engine's step at ``global_steps == profile_step`` (the profiled one, unless
    ``plain``): its step number ``profile_step + 1``."""
    torch.manual_seed(0)
    config = {"train_micro_batch_size_per_gpu": 8, "zero_optimization": {"stage": stage},
              "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
              "flops_profiler": {"enabled": variant != "plain", "profile_step": profile_step, "module_depth": -1,
                                 "top_modules": 1, "detailed": True, "output_file": out}}
    if variant == "flopsight":
        flopsight.deepspeed.install()
    try:
        engine, _, _, _ = deepspeed.initialize(model=Net(), config=config)
        loss_fn = torch.nn.CrossEntropyLoss()
        x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))
        seconds = 0.0
        for _ in range(profile_step + 1):
            dist.barrier()
            _SPENT.clear()  # what is left is the last (the profiled) step's
            t0 = time.perf_counter()
            engine.backward(loss_fn(engine(x), y))
            engine.step()
            seconds = time.perf_counter() - t0
        return seconds
    finally:
        if variant == "flopsight":
            flopsight.deepspeed.uninstall()


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return q[0], statistics.median(values), q[2]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zero", type=int, default=0, choices=range(4))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--profile-step", type=int, default=3)
    parser.add_argument("--local_rank", type=int, default=0, help=argparse.SUPPRESS)  # set by the launcher
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    parts: dict[str, list[float]] = {label: [] for label, _, _ in PARTS}
    originals = [(owner, name, getattr(owner, name)) for _, owner, name in PARTS]
    for (label, owner, name), (_, _, original) in zip(PARTS, originals):
        setattr(owner, name, _timed(label, original))
    try:
        with tempfile.TemporaryDirectory() as folder:
            for round_ in range(args.rounds + 1):  # the first round warms every path up
                for variant in VARIANTS:
                    out = os.path.join(folder, f"{variant}.txt")
                    times[variant].append(profiled_step(variant, args.zero, args.profile_step, out))
                    if variant == "flopsight" and round_:
                        for label in parts:
                            parts[label].append(_SPENT.get(label, 0.0))
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
    dist.barrier()
    remove_shared_buffers()
    if dist.get_rank() != 0:
        return
    plain = times["plain"][1:]
    q = quartiles(plain)
    print(f"ZeRO-{args.zero}, the seed's Net, 2 CPU ranks, {args.rounds} rounds, "
          f"the step at global_steps == {args.profile_step} of each engine")
    print(f"  plain step                 {q[1] * 1e3:8.2f} ms (IQR {q[0] * 1e3:.2f} .. {q[2] * 1e3:.2f})")
    for variant in VARIANTS[1:]:
        lo, mid, hi = quartiles([p / b for p, b in zip(times[variant][1:], plain)])
        print(f"  {variant + ' profiled step':26s} {mid:8.2f}x plain (IQR {lo:.2f}x .. {hi:.2f}x)")
    print("flopsight's profiled step on rank 0, medians:")
    for label, spent in parts.items():
        print(f"  {label:45s} {statistics.median(spent) * 1e3:6.2f} ms")


if __name__ == "__main__":
    main()
