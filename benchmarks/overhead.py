"""Profiling overhead against a plain forward, all variants measured in one run.

    python benchmarks/overhead.py                 # BERT-base, GPT-2 small, LeNet, LSTM/GRU cells (CPU)
    python benchmarks/overhead.py --models bert-base --repeats 11

For each model and round, every variant runs right after a plain forward of its own (plain,
flopsight, plain, torch, plain, DeepSpeed, ...), so each is compared with the run next to
it and slow drift of the machine cancels; the table gives each variant's median time and
the median, over rounds, of its time divided by its paired plain forward's time:

* plain forward                   ``model(x)``
* flopsight one profiled pass     ``with flopsight.Profiler(model, backend=...): model(x)``
                                  (counts and times in the same pass, builds the result), on
                                  the native recorder and on the Python dispatch mode
* flopsight get_model_profile     ``warm_up=1``, no printing (one warm-up pass that also
                                  counts, then a separately timed pass)
* flopsight profile               the native equivalent, ``flopsight.profile(model, x, warm_up=1)``
                                  (its timed pass stamps the operators too), and the same with
                                  the timed pass timing the modules alone (the operators timed
                                  in the counting pass, as before issue 36): how much of the
                                  stamps' cost reaches the reported latency
* torch FlopCounterMode           one forward under ``torch.utils.flop_counter``
* DeepSpeed one profiled pass     ``FlopsProfiler`` start/stop around one forward
* DeepSpeed get_model_profile     ``warm_up=1``, no printing

The last column compares the forward latency each profiler *reports* with the plain
forward's measured median: how much of its own overhead leaks into its latencies.
Everything runs under ``torch.no_grad()``.
"""

from __future__ import annotations

import argparse
import statistics

import torch
from pairing import load_deepspeed, paired_rounds
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import flopsight
from flopsight.profiler import CallProfile


def build(name: str):
    if name == "lenet":
        torch.manual_seed(0)
        model = _lenet()
        return model.eval(), (torch.randn(8, 1, 32, 32),), {}
    if name == "cells":
        torch.manual_seed(0)
        return _Cells(), (torch.randn(4, 64),), {}
    if name == "small-ops":  # launch-bound: 4,000 one-element adds, each a few microseconds
        return _SmallOps(), (torch.ones(4),), {}
    if name == "resnet18":
        from flopsight.cli import zoo

        model, inputs = zoo.build("resnet18", batch_size=1)
        return model, inputs, {}
    import transformers

    torch.manual_seed(0)
    if name == "bert-base":
        model = transformers.BertModel(transformers.BertConfig())
        return model.eval(), (torch.ones(1, 128, dtype=torch.long),), {}
    if name == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config())
        return model.eval(), (torch.ones(1, 128, dtype=torch.long),), {"use_cache": False}
    raise ValueError(f"--models: unknown model {name!r}")


SMALL_OPS = 4000  # the ops of the small-ops model's forward


class _SmallOps(torch.nn.Module):
    """A module whose forward is SMALL_OPS tiny ops: what a launch-bound GPU model looks like to
    the host, where each op's own time is a few microseconds and a profiler's per-op cost shows."""

    def forward(self, x):
        for _ in range(SMALL_OPS):
            x = x + 1
        return x


def _lenet():
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, 6, 5), nn.Tanh(), nn.AvgPool2d(2), nn.Conv2d(6, 16, 5), nn.Tanh(), nn.AvgPool2d(2),
        nn.Flatten(), nn.Linear(400, 120), nn.Tanh(), nn.Linear(120, 84), nn.Tanh(), nn.Linear(84, 10))


class _Cells(torch.nn.Module):
    """An LSTMCell and a GRUCell stepped 50 times (hidden 64, batch 4)."""

    def __init__(self):
        super().__init__()
        self.lstm, self.gru = torch.nn.LSTMCell(64, 64), torch.nn.GRUCell(64, 64)

    def forward(self, x):
        h = c = g = torch.zeros_like(x)
        for _ in range(50):
            h, c = self.lstm(x, (h, c))
            g = self.gru(h, g)
        return g


def variants(model, args, kwargs):
    """name -> callable returning the forward latency the profiler reports (or None)."""

    def plain():
        model(*args, **kwargs)

    def flopsight_pass(backend):
        def run():
            with flopsight.Profiler(model, backend=backend) as prof:
                model(*args, **kwargs)
            return prof.result.total.forward.latency

        return run

    def flopsight_gmp():
        flopsight.get_model_profile(model, args=list(args), kwargs=kwargs, warm_up=1, print_profile=False)

    def flopsight_profile():
        return flopsight.profile(model, args, kwargs, warm_up=1).total.forward.latency

    def flopsight_profile_modules_alone():
        timed_ops = CallProfile._ops_timed
        CallProfile._ops_timed = lambda self: False  # no stamps: the timed pass times the modules alone
        try:
            return flopsight.profile(model, args, kwargs, warm_up=1).total.forward.latency
        finally:
            CallProfile._ops_timed = timed_ops

    def torch_counter():
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False):
            model(*args, **kwargs)

    def empty_modes():
        with _EmptyFunctionMode(), _EmptyDispatchMode():
            model(*args, **kwargs)

    out = {
        "plain forward": plain,
        "flopsight one profiled pass, native": flopsight_pass("native"),
        "flopsight one profiled pass, python": flopsight_pass("python"),
        "flopsight get_model_profile(warm_up=1)": flopsight_gmp,
        "flopsight profile(warm_up=1)": flopsight_profile,
        "flopsight profile(warm_up=1), modules alone timed": flopsight_profile_modules_alone,
        "torch FlopCounterMode pass": torch_counter,
        "floor: empty function + dispatch modes": empty_modes,
    }
    ds = load_deepspeed()
    if ds is not None:
        ds_get_model_profile, FlopsProfiler = ds

        def ds_pass():
            prof = FlopsProfiler(model)
            prof.start_profile()
            model(*args, **kwargs)
            prof.stop_profile()
            latency = prof.get_total_duration()
            prof.end_profile()
            return latency

        def ds_gmp():
            ds_get_model_profile(model, args=list(args), kwargs=kwargs, warm_up=1, print_profile=False)

        out["DeepSpeed one profiled pass"] = ds_pass
        out["DeepSpeed get_model_profile(warm_up=1)"] = ds_gmp
    return out


class _EmptyDispatchMode(TorchDispatchMode):
    """A dispatch mode that only runs each op: what any dispatch-level counter pays at least."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class _EmptyFunctionMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def measure(name: str, repeats: int) -> list[tuple[str, float, float, float | None]]:
    """(variant, median seconds, median ratio to plain in the same round, reported latency / plain)."""
    model, args, kwargs = build(name)
    runs = variants(model, args, kwargs)
    with torch.no_grad():
        for fn in runs.values():  # warm every path once (lazy imports, allocator)
            fn()
        rounds = paired_rounds(runs["plain forward"], runs, repeats)
    rows = []
    for key, r in rounds.items():
        ratio = statistics.median(t / p for t, p in zip(r["time"], r["plain"]))
        # the forward latency the profiler reported, over the paired plain forward's time
        reported = [lat / p for lat, p in zip(r["result"], r["plain"]) if lat]
        rows.append((key, statistics.median(r["time"]), ratio, statistics.median(reported) if reported else None))
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert-base,gpt2,lenet,cells",
                        help="comma-separated: bert-base, gpt2, lenet, cells, resnet18")
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.repeats} interleaved rounds\n")
    print("| model | variant | median | x plain forward | reported fwd latency / plain |")
    print("|---|---|---:|---:|---:|")
    for name in args.models.split(","):
        for key, med, ratio, rep in measure(name, args.repeats):
            rep_s = f"{rep:.2f}" if rep is not None else ""
            print(f"| {name} | {key} | {med * 1e3:.1f} ms | {ratio:.2f}x | {rep_s} |")


if __name__ == "__main__":
    main()
