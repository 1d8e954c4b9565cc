"""What profiling a tensor- or pipeline-parallel training step costs, beside a data-parallel one.

    torchrun --standalone --nproc_per_node 2 benchmarks/parallel_step.py

The plans of ``examples/parallel_plans.py``, its GPT-style stack of 4 blocks at the size of
``benchmarks/distributed_step.py``'s DDP model (d 256, 8 heads, a global batch of 8 x 64 tokens):
data (DDP), tensor (``parallelize_module`` over both ranks) and pipeline (two ``Schedule1F1B``
stages, 4 micro-batches). Each round runs, per plan, an un-profiled step and
then the same step under each profiler, each right after an un-profiled step of its own
(:func:`pairing.paired_rounds`): ``flopsight.Profiler(module, optimizer=...)`` on each backend,
and DeepSpeed's ``FlopsProfiler`` (start, stop, its totals read, end) where it imports. Rank 0
prints the median over rounds of each profiled step over its un-profiled one, and each rank's
CPU time added (its thread's: the profiler's own work, without the waiting or most of the VM's
noise). The target: a profiled tensor- or pipeline-parallel step within the data-parallel
step's budget, 1.15x.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import warnings

import torch
import torch.distributed as dist

import flopsight

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
import parallel_plans  # noqa: E402
from pairing import load_deepspeed, paired_rounds, quiet  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21, help="paired rounds (default: %(default)s)")
    parser.add_argument("--width", type=int, default=256, help="the model's d (default: %(default)s)")
    parser.add_argument("--seq-len", type=int, default=64, help="positions per sequence (default: %(default)s)")
    args = parser.parse_args(argv)
    # the example's sizes are its module's constants, read when its modules are built and run
    parallel_plans.D, parallel_plans.SEQ, parallel_plans.HEADS = args.width, args.seq_len, 8
    batch, d, seq = parallel_plans.BATCH, args.width, args.seq_len
    warnings.filterwarnings("ignore")
    dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    x, target = torch.randn(batch, seq, d), torch.randn(batch, seq, d)
    ds = load_deepspeed()
    rows = []
    for plan in parallel_plans.plans(world, rank):
        if plan.name == "expert":
            continue

        def plain(plan=plan):
            dist.barrier()
            plan.step(x, target)

        def profiled(backend: str, plan=plan):
            def run():
                dist.barrier()
                with flopsight.Profiler(plan.module, optimizer=plan.optimizer, backend=backend):
                    plan.step(x, target)

            return run

        variants = {"flopsight (native)": profiled("native"), "flopsight (python)": profiled("python")}
        if ds is not None:
            def deepspeed(plan=plan):
                dist.barrier()
                with quiet():
                    prof = ds[1](plan.module)
                    prof.start_profile()
                    plan.step(x, target)
                    prof.stop_profile()
                    prof.get_total_macs()
                    prof.end_profile()

            variants["DeepSpeed's FlopsProfiler"] = deepspeed
        for _ in range(3):
            plain()
        runs = paired_rounds(plain, variants, args.rounds)
        for name, o in runs.items():
            rows.append((plan.name, name, statistics.median(o["plain"]), statistics.median(o["time"]),
                         statistics.median(t / p for t, p in zip(o["time"], o["plain"])),
                         statistics.median(c - p for c, p in zip(o["cpu"], o["plain_cpu"]))))
    # each rank's CPU seconds added (its profiler's own work: no waiting, little of the VM's noise)
    added = [None] * world
    dist.all_gather_object(added, [row[5] for row in rows])
    if rank == 0:
        print(f"torch {torch.__version__}, {world} gloo ranks, {args.rounds} paired rounds, "
              f"examples/parallel_plans.py's model at d {d}, batch {batch} x {seq}")
        print("| plan | profiler | un-profiled step | profiled step | x un-profiled (median of rounds) "
              "| CPU added per rank (median) |")
        print("|---|---|---:|---:|---:|---:|")
        for i, (plan_name, name, plain_s, time_s, ratio, _) in enumerate(rows):
            cpu = " / ".join(f"{ranks[i] * 1e3:.1f}" for ranks in added)
            print(f"| {plan_name} | {name} | {plain_s * 1e3:.1f} ms | {time_s * 1e3:.1f} ms | {ratio:.2f}x "
                  f"| {cpu} ms |")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
