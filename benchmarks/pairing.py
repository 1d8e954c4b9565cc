"""What the benchmarks share: paired timing (every variant runs right after a plain call of its
own, so slow drift of the machine cancels in the ratio of the two), and DeepSpeed's profiler,
loaded quietly when it is installed.

>>> calls = []
>>> rounds = paired_rounds(lambda: calls.append("p"), {"v": lambda: calls.append("v")}, rounds=2)
>>> calls, len(rounds["v"]["time"]), len(rounds["v"]["plain"])
(['p', 'v', 'p', 'v'], 2, 2)
"""

from __future__ import annotations

import contextlib
import io
import statistics
import time
import warnings
from collections.abc import Callable

__all__ = ["paired_rounds", "median_seconds", "quiet", "load_deepspeed", "whole_profiles"]


def paired_rounds(plain: Callable[[], object], runs: dict[str, Callable[[], object]], rounds: int) -> dict[str, dict]:
    """Per variant: ``time`` (its seconds each round), ``plain`` (the seconds of the plain call
    run just before it), ``cpu`` and ``plain_cpu`` (the same, in this thread's CPU seconds: what
    waiting for other ranks or the VM's other work leaves out) and ``result`` (what it returned)."""
    out = {k: {"time": [], "plain": [], "cpu": [], "plain_cpu": [], "result": []} for k in runs}
    for _ in range(rounds):
        for key, fn in runs.items():
            c0, t0 = time.thread_time(), time.perf_counter()
            plain()
            c1, t1 = time.thread_time(), time.perf_counter()
            result = fn()
            c2, t2 = time.thread_time(), time.perf_counter()
            out[key]["plain"].append(t1 - t0)
            out[key]["time"].append(t2 - t1)
            out[key]["plain_cpu"].append(c1 - c0)
            out[key]["cpu"].append(c2 - c1)
            out[key]["result"].append(result)
    return out


def median_seconds(fn: Callable[[], object], runs: int) -> float:
    """The median wall time of ``runs`` calls of ``fn``, each timed on its own."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@contextlib.contextmanager
def quiet():
    """Swallow prints and warnings (DeepSpeed's and flopsight's) while timing."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def load_deepspeed():
    """DeepSpeed's (get_model_profile, FlopsProfiler), or None when it is not importable."""
    try:
        with quiet():
            from deepspeed.profiling.flops_profiler import FlopsProfiler, get_model_profile
            from deepspeed.utils import logger
    except Exception as exc:  # ImportError, or a broken install raising anything else
        print(f"note: DeepSpeed not importable ({type(exc).__name__}: {exc}); its columns are skipped\n")
        return None
    logger.setLevel("ERROR")
    return get_model_profile, FlopsProfiler


def whole_profiles(model, call: Callable[[], object]) -> dict[str, Callable[[], object]]:
    """Everything a user pays for one profile around ``call()`` (a forward of ``model``), start to
    result, per side: ``"native"`` and ``"python"`` (``with flopsight.Profiler(model)``, then the
    result read) and, when DeepSpeed imports, ``"deepspeed"`` (``start_profile()`` ...
    ``stop_profile()``, the totals read, ``end_profile()``). Each returns the MACs it counted."""
    import flopsight

    def flopsight_side(backend: str):
        def run():
            with flopsight.Profiler(model, backend=backend) as prof:
                call()
            return prof.result.total.forward.macs

        return run

    out = {"native": flopsight_side("native"), "python": flopsight_side("python")}
    ds = load_deepspeed()
    if ds is not None:
        FlopsProfiler = ds[1]

        def deepspeed():
            prof = FlopsProfiler(model)
            prof.start_profile()
            call()
            prof.stop_profile()
            macs = prof.get_total_macs()
            prof.end_profile()
            return macs

        out["deepspeed"] = deepspeed
    return out
