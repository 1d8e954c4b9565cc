"""What counting memory costs a profiled training step, against the step's own noise, in one run.

    python benchmarks/memory_cost.py                    # BERT-base, batch 1 x 64, AdamW
    python benchmarks/memory_cost.py --model resnet18 --rounds 41
    DS_ACCELERATOR=cpu deepspeed --num_gpus 2 benchmarks/memory_cost.py --zero 3   # the seed's Net under ZeRO-3

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
    """A model and its loss; the step's optimizer is AdamW (None: the caller's)."""
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


def engine_step(stage: int):
    """The seed user's Net in a DeepSpeed engine at ZeRO ``stage``: (model, engine, step)."""
    import os
    import sys

    import deepspeed

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
    from zero_stages import Net

    torch.manual_seed(0)
    config = {"train_micro_batch_size_per_gpu": 8, "zero_optimization": {"stage": stage},
              "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}}}
    engine, _, _, _ = deepspeed.initialize(model=Net(), config=config)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))
        engine.backward(loss_fn(engine(x), y))
        engine.step()

    return engine.module, engine, step


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bert", help="bert (BERT-base) or a benchmarks/models.py name")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--zero", type=int, choices=range(4),
                        help="the seed user's Net (examples/zero_stages.py) in a DeepSpeed engine at this ZeRO stage, "
                             "batch 8 per rank (run under `deepspeed --num_gpus 2`)")
    parser.add_argument("--local_rank", type=int, default=0, help=argparse.SUPPRESS)  # set by the launcher
    args = parser.parse_args(argv)
    if args.zero is not None:
        model, opt, step = engine_step(args.zero)
    else:
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
    if torch.distributed.is_initialized():
        from zero_stages import remove_shared_buffers  # examples/zero_stages.py (engine_step put it on the path)

        torch.distributed.barrier()
        remove_shared_buffers()
        if torch.distributed.get_rank() != 0:
            return
    for label, values in (("plain step", plain), ("profiled", profiled), ("profiled, memory=True", with_memory)):
        s = spread(values)
        print(f"{label:24s} {s.median * 1e3:9.2f} ms ± {s.plus_minus * 1e3:.2f} ms ({s.kind}, {s.n} rounds)")
    print(f"memory's cost: {cost:+.3f}x of a plain step; the plain step's noise: ±{noise.relative:.3f}x "
          f"({'below' if abs(cost) < noise.relative else 'above'} the noise)")


if __name__ == "__main__":
    main()
