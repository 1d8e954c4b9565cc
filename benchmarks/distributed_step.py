"""What profiling a distributed training step costs, with communication and memory on.

    torchrun --nproc_per_node 2 benchmarks/distributed_step.py            # a 2-rank DDP step
    python benchmarks/distributed_step.py                                 # one process: memory's own cost

Under torchrun: every rank trains a DDP-wrapped ``nn.TransformerEncoder`` (4 layers,
d_model 256, batch 8 x 64 tokens, AdamW); in each round it runs an un-profiled step, then
one inside ``flopsight.Profiler(model, optimizer=opt, ...)`` for each variant: counting and
communication (always on under torch.distributed) with and without rank 0 gathering both
ranks' results, and with memory too; and, for reference, the step under an empty
``TorchDispatchMode``: the least any counter built on a Python dispatch mode costs.
Rank 0 prints the median over rounds of each variant's
time over the un-profiled step's.

In one process: the same model's forward under ``torch.no_grad()``, plain, under
``Profiler(model)`` and under ``Profiler(model, memory=True)``; memory tracking's own cost is
the difference of the last two, as a share of the plain forward.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import warnings

import torch
import torch.distributed as dist
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import flopsight

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pairing import paired_rounds  # noqa: E402


class _EmptyMode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def build():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(256, 8, 1024, batch_first=True, dropout=0.0)
    return nn.TransformerEncoder(layer, 4, enable_nested_tensor=False), torch.randn(8, 64, 256)


def distributed(rounds: int) -> None:
    dist.init_process_group("gloo")
    model, x = build()
    model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()

    def profiled(**options):
        def run():
            with flopsight.Profiler(model, optimizer=opt, **options) as prof:
                step()
            return prof.result

        return run

    def empty_mode():  # what any counter built on a Python dispatch mode pays at least
        with _EmptyMode():
            step()

    variants = {
        "counting + communication + memory, gathered on rank 0": profiled(memory=True),
        "the same on the Python backend": profiled(memory=True, backend="python"),
        "counting + communication, not gathered": profiled(gather_timeout=None),
        "counting + communication, gathered": profiled(),
        "an empty TorchDispatchMode (the floor of a Python-mode counter)": empty_mode,
    }
    for _ in range(3):
        step()
    runs = paired_rounds(step, variants, rounds)
    if dist.get_rank() == 0:
        out = next(iter(runs.values()))
        result = out["result"][-1]
        comm = result.iteration.communication
        print(f"torch {torch.__version__}, 2 gloo ranks, {rounds} rounds, DDP TransformerEncoder(4 x 256), "
              f"batch 8 x 64; un-profiled step {statistics.median(out['plain']) * 1e3:.1f} ms (median)")
        print("| profiled step | median | x un-profiled |")
        print("|---|---:|---:|")
        for name, o in runs.items():
            ratio = statistics.median(t / p for t, p in zip(o["time"], o["plain"]))
            print(f"| {name} | {statistics.median(o['time']) * 1e3:.1f} ms | {ratio:.2f}x |")
        print(f"(last profiled step: {len(result.ranks)} ranks gathered, "
              f"{sum(c.count for c in result.collectives())} collectives, exposed {comm.exposed * 1e3:.2f} ms, "
              f"overlapped {comm.overlapped * 1e3:.2f} ms, peak {result.memory.peak} bytes)")
    dist.barrier()
    dist.destroy_process_group()


def memory_only(rounds: int) -> None:
    model, x = build()
    model.eval()

    def forward():
        model(x)

    def counted():
        with flopsight.Profiler(model):
            model(x)

    def counted_with_memory():
        with flopsight.Profiler(model, memory=True):
            model(x)

    with torch.no_grad():
        for _ in range(3):
            forward()
        out = paired_rounds(forward, {"counting": counted, "counting + memory": counted_with_memory}, rounds)
    ratio = {k: statistics.median(t / p for t, p in zip(v["time"], v["plain"])) for k, v in out.items()}
    print(f"torch {torch.__version__}, 1 process, {rounds} rounds, TransformerEncoder(4 x 256) forward, batch 8 x 64")
    print("| variant | x plain forward |")
    print("|---|---:|")
    for k, r in ratio.items():
        print(f"| {k} | {r:.3f}x |")
    print(f"| memory tracking alone (the difference) | {ratio['counting + memory'] - ratio['counting']:+.3f}x |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21, help="paired rounds (default: %(default)s)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    if "RANK" in os.environ:  # started by torchrun
        distributed(args.rounds)
    else:
        memory_only(args.rounds)


if __name__ == "__main__":
    main()
