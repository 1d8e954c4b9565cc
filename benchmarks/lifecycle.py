"""A whole profile around one forward, start to result, against DeepSpeed's, in one run.

    python benchmarks/lifecycle.py                          # BERT-base, GPT-2, LeNet b8, cells
    python benchmarks/lifecycle.py --models lenet --rounds 41

Each round times a plain forward, then the same forward with everything a user pays for a
profile around it, on each side: ``with flopsight.Profiler(model): model(x)`` and reading
``prof.result`` (start, the counted pass, stop, building the result), and DeepSpeed's
``start_profile()``, the forward, ``stop_profile()``, the totals read, ``end_profile()``. Grad
mode is on, as a user's forward usually runs, with one intra-op thread unless ``--threads``
says otherwise. The table gives, per side, the median over rounds of its time over the plain
forward's in the same round, and the spread (interquartile range).
"""

from __future__ import annotations

import argparse
import statistics

import torch
from overhead import build
from pairing import paired_rounds, whole_profiles

#: the table's name of each side of :func:`~pairing.whole_profiles`
LABELS = {"native": "flopsight, native", "python": "flopsight, python", "deepspeed": "DeepSpeed"}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert-base,gpt2,lenet,cells")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (default: 1)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.rounds} interleaved rounds, "
          "grad enabled\n")
    print("| model | side | whole profile / plain forward (median) | spread (IQR) |")
    print("|---|---|---:|---:|")
    for name in args.models.split(","):
        model, call_args, call_kwargs = build(name)
        runs = {LABELS[side]: run for side, run in
                whole_profiles(model, lambda: model(*call_args, **call_kwargs)).items()}
        for run in runs.values():  # warm every path (the native build, lazy imports)
            run()
        rounds = paired_rounds(lambda: model(*call_args, **call_kwargs), runs, args.rounds)
        for key, r in rounds.items():
            ratios = sorted(t / p for t, p in zip(r["time"], r["plain"]))
            q1, q3 = ratios[len(ratios) // 4], ratios[3 * len(ratios) // 4]
            print(f"| {name} | {key} | {statistics.median(ratios):.2f}x | {q1:.2f}-{q3:.2f} |", flush=True)


if __name__ == "__main__":
    main()
