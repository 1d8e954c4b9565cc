"""The fixed cost of one profile: start, stop and building the result, beyond the model's run.

    python benchmarks/fixed_cost.py [--rounds 200]

A model of 10 modules (``Sequential`` of ten ``Linear(4, 4)``) on a 1x4 input runs in a few
microseconds, so what a profile of one forward costs beyond it is the profiler's fixed cost.
Each round runs a plain forward, then each variant, in turn (paired: the machine's drift
cancels); the table gives the median, over rounds, of each variant's time less its paired plain
forward's, and the spread (interquartile range):

* flopsight ``Profiler`` on the native and the Python backend (counts, times, builds the result)
* flopsight ``Profiler`` on the native backend, result built too (``prof.result.total``)
* DeepSpeed's ``FlopsProfiler`` start/stop/``get_total_macs``/end, if installed
"""

from __future__ import annotations

import argparse
import statistics

import torch
from pairing import paired_rounds, whole_profiles
from torch import nn

#: the table's name of each side of :func:`~pairing.whole_profiles`
LABELS = {"native": "flopsight Profiler, native", "python": "flopsight Profiler, python",
          "deepspeed": "DeepSpeed FlopsProfiler"}


def variants(model, x):
    def plain():
        model(x)

    return plain, {LABELS[side]: run for side, run in whole_profiles(model, plain).items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(10)]).eval()
    x = torch.ones(1, 4)
    plain, runs = variants(model, x)
    with torch.no_grad():
        for fn in [plain, *runs.values()]:  # warm every path (lazy imports, the native build)
            fn()
        rounds = paired_rounds(plain, runs, args.rounds)
    print(f"torch {torch.__version__}, 1 thread, {args.rounds} interleaved rounds; "
          f"plain forward {statistics.median(rounds[next(iter(rounds))]['plain']) * 1e6:.0f} us\n")
    print("| variant | cost beyond the forward (median) | spread (IQR) |")
    print("|---|---:|---:|")
    for key, r in rounds.items():
        extra = sorted((t - p) * 1e3 for t, p in zip(r["time"], r["plain"]))
        q1, q3 = extra[len(extra) // 4], extra[3 * len(extra) // 4]
        print(f"| {key} | {statistics.median(extra):.2f} ms | {q1:.2f}-{q3:.2f} ms |")


if __name__ == "__main__":
    main()
