"""Every speed target of the hot-path issues (27, 36), measured in one run, next to DeepSpeed.

    python benchmarks/speed_targets.py                    # all of them (about 10 minutes here)
    python benchmarks/speed_targets.py --quick            # a dry run: few rounds, small models
    python benchmarks/speed_targets.py --only engine,ddp  # some of them

Each measurement is one of this folder's benchmark scripts, run in turn in a process of its
own (the distributed ones under ``torchrun`` and DeepSpeed's launcher, 2 CPU ranks), with its
interleaved rounds, medians and spreads; its whole output goes to ``OUT/<job>.txt`` (``--out``,
default ``speed-targets/``). The table at the end picks each target's figures from those
outputs: the measured value, DeepSpeed's where the target names it, and whether it is met.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _python(*args: str) -> list[str]:
    return [sys.executable, *args]


def _torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *args]


def _deepspeed(*args: str) -> list[str]:
    return [str(Path(sys.executable).with_name("deepspeed")), "--num_gpus", "2", *args]


def jobs(quick: bool, out: Path) -> dict[str, list[str]]:
    """job name -> the command that measures it (``quick``: few rounds, for a dry run)."""
    r = (lambda full, few: str(few if quick else full))  # noqa: E731
    b = str(HERE)
    return {
        "training_step": _python(f"{b}/training_step.py", "--repeats", r(21, 3), "--backends", "native",
                                 *(["--seq-len", "16"] if quick else [])),
        "memory_step": _python(f"{b}/memory_cost.py", "--rounds", r(21, 3), *(["--seq-len", "16"] if quick else [])),
        "ddp": _torchrun(f"{b}/distributed_step.py", "--rounds", r(31, 3)),
        "suite": _python(f"{b}/suite.py", "--repeats", r(11, 2), "--json", str(out / "suite.json"),
                         *(["--models", "tiny-mlp,lenet"] if quick else [])),
        "llama70b": _python(f"{b}/meta_llama70b.py", "--rounds", r(5, 2), "--no-analysis", "--no-rss",
                            "--json", str(out / "llama70b.json"),
                            *(["--layers", "4", "--seq", "256"] if quick else [])),
        "lifecycle": _python(f"{b}/lifecycle.py", "--rounds", r(21, 3), "--threads", "1"),
        "counting_pass": _python(f"{b}/counting_pass.py", "--rounds", r(21, 3), "--threads", "1",
                                 "--models", "bert-base,gpt2,lenet,cells,small-ops"),
        "engine": _deepspeed(f"{b}/engine_step.py", "--rounds", r(31, 3)),
        "first_profile": _python(f"{b}/first_profile.py", "--processes", r(11, 2)),
        "rank0": _python(f"{b}/rank0_only.py", "--launches", r(5, 1), "--rounds", r(21, 3)),
    }


# -- reading the outputs -----------------------------------------------------------------------
def _cell(text: str, *first_cells: str, column: int = -1) -> str | None:
    """The ``column``-th cell of the markdown row whose first cells are ``first_cells``."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[:len(first_cells)] == list(first_cells):
            return cells[column]
    return None


def _x(value: str | None) -> float | None:
    """``"1.05x"`` -> 1.05; ``"18.07 us"`` -> 18.07."""
    if value is None:
        return None
    found = re.match(r"\s*(-?[\d.]+)", value)
    return float(found.group(1)) if found else None


def _ms(text: str, label: str) -> float | None:
    found = re.search(rf"^{re.escape(label)}\s+([\d.]+) ms", text, re.M)
    return float(found.group(1)) if found else None


def _first_minus_second(text: str, side: str) -> float | None:
    """first_profile.py's median first - second profile of ``side``, in ms."""
    return _x(_cell(text, side, column=4))


def rows(outputs: dict[str, str], out: Path) -> list[tuple[str, str, str, str, bool | None]]:
    """(measure, target, flopsight, DeepSpeed or reference, met) for each target."""
    table = []

    def add(measure, target, ours, theirs, met):
        table.append((measure, target, ours if ours is not None else "not measured", theirs or "", met))

    t = outputs.get("training_step", "")
    ratio = _x(_cell(t, "profiled / un-profiled (median of paired ratios)"))
    add("BERT-base training step in `Profiler`, memory off", "<= 1.05x",
        f"{ratio:.2f}x" if ratio else None, "", ratio is not None and ratio <= 1.05)

    t = outputs.get("memory_step", "")
    plain, with_memory = _ms(t, "plain step"), _ms(t, "profiled, memory=True")
    ratio = with_memory / plain if plain and with_memory else None
    cost = re.search(r"memory's cost: ([+-][\d.]+)x", t)
    add("the same with `memory=True`", "<= 1.10x", f"{ratio:.2f}x" if ratio else None,
        f"memory alone {cost.group(1)}x" if cost else "", ratio is not None and ratio <= 1.10)

    t = outputs.get("ddp", "")
    ratio = _x(_cell(t, "counting + communication + memory, gathered on rank 0"))
    python = _x(_cell(t, "the same on the Python backend"))
    add("2-rank DDP step, communication and memory on, gathered", "<= 1.15x",
        f"{ratio:.2f}x" if ratio else None, f"Python backend {python:.2f}x" if python else "",
        ratio is not None and ratio <= 1.15)

    suite = out / "suite.json"
    if suite.exists() and "ds gmp" in next(iter(json.loads(suite.read_text())["models"].values()))["variants"]:
        models = json.loads(suite.read_text())["models"]
        ours = statistics.median(m["variants"]["fs gmp"]["ratio"] for m in models.values())
        theirs = statistics.median(m["variants"]["ds gmp"]["ratio"] for m in models.values())
        wins = sum(m["variants"]["fs gmp"]["ratio"] <= m["variants"]["ds gmp"]["ratio"] for m in models.values())
        add("`get_model_profile(warm_up=1)` over `benchmarks/suite.py`, median",
            "<= DeepSpeed's median", f"{ours:.2f}x", f"{theirs:.2f}x", ours <= theirs)
        add("... models where flopsight <= DeepSpeed", ">= 80%", f"{wins} of {len(models)}", "",
            wins >= 0.8 * len(models))
    else:
        add("`get_model_profile(warm_up=1)` over `benchmarks/suite.py`", "<= DeepSpeed", None, "", None)

    llama = out / "llama70b.json"
    if llama.exists():
        timing = json.loads(llama.read_text())["timing"]
        ours = timing["flopsight profile(warm_up=0)"]["ratio"]
        report = timing["flopsight get_model_profile + text report"]["ratio"]
        add("70B Llama on meta, `profile(warm_up=0)`", "<= 1.3x", f"{ours:.2f}x",
            f"FlopCounterMode {timing['torch FlopCounterMode']['ratio']:.2f}x; with the text report "
            f"{report:.2f}x", ours <= 1.3)

    t = outputs.get("lifecycle", "")
    for model, label in (("bert-base", "BERT-base"), ("gpt2", "GPT-2"), ("lenet", "LeNet b8"), ("cells", "cell loop")):
        ours = _x(_cell(t, model, "flopsight, native", column=2))
        theirs = _x(_cell(t, model, "DeepSpeed", column=2))
        target = "<= DeepSpeed" + (", <= 1.08x" if model == "bert-base" else "")
        met = ours is not None and theirs is not None and ours <= theirs and (model != "bert-base" or ours <= 1.08)
        add(f"whole `with Profiler(model): model(x)`, {label}", target, f"{ours:.2f}x" if ours else None,
            f"{theirs:.2f}x" if theirs else "", met)

    t = outputs.get("counting_pass", "")
    for model, label, limit in (("bert-base", "BERT-base", 1.05), ("gpt2", "GPT-2", 1.05), ("lenet", "LeNet", 1.6),
                                ("cells", "cell loop", 1.8)):
        ours = _x(_cell(t, model, "flopsight, native", column=2))
        theirs = _x(_cell(t, model, "DeepSpeed", column=2))
        add(f"one counting pass under `no_grad`, {label}", f"<= {limit}x", f"{ours:.2f}x" if ours else None,
            f"{theirs:.2f}x" if theirs else "", ours is not None and ours <= limit)

    t = outputs.get("engine", "")
    ours, theirs = (re.search(rf"{side} profiled step\s+([\d.]+)x", t) for side in ("flopsight", "deepspeed"))
    ours, theirs = (float(m.group(1)) if m else None for m in (ours, theirs))
    add("DeepSpeed engine drop-in, ZeRO-0 step of the seed's Net, 2 CPU ranks", "<= DeepSpeed's profiler",
        f"{ours:.2f}x" if ours else None, f"{theirs:.2f}x" if theirs else "",
        ours is not None and theirs is not None and ours <= theirs)

    t = outputs.get("first_profile", "")
    ours = _first_minus_second(t, "flopsight-auto")
    theirs = _first_minus_second(t, "deepspeed")
    imports = _x(_cell(t, "flopsight-auto", column=1))
    add("a fresh process's first `profile()` over its second (MLP, native build cached)", "<= +300 ms",
        f"+{ours:.0f} ms" if ours is not None else None,
        f"+{theirs:.0f} ms (its import {_x(_cell(t, 'deepspeed', column=1)):.0f} ms)" if theirs is not None else "",
        ours is not None and ours <= 300)
    add("`import flopsight` beyond `import torch`", "<= 100 ms", f"{imports:.0f} ms" if imports is not None else None,
        "", imports is not None and imports <= 100)
    cli = re.search(r"wall time over \(import \+ warm command\): ([\d.]+)x", t)
    add("`flopsight profile resnet-18`, over import + the warm command", "<= 1.5x",
        f"{cli.group(1)}x" if cli else None, "", cli is not None and float(cli.group(1)) <= 1.5)

    t = outputs.get("rank0", "")
    found = re.search(r"first profile ([+-][\d.]+) ms, later ones ([+-][\d.]+) ms", t)
    ds = _x(_cell(t, "DeepSpeed's get_model_profile, later profiles"))
    add("a profile on rank 0 alone (2 gloo ranks) over a single process's, first / later",
        "<= +50 ms", f"{found.group(1)} / {found.group(2)} ms" if found else None,
        f"its later profiles take {ds:.1f} ms" if ds is not None else "",
        found is not None and max(float(found.group(1)), float(found.group(2))) <= 50)

    t = outputs.get("counting_pass", "")
    for model, label in (("bert-base", "BERT-base"), ("small-ops", "4,000 one-element adds")):
        off = _x(_cell(t, model, "flopsight, native", column=4))
        on = _x(_cell(t, model, "flopsight, native, memory=True", column=4))
        theirs = _x(_cell(t, model, "DeepSpeed", column=4))
        add(f"host time the counting pass adds per op, {label}, memory off / on", "<= 1 us",
            f"{off:.2f} / {on:.2f} us" if off is not None and on is not None else None,
            f"{theirs:.2f} us" if theirs is not None else "",
            off is not None and on is not None and max(off, on) <= 1.0)
    return table


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few rounds and small models: a dry run")
    parser.add_argument("--only", help="comma-separated jobs: " + ", ".join(jobs(False, Path("."))))
    parser.add_argument("--out", default="speed-targets", help="folder for each job's output")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    todo = jobs(args.quick, out)
    if args.only:
        unknown = set(args.only.split(",")) - set(todo)
        if unknown:
            raise SystemExit(f"--only: unknown job(s) {', '.join(sorted(unknown))}; expected some of {', '.join(todo)}")
        todo = {k: v for k, v in todo.items() if k in args.only.split(",")}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
           "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    outputs = {}
    for name, command in todo.items():
        if command[0].endswith("deepspeed") and not shutil.which(command[0]):
            print(f"{name}: skipped (DeepSpeed's launcher is not installed)", file=sys.stderr)
            continue
        t0 = time.perf_counter()
        proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=out)
        outputs[name] = proc.stdout
        (out / f"{name}.txt").write_text(f"$ {' '.join(command)}\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")
        state = "ok" if proc.returncode == 0 else f"FAILED ({proc.returncode}, see {out / name}.txt)"
        print(f"{name}: {state} in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    table = rows(outputs, out)
    print("| measure | target | flopsight | DeepSpeed / reference | met |")
    print("|---|---|---:|---:|:---:|")
    for measure, target, ours, theirs, met in table:
        print(f"| {measure} | {target} | {ours} | {theirs} | {'yes' if met else 'no' if met is not None else '-'} |")
    (out / "table.json").write_text(json.dumps([dict(zip(("measure", "target", "flopsight", "reference", "met"), r))
                                                for r in table], indent=1))


if __name__ == "__main__":
    main()
