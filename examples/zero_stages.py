"""Why is ZeRO-3 slower? LeNet on 2 CPU ranks, ZeRO stages 0 to 3, measured step by step.

    DS_ACCELERATOR=cpu deepspeed --num_gpus 2 examples/zero_stages.py
    DS_ACCELERATOR=cpu deepspeed --num_gpus 2 examples/zero_stages.py --batch-size 32 --json out.json

For each stage, every rank trains LeNet (the model of the DeepSpeed user's report in
``../shared/seeds``) for a few steps and profiles the last ones with
``flopsight.Profiler(engine.module, optimizer=engine, memory=True)``: forward, backward and
the whole ``engine.step()``. Rank 0 gathers the ranks' results and prints, for the step of
median wall time, its anatomy, the communication by kind, and memory per rank.
"""

import argparse
import json
import os
import warnings

import deepspeed
import torch
from torch import nn

import flopsight
from flopsight.renderers.numbers import bytes_to_string, duration_to_string


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.Tanh(), nn.AvgPool2d(2),
            nn.Conv2d(6, 16, 5), nn.Tanh(), nn.AvgPool2d(2),
        )  # fmt: skip
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.Tanh(), nn.Linear(120, 84), nn.Tanh(), nn.Linear(84, 10)
        )

    def forward(self, x):
        return self.classifier(self.features(x))


def profile_stage(stage: int, batch_size: int, steps: int, profiled: int):
    """Train ``steps`` steps under ZeRO ``stage``, the last ``profiled`` of them profiled on
    every rank; rank 0 keeps the one of median wall time (two ranks share few cores here:
    single steps vary a lot)."""
    torch.manual_seed(0)
    config = {
        "train_micro_batch_size_per_gpu": batch_size,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
        "zero_optimization": {"stage": stage},
    }
    engine, _, _, _ = deepspeed.initialize(model=LeNet(), config=config)
    loss_fn = nn.CrossEntropyLoss()
    results = []
    for step in range(steps):
        x, y = torch.randn(batch_size, 1, 28, 28), torch.randint(0, 10, (batch_size,))
        profiling = step >= steps - profiled
        prof = flopsight.Profiler(engine.module, optimizer=engine, memory=True).start() if profiling else None
        engine.backward(loss_fn(engine(x), y))
        engine.step()
        if prof is not None:
            results.append(prof.stop())
    results.sort(key=lambda r: r.iteration.latency)
    return results[len(results) // 2]


def summary(stage: int, result) -> dict:
    """The figures printed for one stage (rank 0's result, which holds every rank's)."""
    it = result.iteration
    a = it.anatomy
    comm = {}
    for c in result.collectives():
        k = comm.setdefault(c.kind, {"count": 0, "bytes": 0, "seconds": 0.0})
        k["count"] += c.count
        k["bytes"] += c.bytes
        k["seconds"] += c.latency
    ranks = [r.memory for r in result.ranks] if result.ranks else [result.memory]
    return {
        "stage": stage,
        "step_seconds": it.latency,
        "anatomy": {"forward": a.forward, "backward": a.backward, "step": a.step,
                    "communication_exposed": a.communication, "other": a.other},
        "communication_overlapped": it.communication.overlapped,
        "communication": comm,
        "memory_per_rank": [m.to_dict() if m is not None else None for m in ranks],
    }


def print_table(rows: list[dict]) -> None:
    ms = lambda s: duration_to_string(s)  # noqa: E731
    print("\n| ZeRO stage | step | fwd | bwd | optimizer step | comm waited for | other | comm hidden |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        a = r["anatomy"]
        print(f"| {r['stage']} | {ms(r['step_seconds'])} | {ms(a['forward'])} | {ms(a['backward'])} | "
              f"{ms(a['step'])} | {ms(a['communication_exposed'])} | {ms(a['other'])} | "
              f"{ms(r['communication_overlapped'])} |")
    print("\n| ZeRO stage | collective | calls | bytes per rank | time |")
    print("|---:|---|---:|---:|---:|")
    for r in rows:
        for kind, c in r["communication"].items():
            print(f"| {r['stage']} | {kind} | {c['count']} | {bytes_to_string(c['bytes'])} | {ms(c['seconds'])} |")
    print("\n| ZeRO stage | rank | params | grads | optimizer state | activations | peak |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        for rank, m in enumerate(r["memory_per_rank"]):
            if m is None:
                print(f"| {r['stage']} | {rank} | missing | | | | |")
                continue
            print(f"| {r['stage']} | {rank} | {bytes_to_string(m['params'])} | {bytes_to_string(m['grads'])} | "
                  f"{bytes_to_string(m['optimizer_state'])} | {bytes_to_string(m['activations'])} | "
                  f"{bytes_to_string(m['peak'])} |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local_rank", type=int, default=0, help=argparse.SUPPRESS)  # set by the launcher
    parser.add_argument("--batch-size", type=int, default=8, help="samples per rank (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=8, help="steps per stage (default: %(default)s)")
    parser.add_argument("--profiled", type=int, default=5,
                        help="the last steps profiled, the median one printed (default: %(default)s)")
    parser.add_argument("--json", help="also write the figures to this file (rank 0)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", category=FutureWarning)  # torch's deprecation notes on c10d calls
    rows = []
    for stage in range(4):
        result = profile_stage(stage, args.batch_size, args.steps, min(args.profiled, args.steps))
        if torch.distributed.get_rank() == 0:
            rows.append(summary(stage, result))
    if torch.distributed.get_rank() == 0:
        print_table(rows)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
    os._exit(0)  # skip interpreter teardown, where gloo's threads sometimes abort
