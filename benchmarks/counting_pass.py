"""One counting pass against a plain forward: the model's forward while a profile runs.

    python benchmarks/counting_pass.py                       # BERT-base, GPT-2, LeNet, cells
    python benchmarks/counting_pass.py --models lenet --rounds 51 --threads 1
    python benchmarks/counting_pass.py --breakdown     # also what each part of the native side costs
    python benchmarks/counting_pass.py --models small-ops --threads 1   # 4,000 one-element adds

Each round times a plain forward, then the same forward inside a running profile on each
side (flopsight's native and Python backends, DeepSpeed's profiler): the profile is started
before the timed call and stopped after it, so the figure is what counting costs the pass;
what a profile costs on its own (start, stop, building the result) is
``benchmarks/fixed_cost.py``'s. The table gives, per side, the median over rounds of its time
over the plain forward's in the same round, and the spread (interquartile range); and the
host time the pass added per op the forward runs, free ones included: (profiled - plain) /
ops, the proxy for what a launch-bound GPU would idle per op.
Everything runs under ``torch.no_grad()``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch
from overhead import build
from pairing import load_deepspeed

import flopsight
from flopsight.capture.backends.native.calls import NativeCalls
from flopsight.capture.sources.functions import FunctionInterceptor

#: --breakdown: the native side with a part of the profile taken away (its counts are then
#: wrong; only its cost is of interest): the function mode, the module hooks, or both
WITHOUT = {
    "native, no function mode": ("functions",),
    "native, no module hooks": ("modules",),
    "native, neither": ("functions", "modules"),
}


@contextlib.contextmanager
def without(parts: tuple[str, ...]):
    """The sources named by ``parts`` start nothing while this runs."""
    classes = {"functions": FunctionInterceptor, "modules": NativeCalls}
    saved = {name: classes[name].start for name in parts}
    for name in parts:
        classes[name].start = lambda self, ctx: None
    try:
        yield
    finally:
        for name, start in saved.items():
            classes[name].start = start


def sides(model, breakdown: bool = False):
    """name -> (start, stop) around the timed forward."""
    out = {}
    for backend, memory in (("native", False), ("native", True), ("python", False)):
        def start(backend=backend, memory=memory):
            prof = flopsight.Profiler(model, backend=backend, memory=memory)
            prof.start()
            return prof

        out[f"flopsight, {backend}" + (", memory=True" if memory else "")] = (start, lambda prof: prof.stop())
    for name, parts in WITHOUT.items() if breakdown else ():
        def start_without(parts=parts):
            with without(parts):
                prof = flopsight.Profiler(model, backend="native")
                prof.start()
            return prof

        out[f"flopsight, {name}"] = (start_without, lambda prof: prof.stop())
    ds = load_deepspeed()
    if ds is not None:
        FlopsProfiler = ds[1]

        def ds_start():
            prof = FlopsProfiler(model)
            prof.start_profile()
            return prof

        def ds_stop(prof):
            prof.stop_profile()
            prof.end_profile()

        out["DeepSpeed"] = (ds_start, ds_stop)
    return out


def ops_run(model, args, kwargs) -> int:
    """How many aten ops one forward dispatches, free ones (views) included: the calls the
    Python backend's dispatch mode sees (the native recorder records only the ops that cost)."""
    with flopsight.Profiler(model, backend="python") as prof:
        model(*args, **kwargs)
    return sum(op.calls for op in prof.result.ops().values())


def measure(name: str, rounds: int, breakdown: bool = False) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """(side -> the ratio of each round, side -> the host seconds the pass added per op the
    forward runs: (counted - plain) / ops)."""
    model, args, kwargs = build(name)
    runs = sides(model, breakdown)
    ratios: dict[str, list[float]] = {k: [] for k in runs}
    per_op: dict[str, list[float]] = {k: [] for k in runs}

    def timed() -> float:
        t0 = time.perf_counter()
        model(*args, **kwargs)
        return time.perf_counter() - t0

    with torch.no_grad():
        for start, stop in runs.values():  # warm every path (the native build, lazy imports)
            prof = start()
            timed()
            stop(prof)
        timed()
        ops = ops_run(model, args, kwargs)
        for _ in range(rounds):
            for key, (start, stop) in runs.items():
                plain = timed()
                prof = start()
                try:
                    counted = timed()
                finally:
                    stop(prof)
                ratios[key].append(counted / plain)
                per_op[key].append((counted - plain) / ops)
    return ratios, per_op


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert-base,gpt2,lenet,cells")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads (default: torch's)")
    parser.add_argument("--breakdown", action="store_true",
                        help="also the native side without its function mode, its module hooks, or both")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.rounds} interleaved rounds\n")
    print("| model | side | pass / plain forward (median) | spread (IQR) | host time added per op (median) |")
    print("|---|---|---:|---:|---:|")
    for name in args.models.split(","):
        ratios, per_op = measure(name, args.rounds, args.breakdown)
        for key, r in ratios.items():
            r = sorted(r)
            q1, q3 = r[len(r) // 4], r[3 * len(r) // 4]
            added = f"{statistics.median(per_op[key]) * 1e6:.2f} us"
            print(f"| {name} | {key} | {statistics.median(r):.2f}x | {q1:.2f}-{q3:.2f} | {added} |", flush=True)


if __name__ == "__main__":
    main()
