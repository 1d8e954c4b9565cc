"""A process's first profile against its second, in fresh processes, flopsight beside DeepSpeed's
``get_model_profile`` and torch's ``FlopCounterMode``, in one run.

    python benchmarks/first_profile.py                  # 11 processes per side, interleaved
    python benchmarks/first_profile.py --processes 3    # a dry run

Each process imports torch, then the side's profiler, builds a 3-layer MLP (Linear(256, 512),
ReLU, Linear(512, 512), ReLU, Linear(512, 10), batch 32) and profiles one forward twice: what
the import costs beyond torch's, the first profile, the second, and the first's cost over the
second's (with the native build cached: run a profile once before). flopsight's profile is
``flopsight.profile(model, x)`` (a counted pass and a timed one) on each backend; DeepSpeed's
``get_model_profile(model, args=[x], print_profile=False)`` (a warm-up pass and a counted one);
torch's a forward inside ``FlopCounterMode(display=False)``. The table gives medians over the
processes (and the spread, min-max).

Then the command line: ``flopsight profile resnet-18 -o /dev/null`` in fresh processes, against
``python -c "import torch, flopsight"`` plus what the same command costs a process that has run
it once already (its passes, building and rendering, warm): issue 36 asks for at most 1.5x.
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

CHILD = """
import json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
side = sys.argv[1]
if side.startswith("flopsight"):
    import flopsight
elif side == "deepspeed":
    from deepspeed.profiling.flops_profiler import get_model_profile
else:
    from torch.utils.flop_counter import FlopCounterMode
t2 = time.perf_counter()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 10))
x = torch.randn(32, 256)

def once():
    start = time.perf_counter()
    if side.startswith("flopsight"):
        flopsight.profile(model, x, backend=side.partition("-")[2])
    elif side == "deepspeed":
        get_model_profile(model, args=[x], print_profile=False)
    else:
        with FlopCounterMode(display=False):
            model(x)
    return time.perf_counter() - start

first, second = once(), once()
print(json.dumps({"import": t2 - t1, "first": first, "second": second, "torch": t1 - t0}))
"""

CLI = ["-m", "flopsight", "profile", "resnet-18", "-o", os.devnull]
WARM_CLI = """
import os, sys, time
from flopsight.__main__ import main
main(["profile", "resnet-18", "-o", os.devnull])
start = time.perf_counter()
main(["profile", "resnet-18", "-o", os.devnull])
print(time.perf_counter() - start)
"""


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
            "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


def _child(side: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, side], capture_output=True, text=True, env=_env(), check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _wall(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *argv], capture_output=True, env=_env(), check=True)
    return time.perf_counter() - start


def _ms(values: list[float]) -> str:
    return f"{1e3 * statistics.median(values):.0f} ms ({1e3 * min(values):.0f}-{1e3 * max(values):.0f})"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=11)
    parser.add_argument("--sides", default="flopsight-auto,flopsight-python,deepspeed,flopcountermode")
    args = parser.parse_args(argv)
    sides = args.sides.split(",")
    _child(sides[0])  # the native build, compiled and checked if it was not
    runs: dict[str, list[dict]] = {side: [] for side in sides}
    for _ in range(args.processes):  # interleaved: the machine's load falls on every side alike
        for side in sides:
            runs[side].append(_child(side))
    print(f"{args.processes} fresh processes per side, interleaved; medians (min-max)\n")
    print("| side | import beyond torch | first profile | second profile | first - second |")
    print("|---|---:|---:|---:|---:|")
    for side, found in runs.items():
        column = {key: [r[key] for r in found] for key in ("import", "first", "second")}
        extra = [r["first"] - r["second"] for r in found]
        print(f"| {side} | {_ms(column['import'])} | {_ms(column['first'])} | {_ms(column['second'])} "
              f"| {_ms(extra)} |", flush=True)

    rounds = max(3, args.processes // 2)
    cli, imports, warm = [], [], []
    for _ in range(rounds):
        cli.append(_wall(CLI))
        imports.append(_wall(["-c", "import torch, flopsight"]))
        done = subprocess.run([sys.executable, "-c", WARM_CLI], capture_output=True, text=True, env=_env(), check=True)
        warm.append(float(done.stdout.strip().splitlines()[-1]))
    bound = statistics.median(imports) + statistics.median(warm)
    print(f"\n`flopsight profile resnet-18 -o /dev/null`, {rounds} fresh processes: {_ms(cli)}")
    print(f"`python -c \"import torch, flopsight\"`: {_ms(imports)}; the same command once more in a process "
          f"that ran it: {_ms(warm)}")
    print(f"wall time over (import + warm command): {statistics.median(cli) / bound:.2f}x (issue 36: at most 1.5x)")


if __name__ == "__main__":
    main()
