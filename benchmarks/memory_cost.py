"""What counting memory costs a profiled training step, against the step's own noise, in one run.

    python benchmarks/memory_cost.py                    # BERT-base, batch 1 x 64, AdamW
    python benchmarks/memory_cost.py --model resnet18 --rounds 41

Each round runs a plain step, a step inside ``flopsight.Profiler(model, optimizer=opt)`` and
one inside ``flopsight.Profiler(model, optimizer=opt, memory=True)``, in turns. It prints, over
the rounds, the median of each (with its interquartile range, ``±`` half of it), the cost of
memory as the median of (memory step - profiled step) / plain step, paired round by round,
and the plain step's own noise (its ``±`` over its median): memory is on by default in the
DeepSpeed engine drop-in and ``attach`` where its cost is below that noise.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import flopsight
from flopsight.result.samples import spread


def build(name: str, seq_len: int):
    torch.manual_seed(0)
    if name == "bert":
        import transformers

        model = transformers.BertForSequenceClassification(transformers.BertConfig()).train()
        inputs = {"input_ids": torch.ones(1, seq_len, dtype=torch.long), "labels": torch.zeros(1, dtype=torch.long)}
        return model, lambda: model(**inputs).loss
    from models import build as build_model  # benchmarks/models.py

    model, args, kwargs = build_model(name)
    model.train()
    return model, lambda: model(*args, **kwargs).float().sum()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bert", help="bert (BERT-base) or a benchmarks/models.py name")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--seq-len", type=int, default=64)
    args = parser.parse_args(argv)
    model, loss = build(args.model, args.seq_len)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)

    def step():
        opt.zero_grad(set_to_none=True)
        loss().backward()
        opt.step()

    def timed(memory: bool | None) -> float:
        t0 = time.perf_counter()
        if memory is None:
            step()
        else:
            with flopsight.Profiler(model, optimizer=opt, memory=memory, gather_timeout=None):
                step()
        return time.perf_counter() - t0

    for memory in (None, False, True):  # warm every path up
        timed(memory)
    plain, profiled, with_memory = [], [], []
    for _ in range(args.rounds):
        plain.append(timed(None))
        profiled.append(timed(False))
        with_memory.append(timed(True))
    cost = statistics.median((m - p) / b for b, p, m in zip(plain, profiled, with_memory))
    noise = spread(plain)
    for label, values in (("plain step", plain), ("profiled", profiled), ("profiled, memory=True", with_memory)):
        s = spread(values)
        print(f"{label:24s} {s.median * 1e3:9.2f} ms ± {s.plus_minus * 1e3:.2f} ms ({s.kind}, {s.n} rounds)")
    print(f"memory's cost: {cost:+.3f}x of a plain step; the plain step's noise: ±{noise.relative:.3f}x "
          f"({'below' if abs(cost) < noise.relative else 'above'} the noise)")


if __name__ == "__main__":
    main()
