"""How long ``flopsight profile llama-3-70b --seq-len 2048`` takes, end to end and by stage.

    python benchmarks/cli_llama70b.py                 # 3 runs of the command, then one stage breakdown
    python benchmarks/cli_llama70b.py --runs 5 --seq-len 4096

1. The command as a user types it, in a fresh process each run (imports included): wall
   time of each run, the median, and the report's length. The model (70.55 B parameters,
   282 GB in float32) does not fit in memory, so the command picks the meta device itself.
2. One run in this process, by stage: importing flopsight and transformers, building the
   model on meta, the profiled forward (warm-up 0 on meta, as the command does), rendering
   the text report.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def command(seq_len: int) -> list[str]:
    return [sys.executable, "-m", "flopsight", "profile", "llama-3-70b", "--seq-len", str(seq_len)]


def end_to_end(runs: int, seq_len: int) -> None:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(command(seq_len), capture_output=True, text=True, check=True)
        times.append(time.perf_counter() - start)
    print(f"$ flopsight profile llama-3-70b --seq-len {seq_len}")
    print(f"  runs: {', '.join(f'{t:.2f} s' for t in times)}; median {statistics.median(times):.2f} s")
    print(f"  report: {done.stdout.count(chr(10))} lines; stderr: {done.stderr.strip()[:160]}...")


def by_stage(seq_len: int) -> None:
    stages = {}
    start = time.perf_counter()
    import torch
    import transformers  # noqa: F401

    from flopsight.cli import zoo
    from flopsight.cli.meta import meta_masks
    from flopsight.cli.run import run_forward
    from flopsight.options import ProfileOptions
    from flopsight.renderers.text_renderer import render_text

    stages["import torch, transformers, flopsight"] = time.perf_counter() - start
    start = time.perf_counter()
    entry = zoo.lookup("llama-3-70b")
    with torch.device("meta"):
        model = entry.build()
    specs = zoo.input_specs(entry.inputs, entry.config(), seq_len=seq_len)
    args, kwargs = zoo.make_inputs(specs, device="meta")
    stages["build on meta"] = time.perf_counter() - start
    start = time.perf_counter()
    with meta_masks():
        result = run_forward(model, args, kwargs, ProfileOptions(warm_up=0))
    stages["profiled forward"] = time.perf_counter() - start
    start = time.perf_counter()
    text = render_text(result, profile_step=0, top_modules=3)
    stages["render text report"] = time.perf_counter() - start
    print(f"\nin one process ({len(text.splitlines())} report lines, "
          f"{result.total.forward.macs / 1e12:.2f} TMACs):")
    for name, seconds in stages.items():
        print(f"  {name:<40} {seconds:6.2f} s")
    print(f"  {'total':<40} {sum(stages.values()):6.2f} s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seq-len", type=int, default=2048)
    opts = parser.parse_args(argv)
    end_to_end(opts.runs, opts.seq_len)
    by_stage(opts.seq_len)


if __name__ == "__main__":
    main()
