"""Profiling a Llama-3-70B-shaped model on the meta device: overhead, memory, and where it goes.

    python benchmarks/meta_llama70b.py                    # full run (timings, RSS, analysis)
    python benchmarks/meta_llama70b.py --layers 4 --rounds 3 --no-rss    # quick check
    python benchmarks/meta_llama70b.py --json benchmarks/meta_llama70b.json

The model (hidden 8192, 80 layers, 64 heads, 8 KV heads, FFN 28672, vocab 128256) is built
by ``transformers.LlamaForCausalLM`` under ``torch.device("meta")`` and called with input
ids of shape (1, 2048) on meta and a ready 4D causal mask (transformers' own mask helpers
call ``.item()``, which meta tensors refuse), under ``torch.no_grad()``; no memory is allocated for
weights or activations, so every variant measures pure per-op Python/dispatcher cost.

1. Timing. In each of ``--rounds`` rounds (default 5) every variant runs right after a
   plain forward of its own; the ratio is the median of the paired ratios:

   * plain forward        ``model(ids)``
   * empty dispatch mode  a TorchDispatchMode whose ``__torch_dispatch__`` only calls
                          ``func(*args, **kwargs)``: the floor for any dispatch-mode profiler
   * flopsight profile    ``flopsight.profile(model, (ids,), warm_up=0)``
   * flopsight + report   ``flopsight.get_model_profile(..., warm_up=0, print_profile=True,
                          output_file=<tmp>)``: counts and renders the text report
   * torch FlopCounterMode one forward under ``FlopCounterMode(display=False)``

2. Peak RSS. Each variant runs once in a fresh subprocess (``--rss-child VARIANT``) that
   builds the model, runs it and reports ``ru_maxrss``; "build only" is the same without a
   forward, so the difference is what the variant itself costs.

3. Analysis of the empty mode's extra cost. cProfile of one plain and one empty-mode
   forward, grouped by where the time is spent (torch._refs, torch._prims,
   torch._prims_common, torch._decomp, torch._meta_registrations, ...), and an op census
   under the empty mode: for every aten op that reaches the mode, its calls, its time
   inside the mode, whether its Meta kernel is C++ or Python (``_dispatch_dump``), and
   which Python reference/decomposition frames its call runs through.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from collections.abc import Callable

import torch
from pairing import paired_rounds
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

LLAMA_70B = dict(
    hidden_size=8192,
    num_hidden_layers=80,
    num_attention_heads=64,
    num_key_value_heads=8,
    intermediate_size=28672,
    vocab_size=128256,
    max_position_embeddings=8192,
    rope_theta=500000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
)

# where Python frames that are not the model's own code come from (first match wins)
CATEGORIES = [
    ("torch/_refs", "torch._refs"),
    ("torch/_prims_common", "torch._prims_common"),
    ("torch/_prims", "torch._prims"),
    ("torch/_decomp", "torch._decomp"),
    ("torch/_meta_registrations", "torch._meta_registrations"),
    ("torch/_library", "torch._library (fake/meta kernel wrappers)"),
    ("torch/_dynamo", "torch._dynamo (disable() wrappers of Python kernels)"),
    ("torch/fx/experimental/symbolic_shapes", "torch.fx symbolic_shapes (guard_or_false, sym_eq)"),
    ("torch/__init__.py", "torch/__init__ (torch._check)"),
    ("torch/_ops.py", "torch._ops"),
    ("torch/utils/_python_dispatch", "torch.utils._python_dispatch"),
    ("meta_llama70b.py", "the empty mode (this script)"),
    ("transformers/", "transformers"),
    ("torch/nn/", "torch.nn"),
    ("torch/", "other torch Python"),
    ("<built-in", "builtins / C functions"),
    ("{", "builtins / C functions"),
]
# categories that belong to running an op's Python meta kernel (reference / decomposition)
PYTHON_META = (
    "torch._refs",
    "torch._prims",
    "torch._prims_common",
    "torch._decomp",
    "torch._meta_registrations",
    "torch._library (fake/meta kernel wrappers)",
    "torch._dynamo (disable() wrappers of Python kernels)",
    "torch.fx symbolic_shapes (guard_or_false, sym_eq)",
    "torch/__init__ (torch._check)",
)


class EmptyMode(TorchDispatchMode):
    """Intercepts every aten op and does nothing but run it: the floor for a dispatch-mode profiler."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class CensusMode(TorchDispatchMode):
    """Like EmptyMode, but counts and times every op, and cProfiles the first call of each."""

    def __init__(self):
        super().__init__()
        self.calls: dict = defaultdict(int)
        self.seconds: dict = defaultdict(float)
        self.frames: dict = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in self.frames:
            prof = cProfile.Profile()
            prof.enable()
            out = func(*args, **kwargs)
            prof.disable()
            self.frames[func] = python_frames(prof)
            return out
        t0 = time.perf_counter()
        out = func(*args, **kwargs)
        self.seconds[func] += time.perf_counter() - t0
        self.calls[func] += 1
        return out


# --------------------------------------------------------------------------- model and variants


def build(layers: int, seq: int):
    import transformers

    config = transformers.LlamaConfig(**{**LLAMA_70B, "num_hidden_layers": layers})
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.zeros(1, seq, dtype=torch.long, device="meta")
    # transformers' mask helpers call .item() (fails on meta) unless handed a ready 4D mask
    mask = torch.ones(1, 1, seq, seq, dtype=torch.bool, device="meta").tril()
    return model, ids, {"attention_mask": mask, "use_cache": False}


def variants(model, ids, kwargs: dict, report_path: str) -> dict[str, Callable[[], object]]:
    import flopsight

    def plain():
        return model(ids, **kwargs)

    def empty_mode():
        with EmptyMode():
            return model(ids, **kwargs)

    def fs_profile():
        return flopsight.profile(model, (ids,), kwargs, warm_up=0)

    def fs_report():
        return flopsight.get_model_profile(
            model, args=[ids], kwargs=kwargs, warm_up=0, print_profile=True, output_file=report_path
        )

    def torch_counter():
        with FlopCounterMode(display=False) as counter:
            model(ids, **kwargs)
        return counter.get_total_flops()

    return {
        "plain forward": plain,
        "empty dispatch mode": empty_mode,
        "torch FlopCounterMode": torch_counter,
        "flopsight profile(warm_up=0)": fs_profile,
        "flopsight get_model_profile + text report": fs_report,
    }


@contextlib.contextmanager
def quiet():
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# --------------------------------------------------------------------------- 1. timing


def time_variants(runs: dict[str, Callable[[], object]], rounds: int) -> dict[str, dict]:
    for fn in runs.values():  # warm every path once
        fn()
    times = paired_rounds(runs["plain forward"], runs, rounds)
    return {
        k: {
            "median_s": statistics.median(t["time"]),
            "ratio": statistics.median(v / p for v, p in zip(t["time"], t["plain"])),
            "times_s": t["time"],
            "paired_plain_s": t["plain"],
        }
        for k, t in times.items()
    }


# --------------------------------------------------------------------------- 2. peak RSS


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def rss_child(variant: str, layers: int, seq: int) -> None:
    """Runs in a fresh process: build, run ``variant`` once (unless "build only"), print peak RSS.

    After building, the kernel's peak-RSS mark is reset (``echo 5 > /proc/self/clear_refs``),
    so ``ru_maxrss`` is the peak *during the variant*; without the reset, the transient peak of
    importing torch/transformers and building the model would hide it.
    """
    model, ids, kwargs = build(layers, seq)
    build_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        reset = True
    except OSError:
        reset = False
    before = _status_kb("VmRSS")
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad(), quiet():
        if variant != "build only":
            variants(model, ids, kwargs, os.path.join(tmp, "report.txt"))[variant]()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"variant": variant, "ru_maxrss_kb": peak, "build_peak_kb": build_peak,
                      "rss_before_kb": before, "peak_reset": reset}))  # fmt: skip


def measure_rss(names: list[str], layers: int, seq: int) -> dict[str, dict]:
    out = {}
    for name in ["build only", *names]:
        cmd = [sys.executable, os.path.abspath(__file__), "--rss-child", name, "--layers", str(layers),
               "--seq", str(seq)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        out[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


# --------------------------------------------------------------------------- 3. analysis


def category(filename: str) -> str:
    for needle, label in CATEGORIES:
        if needle in filename:
            return label
    return "other Python"


def python_frames(prof: cProfile.Profile, calls: bool = False) -> dict[str, float]:
    """tottime (or, with ``calls``, number of calls) by category of the functions cProfile saw."""
    out: dict[str, float] = defaultdict(float)
    for (filename, _, _), (_, ncalls, tottime, _, _) in pstats.Stats(prof).stats.items():
        out[category(filename)] += ncalls if calls else tottime
    return dict(out)


def cprofile(fn: Callable[[], object], repeats: int = 3) -> tuple[float, dict, dict, pstats.Stats]:
    """Wall time, tottime by category, calls by category, and stats of ``fn`` under cProfile.

    Times are the minimum over ``repeats`` runs (per category), which filters out time
    stolen by other processes; call counts are exact.
    """
    walls, cats = [], []
    for _ in range(repeats):
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        fn()
        prof.disable()
        walls.append(time.perf_counter() - t0)
        cats.append(python_frames(prof))
    best = {k: min(c.get(k, 0.0) for c in cats) for k in set().union(*cats)}
    return min(walls), best, python_frames(prof, calls=True), pstats.Stats(prof)


def meta_kernel_kind(name: str) -> str:
    """How the dispatcher runs ``name`` on meta tensors, from ``torch._C._dispatch_dump``.

    ``torch._meta_registrations.activate_meta()`` registers Python meta kernels (refs and
    decompositions) at ``import torch``; for many ops they *replace* a C++ meta kernel,
    which the dump then lists as "Meta (inactive)".
    """
    lines = torch._C._dispatch_dump(name).splitlines()
    active = next((ln for ln in lines if ln.startswith("Meta:")), "")
    inactive = any(ln.startswith("Meta (inactive)") for ln in lines)
    if active:
        if ".py" not in active:
            return "C++"
        return "Python, overriding C++" if inactive else "Python only"
    for key in ("CompositeExplicitAutogradNonFunctional", "CompositeExplicitAutograd"):
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, key):
            return f"no Meta ({key})"
    return "none"


def python_meta_table() -> dict:
    """Every op ``activate_meta()`` registers a Python meta kernel for, with that kernel."""
    from torch._decomp import global_decomposition_table

    table: dict = {}
    for typ in ("meta", "post_autograd", "pre_autograd"):  # activate_meta's precedence
        for op, fn in global_decomposition_table[typ].items():
            table.setdefault(op, fn)
    return {op: fn for op, fn in table.items() if isinstance(op, torch._ops.OpOverload)}


def restore_cpp_meta_kernels() -> tuple[int, int]:
    """Process-wide: drop the Python meta kernels that override a C++ one, keep the others.

    Destroys ``torch._meta_registrations``' library and re-registers only the Python meta
    kernels of aten ops that have no C++ meta kernel. Returns (restored, kept). An
    experiment: private API, and FakeTensor/torch.compile rely on the Python kernels.
    """
    import torch._meta_registrations as registrations

    keep = {}
    restored = 0
    for op, fn in python_meta_table().items():
        dump = torch._C._dispatch_dump(op.name())
        if "_meta_registrations.py" not in dump:
            continue
        if "Meta (inactive)" in dump:
            restored += 1
        else:
            keep[op] = fn
    registrations._meta_lib_dont_use_me_use_register_meta._destroy()
    lib = torch.library.Library("aten", "IMPL", "Meta")
    for op, fn in keep.items():
        if op.namespace == "aten":
            lib.impl(op, fn)
    restore_cpp_meta_kernels.lib = lib  # keep the registrations alive
    return restored, len(keep)


def cpp_meta_child(layers: int, seq: int, rounds: int) -> None:
    """Runs in a fresh process: plain and empty-mode forward with Python, then C++ meta kernels."""
    model, ids, kwargs = build(layers, seq)

    def plain():
        model(ids, **kwargs)

    def empty():
        with EmptyMode():
            model(ids, **kwargs)

    def medians() -> dict:
        return {k: v["median_s"]
                for k, v in time_variants({"plain forward": plain, "empty dispatch mode": empty}, rounds).items()}

    with torch.no_grad():
        before = medians()
        t0 = time.perf_counter()
        restored, kept = restore_cpp_meta_kernels()
        swap_s = time.perf_counter() - t0
        after = medians()
    print(json.dumps({"python_meta": before, "cpp_meta": after, "restored": restored, "kept": kept, "swap_s": swap_s}))


def op_census(model, ids, kwargs) -> list[dict]:
    mode = CensusMode()
    with mode:
        model(ids, **kwargs)
    rows = []
    for func, frames in mode.frames.items():
        name = func._schema.name + (f".{func._overloadname}" if func._overloadname != "default" else "")
        py = {k: v for k, v in frames.items() if k in PYTHON_META}
        rows.append(
            {
                "op": name,
                "calls": mode.calls[func] + 1,
                "seconds": mode.seconds[func] * (mode.calls[func] + 1) / max(mode.calls[func], 1),
                "meta_kernel": meta_kernel_kind(func._schema.name if func._overloadname == "default" else name),
                "python_meta_frames": sorted(py, key=py.get, reverse=True),
                "first_call_tottime_by_category": frames,
                "python_meta_share_of_first_call": sum(py.values()) / max(sum(frames.values()), 1e-12),
                "has_py_kernels": sorted(str(k) for k in func.py_kernels),
                "in_meta_table": func in torch._decomp.meta_table,
            }
        )
    return sorted(rows, key=lambda r: r["seconds"], reverse=True)


def measure_cpp_meta(layers: int, seq: int, rounds: int) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--cpp-meta-child", "--layers", str(layers), "--seq", str(seq),
           "--rounds", str(rounds)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def analyse(model, ids, kwargs) -> dict:
    plain_s, plain_cat, plain_calls, _ = cprofile(lambda: model(ids, **kwargs))

    def empty():
        with EmptyMode():
            model(ids, **kwargs)

    empty_s, empty_cat, empty_calls, empty_stats = cprofile(empty)
    buf = io.StringIO()
    empty_stats.stream = buf
    empty_stats.sort_stats("tottime").print_stats(25)
    return {
        "cprofile_plain_s": plain_s,
        "cprofile_empty_mode_s": empty_s,
        "plain_tottime_by_category": plain_cat,
        "empty_mode_tottime_by_category": empty_cat,
        "plain_calls_by_category": plain_calls,
        "empty_mode_calls_by_category": empty_calls,
        "empty_mode_top25": buf.getvalue(),
        "ops": op_census(model, ids, kwargs),
    }


# --------------------------------------------------------------------------- output


def print_timing(timing: dict, rss: dict | None) -> None:
    print("| variant | median | x plain forward | peak RSS during it | over RSS before it |")
    print("|---|---:|---:|---:|---:|")
    if rss:
        b = rss["build only"]
        print(f"| import + build only | | | {b['build_peak_kb'] / 1024:.0f} MiB | |")
    for key, t in timing.items():
        mem = " | "
        if rss:
            r = rss[key]
            mem = f"{r['ru_maxrss_kb'] / 1024:.0f} MiB | {(r['ru_maxrss_kb'] - r['rss_before_kb']) / 1024:+.1f} MiB"
        print(f"| {key} | {t['median_s'] * 1e3:.0f} ms | {t['ratio']:.2f}x | {mem} |")
    if rss and not rss["build only"]["peak_reset"]:
        print("\n(peak RSS could not be reset after building: peaks include import and build)")


def print_analysis(a: dict) -> None:
    print(f"\ncProfile (min of 3 calls each, profiler on): plain {a['cprofile_plain_s'] * 1e3:.0f} ms, "
          f"empty mode {a['cprofile_empty_mode_s'] * 1e3:.0f} ms")  # fmt: skip
    cats = sorted(set(a["plain_tottime_by_category"]) | set(a["empty_mode_tottime_by_category"]),
                  key=lambda c: -a["empty_mode_tottime_by_category"].get(c, 0))  # fmt: skip
    total_e = sum(a["empty_mode_tottime_by_category"].values())
    print("\n| where | plain tottime | empty-mode tottime | share of empty mode | plain calls | empty-mode calls |")
    print("|---|---:|---:|---:|---:|---:|")
    for c in cats:
        p, e = a["plain_tottime_by_category"].get(c, 0), a["empty_mode_tottime_by_category"].get(c, 0)
        pc, ec = a["plain_calls_by_category"].get(c, 0), a["empty_mode_calls_by_category"].get(c, 0)
        print(f"| {c} | {p * 1e3:.1f} ms | {e * 1e3:.1f} ms | {e / total_e:.1%} | {pc} | {ec} |")
    meta_p = sum(v for k, v in a["plain_tottime_by_category"].items() if k in PYTHON_META)
    meta_e = sum(v for k, v in a["empty_mode_tottime_by_category"].items() if k in PYTHON_META)
    print(f"\nPython meta-kernel frames (refs, prims, decomp, meta registrations and their wrappers): "
          f"{meta_p * 1e3:.0f} ms of plain ({meta_p / sum(a['plain_tottime_by_category'].values()):.0%}), "
          f"{meta_e * 1e3:.0f} ms of empty mode ({meta_e / total_e:.0%}), tottime under cProfile")  # fmt: skip
    ops = a["ops"]
    total = sum(r["seconds"] for r in ops)
    py_ops = [r for r in ops if r["python_meta_frames"]]
    py_total = sum(r["seconds"] for r in py_ops)
    print(f"\nop census under the empty mode: {len(ops)} distinct ops, {sum(r['calls'] for r in ops)} calls, "
          f"{total * 1e3:.0f} ms inside func(); ops whose call runs Python reference/decomposition/meta code: "
          f"{len(py_ops)}, {py_total * 1e3:.0f} ms ({py_total / max(total, 1e-12):.0%})")  # fmt: skip
    print("\n| op | calls | ms in func() | Meta kernel | Python frames in its call | py share of 1st call |")
    print("|---|---:|---:|---|---|---:|")
    for r in ops:
        frames = ", ".join(f.split(" (")[0] for f in r["python_meta_frames"]) or "-"
        print(f"| {r['op']} | {r['calls']} | {r['seconds'] * 1e3:.1f} | {r['meta_kernel']} | {frames} | "
              f"{r['python_meta_share_of_first_call']:.0%} |")  # fmt: skip
    c = a["cpp_meta"]
    py_p, py_e = c["python_meta"]["plain forward"], c["python_meta"]["empty dispatch mode"]
    cc_p, cc_e = c["cpp_meta"]["plain forward"], c["cpp_meta"]["empty dispatch mode"]
    print(f"\nPython vs C++ meta kernels (fresh process; {c['restored']} Python meta kernels that override a C++ one "
          f"dropped, {c['kept']} kept; swap took {c['swap_s'] * 1e3:.0f} ms):")  # fmt: skip
    print("\n| meta kernels | plain forward | empty dispatch mode | empty mode - plain |\n|---|---:|---:|---:|")
    print(f"| Python (as torch ships) | {py_p * 1e3:.0f} ms | {py_e * 1e3:.0f} ms | {(py_e - py_p) * 1e3:+.0f} ms |")
    print(f"| C++ (overrides dropped) | {cc_p * 1e3:.0f} ms | {cc_e * 1e3:.0f} ms | {(cc_e - cc_p) * 1e3:+.0f} ms |")
    print(f"\nPython meta kernels are {(py_p - cc_p) / py_p:.0%} of a plain meta forward and "
          f"{(py_e - cc_e) / py_e:.0%} of an empty-mode forward.")  # fmt: skip
    print("\ntop 25 functions by tottime, empty-mode forward:\n")
    lines = a["empty_mode_top25"].splitlines()
    start = next((i for i, ln in enumerate(lines) if "ncalls" in ln), 0)
    print("\n".join(ln.replace(os.path.dirname(torch.__path__[0]) + "/", "") for ln in lines[start : start + 26]))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=80)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-rss", action="store_true", help="skip the per-variant subprocesses")
    parser.add_argument("--no-analysis", action="store_true", help="skip the cProfile / op census part")
    parser.add_argument("--rss-only", action="store_true", help="only the per-variant peak RSS subprocesses")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--rss-child", metavar="VARIANT", help=argparse.SUPPRESS)
    parser.add_argument("--cpp-meta-child", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    torch.set_num_threads(opts.threads)
    if opts.rss_child:
        return rss_child(opts.rss_child, opts.layers, opts.seq)
    if opts.cpp_meta_child:
        return cpp_meta_child(opts.layers, opts.seq, opts.rounds)

    if opts.rss_only:
        rss = measure_rss(list(variants(None, None, {}, "")), opts.layers, opts.seq)
        print("| variant | peak RSS during it | over RSS before it |\n|---|---:|---:|")
        for key, r in rss.items():
            print(f"| {key} | {r['ru_maxrss_kb'] / 1024:.0f} MiB | "
                  f"{(r['ru_maxrss_kb'] - r['rss_before_kb']) / 1024:+.1f} MiB |")
        return None
    model, ids, kwargs = build(opts.layers, opts.seq)
    print(f"torch {torch.__version__}; Llama {opts.layers} layers on meta, "
          f"{sum(p.numel() for p in model.parameters()) / 1e9:.1f} B params, ids {tuple(ids.shape)}, "
          f"{opts.rounds} interleaved rounds\n")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        runs = variants(model, ids, kwargs, os.path.join(tmp, "report.txt"))
        with quiet():
            timing = time_variants(runs, opts.rounds)
        report_lines = open(os.path.join(tmp, "report.txt")).read().count("\n")
    rss = None if opts.no_rss else measure_rss(list(runs), opts.layers, opts.seq)
    print_timing(timing, rss)
    print(f"\n(text report: {report_lines} lines)")
    analysis = None
    if not opts.no_analysis:
        with torch.no_grad(), quiet():
            analysis = analyse(model, ids, kwargs)
        analysis["cpp_meta"] = measure_cpp_meta(opts.layers, opts.seq, opts.rounds)
        print_analysis(analysis)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"timing": timing, "rss_kb": rss, "analysis": analysis}, f, indent=1)


if __name__ == "__main__":
    main()
