"""Why is ZeRO-3 slower? The DeepSpeed user's LeNet on 2 CPU ranks, ZeRO stages 0 to 3, several steps each.

    DS_ACCELERATOR=cpu deepspeed --num_gpus 2 examples/zero_stages.py
    DS_ACCELERATOR=cpu deepspeed --num_gpus 2 examples/zero_stages.py --steps 12 --json out.json

The model is the seed user's own ``Net`` (``../shared/seeds/sample-output-lenet-dp2-with-user-questions.txt``:
62.01 K params, 5.21 MMACs per forward at batch 8). An engine per stage trains in turns, a
step of each at a time, so that a busy spell of the machine slows all four alike: a few
warm-up steps, then ``--steps`` steps (100: one change's 95% interval about ±1 ms here) each,
the ranks meeting at a barrier before each, profiled on its own with
``flopsight.Profiler(engine.module, optimizer=engine, memory=True)``. ``flopsight.combine_steps``
makes one result per stage: the step of median wall time, with every step's figures in
``result.samples``. Rank 0
gathers the ranks' results, prints each stage's median step (its anatomy, communication and
memory per rank), ranks the stages by step time, then answers the user's three questions in
prose: why ZeRO-3 is slower and by how much (the step verdict, only what the spreads make
significant: one verdict per pair of stages, computed once, so the ranking's ``<`` and the
prose's "significant" are one test; each change one statistic, with its interval), how much of
the step is communication, and how busy the device is.
"""

import argparse
import glob
import json
import os
import statistics
import warnings

import deepspeed
import torch
import torch.nn.functional as F
from torch import nn

import flopsight
from flopsight.analysis.diff.ranking import rank as rank_stages
from flopsight.analysis.report import Report
from flopsight.analysis.report_figures import communication_figures
from flopsight.renderers.numbers import bytes_to_string, duration_to_string, macs_to_string, params_to_string
from flopsight.renderers.text_renderer import busy_text
from flopsight.renderers.verdict_words import RANKING_LEGEND, ranking_text, verdict_text


class Net(nn.Module):
    """The seed user's model, module for module: conv1, pool, conv2, fc1, fc2, fc3 (PyTorch's
    CIFAR-10 tutorial network, 3x32x32 inputs)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def train_stages(batch_size: int, warm_up: int, steps: int) -> dict:
    """An engine per ZeRO stage, trained in turns (a step of each, ``steps`` times) so a
    busy spell of the machine slows every stage alike; each step profiled on every rank on
    its own, after ``warm_up`` unprofiled ones. Rank 0's results hold every rank's."""
    engines = {}
    for stage in range(4):
        torch.manual_seed(0)
        config = {
            "train_micro_batch_size_per_gpu": batch_size,
            "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
            "zero_optimization": {"stage": stage},
        }
        engines[stage], _, _, _ = deepspeed.initialize(model=Net(), config=config)
    loss_fn = nn.CrossEntropyLoss()

    def train_step(engine):
        x, y = torch.randn(batch_size, 3, 32, 32), torch.randint(0, 10, (batch_size,))
        engine.backward(loss_fn(engine(x), y))
        engine.step()

    measured = {stage: [] for stage in engines}
    for step in range(warm_up + steps):
        for stage, engine in engines.items():
            if step < warm_up:
                train_step(engine)
                continue
            # rank 0 gathers every rank's profile after each step, on its own: the ranks start
            # the next step together, as a training loop's steps do, or its first collective
            # would show the others waiting for rank 0's gathering
            torch.distributed.barrier()
            with flopsight.Profiler(engine.module, optimizer=engine, memory=True) as prof:
                train_step(engine)
            measured[stage].append(prof.result)
    # one result per stage: its median step, with every step's figures in result.samples
    return {stage: flopsight.combine_steps(results) for stage, results in measured.items()}


def summary(stage: int, result) -> dict:
    """The figures printed for one stage: its median step (rank 0's, which holds every rank's)."""
    it = result.iteration
    spread = result.samples.spread("wall")
    comm = {c.kind: {"count": c.count, "bytes": c.bytes, "seconds": c.latency, "exposed": c.exposed}
            for c in communication_figures(result.collectives())}
    ranks = [r.memory for r in result.ranks] if result.ranks else [result.memory]
    a = it.anatomy
    return {
        "stage": stage,
        "steps": result.samples.count,
        "step_seconds": it.latency,
        "step_spread": {"median": spread.median, "low": spread.low, "high": spread.high, "kind": spread.kind},
        "anatomy": {"forward": a.forward, "backward": a.backward, "step": a.step, "framework": a.framework,
                    "communication_exposed": a.communication, "other": a.other, "profiler": a.profiler},
        "communication_overlapped": it.communication.overlapped,
        # conv2's backward: its ops' time, median over the steps (ZeRO's hook work is framework)
        "conv2_backward": statistics.median(result.samples.module("conv2", "backward")),
        "conv2_backward_ops": sorted(result.module("conv2").ops.get("backward", {})),
        "communication": comm,
        "memory_per_rank": [m.to_dict() if m is not None else None for m in ranks],
    }


def print_table(rows: list[dict]) -> None:
    ms = duration_to_string
    print("\n| ZeRO stage | step (median of N, spread) | fwd | bwd | optimizer | framework and hooks | "
          "comm waited for | other | profiler | comm hidden |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        a, s = r["anatomy"], r["step_spread"]
        print(f"| {r['stage']} | {ms(r['step_seconds'])} of {r['steps']}, {ms(s['low'])} to {ms(s['high'])} | "
              f"{ms(a['forward'])} | {ms(a['backward'])} | {ms(a['step'])} | {ms(a['framework'])} | "
              f"{ms(a['communication_exposed'])} | {ms(a['other'])} | {ms(a['profiler'])} | "
              f"{ms(r['communication_overlapped'])} |")
    print("\n| ZeRO stage | collective | calls | bytes per rank | time in flight | waited for |")
    print("|---:|---|---:|---:|---:|---:|")
    for r in rows:
        for kind, c in r["communication"].items():
            print(f"| {r['stage']} | {kind} | {c['count']} | {bytes_to_string(c['bytes'])} | {ms(c['seconds'])} | "
                  f"{ms(c['exposed'])} |")
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


def answers(results: dict) -> dict:
    """The seed user's three questions, answered from the measurements."""
    # one verdict per pair of stages, computed once: the ranking's "<" and the prose's
    # "significant" are the same test's, and the JSON holds the verdict the prose words
    ranked = rank_stages({f"ZeRO-{s}": r for s, r in results.items()})
    v = ranked.verdict("ZeRO-0", "ZeRO-3")
    why = verdict_text(v, "ZeRO-0", "ZeRO-3")
    comm = []
    for stage, r in results.items():
        it = r.iteration
        comm.append(f"ZeRO-{stage}: {duration_to_string(it.anatomy.communication)} of its "
                    f"{duration_to_string(it.latency)} step waited for communication "
                    f"({100 * it.anatomy.communication / it.latency:.0f}%), "
                    f"{duration_to_string(it.communication.overlapped)} more hidden behind compute")
    peaks = []
    for stage, r in results.items():
        p = Report(r).peak_buffer
        if p is not None:
            b = p.buffer
            peaks.append(f"ZeRO-{stage}'s {bytes_to_string(r.memory.peak)} peak is one {bytes_to_string(b.bytes)} "
                         f"buffer ({b.op} in the {b.phase} of {b.module or 'the model'}): DeepSpeed's bucket buffer "
                         f"(reduce_bucket_size or allgather_bucket_size elements), not the model's; the rest of the "
                         f"peak is {bytes_to_string(p.rest)}")
    # how busy the device is, in words on every device: on CPU ranks, the compute share of the step
    busy = [f"ZeRO-{stage}: {busy_text(b)}" for stage, r in results.items() if (b := Report(r).busy) is not None]
    return {"ranking": ranking_text(ranked), "tiers": [list(t) for t in ranked.tiers],
            "largest_cause": v.largest_cause, "why": why, "verdict": v.to_dict(), "communication": comm,
            "memory_peaks": peaks, "device_busy": busy}


def print_answers(a: dict) -> None:
    print(f"\nStep time, fastest first ({RANKING_LEGEND}): {a['ranking']}")
    print(f"\n1. Why is ZeRO-3 slower? {a['why']}.")
    if a["largest_cause"] is not None:  # a part that moved beyond its own noise, the step's way
        print(f"   The largest cause: {a['largest_cause']}.")
    print("\n2. How much of the step is communication?")
    for line in a["communication"]:
        print(f"   {line}.")
    print("\n3. How busy is the device?")
    for line in a["device_busy"]:
        print(f"   {line}.")
    if a["memory_peaks"]:
        print("\nMemory peaks:")
        for line in a["memory_peaks"]:
            print(f"   {line}.")


def remove_shared_buffers() -> None:
    """DeepSpeed's CPU all-reduce keeps a 69 MB buffer per rank in /dev/shm after the process
    ends: remove this rank's, so that runs do not pile them up."""
    rank, port = torch.distributed.get_rank(), os.environ.get("MASTER_PORT", "")
    for path in glob.glob(f"/dev/shm/deepspeed_*_{port}_{rank}"):
        os.remove(path)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local_rank", type=int, default=0, help=argparse.SUPPRESS)  # set by the launcher
    parser.add_argument("--batch-size", type=int, default=8, help="samples per rank (default: %(default)s)")
    parser.add_argument("--warm-up", type=int, default=2, help="unprofiled steps first (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=100, help="profiled steps per stage (default: %(default)s)")
    parser.add_argument("--json", help="also write the figures to this file (rank 0)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", category=FutureWarning)  # torch's deprecation notes on c10d calls
    started = not torch.distributed.is_initialized()  # (a caller's process group is left as it was)
    results = train_stages(args.batch_size, args.warm_up, args.steps)
    if torch.distributed.get_rank() == 0:
        rows = [summary(stage, r) for stage, r in results.items()]
        total = results[0].total
        print(f"\nNet: {params_to_string(total.params)} params, {macs_to_string(total.forward.macs)} per forward "
              f"at batch {args.batch_size} per rank; {rows[0]['steps']} steps per stage")
        print_table(rows)
        found = answers(results)
        print_answers(found)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"stages": rows, "answers": found}, f, indent=1)
    torch.distributed.barrier()
    if started:
        remove_shared_buffers()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
