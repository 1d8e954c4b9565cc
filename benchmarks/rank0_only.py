"""A profile on rank 0 alone under torch.distributed against the same profile in a single
process, DeepSpeed's ``get_model_profile`` beside it, in one run.

    python benchmarks/rank0_only.py                  # 5 launches of 2 gloo ranks, 21 rounds each
    python benchmarks/rank0_only.py --launches 2 --rounds 5

The pattern of DeepSpeed's docs: ``if rank == 0: profile``. Each launch (``torchrun``, 2 CPU
ranks; rank 1 waits at a barrier) times on rank 0 its first ``flopsight.profile(model, x)`` of
the process, then rounds of three, interleaved: the same call (rank 0 gathers: rank 1 never
announced a profile), the call with ``gather_timeout=None`` (what a single process runs) and
DeepSpeed's ``get_model_profile(model, args=[x], print_profile=False)``. Beside the launches,
as many single processes time their own first profile. The model: a 3-layer MLP, batch 32.
Issue 36 asks that rank 0 pay at most 50 ms more than a single process, from the first profile on.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _model():
    import torch

    torch.manual_seed(0)
    return (torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)),
            torch.randn(32, 256))


def child(rounds: int) -> None:
    """On each rank of a launch, or alone: rank 0 (or the single process) prints its times."""
    import torch.distributed as dist

    import flopsight

    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    found: dict = {}
    if rank == 0:
        model, x = _model()
        start = time.perf_counter()
        flopsight.profile(model, x)
        found["first"] = time.perf_counter() - start
        if distributed:
            from deepspeed.profiling.flops_profiler import get_model_profile

            sides = {"rank 0 alone": lambda: flopsight.profile(model, x),
                     "no gathering (a single process's path)": lambda: flopsight.profile(model, x, gather_timeout=None),
                     "DeepSpeed's get_model_profile": lambda: get_model_profile(model, args=[x], print_profile=False)}
            for name in sides:
                found[name] = []
            for _ in range(rounds):
                for name, run in sides.items():
                    start = time.perf_counter()
                    run()
                    found[name].append(time.perf_counter() - start)
        print(json.dumps(found), flush=True)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


def _run(argv: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, check=True)
    return json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))


def _ms(values: list[float]) -> str:
    return f"{1e3 * statistics.median(values):.1f} ms ({1e3 * min(values):.1f}-{1e3 * max(values):.1f})"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.rounds)
    me = str(Path(__file__).resolve())
    launches, singles = [], []
    for _ in range(args.launches):  # interleaved
        launches.append(_run(["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", me, "--child",
                              "--rounds", str(args.rounds)]))
        singles.append(_run([me, "--child"]))
    first_dist, first_single = [r["first"] for r in launches], [r["first"] for r in singles]
    print(f"{args.launches} launches of 2 gloo ranks (rank 1 never profiles), {args.rounds} interleaved rounds each; "
          "medians (min-max)\n")
    print("| what rank 0 runs | time |")
    print("|---|---:|")
    print(f"| first profile of the process, rank 0 alone | {_ms(first_dist)} |")
    print(f"| first profile of a single process | {_ms(first_single)} |")
    for name in [k for k in launches[0] if k != "first"]:
        print(f"| {name}, later profiles | {_ms([t for r in launches for t in r[name]])} |")
    alone = [statistics.median(r["rank 0 alone"]) for r in launches]
    single = [statistics.median(r["no gathering (a single process's path)"]) for r in launches]
    print(f"\nrank 0 alone over a single process's path: first profile "
          f"{1e3 * (statistics.median(first_dist) - statistics.median(first_single)):+.1f} ms, later ones "
          f"{1e3 * statistics.median(a - s for a, s in zip(alone, single)):+.1f} ms (issue 36: at most +50 ms)")


if __name__ == "__main__":
    main()
