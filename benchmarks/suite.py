"""Profiling overhead of flopsight, DeepSpeed and torch's FlopCounterMode over a model suite.

    python benchmarks/suite.py                                  # every model in models.py
    python benchmarks/suite.py --models tiny-mlp,lstm,bert-base --repeats 21
    python benchmarks/suite.py --json benchmarks/results.json   # also write every number

For each model (see ``benchmarks/models.py``), in one run and under ``torch.no_grad()``,
every round runs each variant right after a plain forward of its own (plain, flopsight gmp,
plain, DeepSpeed gmp, plain, ...), so slow drift of the machine cancels. A variant's ratio
is the median, over rounds (default 11), of its time divided by its paired plain forward:

* fs gmp     ``flopsight.get_model_profile(model, args, kwargs, warm_up=1,
             print_profile=False, as_string=False)``
* ds gmp     DeepSpeed's ``get_model_profile`` with the same arguments
* fs pass    ``with flopsight.Profiler(model): model(...)``, then ``prof.result``
* ds pass    DeepSpeed ``FlopsProfiler``: start_profile, forward, stop_profile,
             get_total_flops, end_profile
* torch pass one forward under ``torch.utils.flop_counter.FlopCounterMode(display=False)``

DeepSpeed is optional: without it its columns are left out. Output that the profilers print
or warn during timing is swallowed. A second table gives each model's forward MACs as
flopsight, DeepSpeed and FlopCounterMode (FLOPs / 2) count them, as a sanity check; they may
legitimately differ where a counter misses or miscounts ops.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # DeepSpeed otherwise probes for (and warns about) a GPU

import torch
from torch.utils.flop_counter import FlopCounterMode

import flopsight

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import MODELS, build  # noqa: E402
from pairing import load_deepspeed, paired_rounds, quiet  # noqa: E402

VARIANTS = ["fs gmp", "ds gmp", "fs pass", "ds pass", "torch pass"]


def variants(model, args, kwargs, ds) -> dict[str, Callable[[], object]]:
    """name -> callable running that variant once; gmp variants return (flops, macs, params)."""

    def plain():
        return model(*args, **kwargs)

    def fs_gmp():
        return flopsight.get_model_profile(
            model, args=list(args), kwargs=kwargs, warm_up=1, print_profile=False, as_string=False
        )

    def fs_pass():
        with flopsight.Profiler(model) as prof:
            model(*args, **kwargs)
        return prof.result

    def torch_pass():
        with FlopCounterMode(display=False) as counter:
            model(*args, **kwargs)
        return counter.get_total_flops()

    out = {"plain": plain, "fs gmp": fs_gmp, "fs pass": fs_pass, "torch pass": torch_pass}
    if ds is not None:
        ds_get_model_profile, FlopsProfiler = ds

        def ds_gmp():
            return ds_get_model_profile(
                model, args=list(args), kwargs=kwargs, warm_up=1, print_profile=False, as_string=False
            )

        def ds_pass():
            prof = FlopsProfiler(model)
            prof.start_profile()
            model(*args, **kwargs)
            prof.stop_profile()
            flops = prof.get_total_flops()
            prof.end_profile()
            return flops

        out["ds gmp"], out["ds pass"] = ds_gmp, ds_pass
    return {k: out[k] for k in ["plain", *VARIANTS] if k in out}


def counted_macs(runs: dict[str, Callable[[], object]]) -> dict[str, int | None]:
    """Forward MACs as each counter reports them (one call each; also warms every path)."""
    macs = {"flopsight": runs["fs gmp"]()[1], "torch (flops/2)": runs["torch pass"]() // 2}
    macs["deepspeed"] = runs["ds gmp"]()[1] if "ds gmp" in runs else None
    for key in ("plain", "fs pass", "ds pass"):
        if key in runs:
            runs[key]()
    return macs


def measure(name: str, repeats: int, ds) -> dict:
    model, args, kwargs = build(name)
    runs = variants(model, args, kwargs, ds)
    load_before = os.getloadavg()[0]
    patched = (torch.nn.functional.linear, torch.matmul, torch.Tensor.__matmul__)
    with torch.no_grad(), quiet():
        macs = counted_macs(runs)
        timings = paired_rounds(runs["plain"], {k: fn for k, fn in runs.items() if k != "plain"}, repeats)
    if patched != (torch.nn.functional.linear, torch.matmul, torch.Tensor.__matmul__):
        print(f"warning: {name}: torch functions are still patched after profiling")
    plain_all = [p for t in timings.values() for p in t["plain"]]
    result = {
        "params": sum(p.numel() for p in model.parameters()),
        "plain_ms": statistics.median(plain_all) * 1e3,
        "macs": macs,
        "loadavg_1min": [load_before, os.getloadavg()[0]],  # other processes on the machine skew timings
        "variants": {},
    }
    for key, t in timings.items():
        result["variants"][key] = {
            "median_ms": statistics.median(t["time"]) * 1e3,
            "ratio": statistics.median(v / p for v, p in zip(t["time"], t["plain"])),
            "times_s": t["time"],
            "paired_plain_s": t["plain"],
        }
    return result


def fmt_macs(value) -> str:
    return "-" if value is None else f"{value / 1e6:,.2f} M"


def print_tables(results: dict[str, dict], keys: list[str]) -> None:
    print("| model | plain ms | " + " | ".join(keys) + " | load (1 min) |")
    print("|---|---:|" + "---:|" * len(keys) + "---:|")
    for name, r in results.items():
        cells = " | ".join(f"{r['variants'][k]['ratio']:.2f}x" for k in keys)
        load = "-".join(f"{x:.1f}" for x in r["loadavg_1min"])
        print(f"| {name} | {r['plain_ms']:.2f} | {cells} | {load} |")
    print()
    for k in keys:
        med = statistics.median(r["variants"][k]["ratio"] for r in results.values())
        print(f"median ratio over {len(results)} models, {k}: {med:.2f}x")
    for fs, ds in (("fs gmp", "ds gmp"), ("fs pass", "ds pass")):
        if ds in keys:
            wins = [n for n, r in results.items() if r["variants"][fs]["ratio"] <= r["variants"][ds]["ratio"]]
            label = "get_model_profile" if fs == "fs gmp" else "one profiled pass"
            print(f"flopsight {label} <= DeepSpeed on {len(wins)} of {len(results)} models")
            if len(wins) < len(results):
                print("  (not on: " + ", ".join(n for n in results if n not in wins) + ")")
    print("\n| model | flopsight MACs | DeepSpeed MACs | FlopCounterMode FLOPs/2 | flopsight / DeepSpeed |")
    print("|---|---:|---:|---:|---:|")
    for name, r in results.items():
        m = r["macs"]
        rel = f"{m['flopsight'] / m['deepspeed']:.3f}" if m["deepspeed"] else "-"
        print(f"| {name} | {fmt_macs(m['flopsight'])} | {fmt_macs(m['deepspeed'])} | "
              f"{fmt_macs(m['torch (flops/2)'])} | {rel} |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated names from models.py")
    parser.add_argument("--repeats", type=int, default=11, help="interleaved rounds per model")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", metavar="PATH", help="write every number (raw times included) here")
    opts = parser.parse_args(argv)
    torch.set_num_threads(opts.threads)
    names = [n for n in opts.models.split(",") if n]
    ds = load_deepspeed()
    keys = [k for k in VARIANTS if ds is not None or not k.startswith("ds")]
    print(f"flopsight from {os.path.dirname(flopsight.__file__)}")
    print(f"torch {torch.__version__}, flopsight {flopsight.__version__}, {torch.get_num_threads()} threads, "
          f"{opts.repeats} interleaved rounds; ratio = median of (variant / its paired plain forward)\n")  # fmt: skip
    results = {}
    for name in names:
        t0 = time.perf_counter()
        results[name] = measure(name, opts.repeats, ds)
        print(f"  measured {name} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    print_tables(results, keys)
    if opts.json:
        meta = {
            "torch": torch.__version__,
            "flopsight": flopsight.__version__,
            "flopsight_file": flopsight.__file__,
            "deepspeed": _deepspeed_version(ds),
            "threads": torch.get_num_threads(),
            "repeats": opts.repeats,
            "machine": platform.platform(),
            "cpus": os.cpu_count(),
        }
        with open(opts.json, "w") as f:
            json.dump({"meta": meta, "models": results}, f, indent=1)
        print(f"\nwrote {opts.json}")


def _deepspeed_version(ds) -> str | None:
    if ds is None:
        return None
    import deepspeed

    return deepspeed.__version__


if __name__ == "__main__":
    main()
