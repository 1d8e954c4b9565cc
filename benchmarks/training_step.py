"""A profiled training step against an un-profiled one, measured in one run.

    python benchmarks/training_step.py                 # BERT-base, batch 1 x 128, AdamW
    python benchmarks/training_step.py --repeats 11 --seq-len 64 --backends native

Each round runs, per counting backend, an un-profiled step (forward, backward, AdamW step)
and a step inside ``flopsight.Profiler(model, optimizer=opt, backend=...)``, interleaved; the
ratio is the median, over rounds, of the profiled step's time divided by the plain step's
time right before it
(and, as a check, the ratio of the two medians; a 1 s step varies by ±10% on a shared
machine, so it takes some 30 rounds for the two to agree).
The profiled rounds also give the per-phase latencies flopsight reports and the measured
backward/forward FLOPs ratio (DeepSpeed assumes 2).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import flopsight


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=31)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--backends", default="native,python", help="comma-separated counting backends")
    args = parser.parse_args(argv)

    import transformers

    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(transformers.BertConfig()).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    inputs = {
        "input_ids": torch.ones(args.batch_size, args.seq_len, dtype=torch.long),
        "labels": torch.zeros(args.batch_size, dtype=torch.long),
    }

    def step():
        opt.zero_grad(set_to_none=True)
        model(**inputs).loss.backward()
        opt.step()

    def profiled(backend):
        with flopsight.Profiler(model, optimizer=opt, backend=backend) as prof:
            step()
        return prof.result

    backends = args.backends.split(",")
    step()  # warm up every path (allocator, optimizer state, lazy imports, the native build)
    for backend in backends:
        profiled(backend)
    plain_t = {b: [] for b in backends}
    prof_t = {b: [] for b in backends}
    results = {b: [] for b in backends}
    for _ in range(args.repeats):
        for backend in backends:  # each profiled step right after a plain one of its own
            t0 = time.perf_counter()
            step()
            plain_t[backend].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            results[backend].append(profiled(backend))
            prof_t[backend].append(time.perf_counter() - t0)

    def med(values):
        return statistics.median(values) * 1e3

    def row(name, fn):
        print(f"| {name} | " + " | ".join(fn(b) for b in backends) + " |")

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, BERT-base for sequence classification, "
          f"batch {args.batch_size} x {args.seq_len}, AdamW, {args.repeats} interleaved rounds\n")
    print("| measure | " + " | ".join(f"flopsight, {b}" for b in backends) + " |")
    print("|---|" + "---:|" * len(backends))
    it = {b: [r.iteration for r in results[b]] for b in backends}
    row("un-profiled step (median)", lambda b: f"{med(plain_t[b]):.1f} ms")
    row("profiled step (median)", lambda b: f"{med(prof_t[b]):.1f} ms")
    row("profiled / un-profiled (median of paired ratios)",
        lambda b: f"{statistics.median(p / q for p, q in zip(prof_t[b], plain_t[b])):.2f}x")
    row("profiled / un-profiled (ratio of medians)",
        lambda b: f"{statistics.median(prof_t[b]) / statistics.median(plain_t[b]):.2f}x")
    row("reported fwd latency", lambda b: f"{med([i.forward.latency for i in it[b]]):.1f} ms")
    row("reported bwd latency", lambda b: f"{med([i.backward.latency for i in it[b]]):.1f} ms")
    row("reported step latency", lambda b: f"{med([i.step.latency for i in it[b]]):.1f} ms")
    row("reported iteration latency", lambda b: f"{med([i.latency for i in it[b]]):.1f} ms")
    row("fwd / bwd / step GFLOPs (measured)", lambda b: f"{it[b][0].forward.flops / 1e9:.2f} / "
        f"{it[b][0].backward.flops / 1e9:.2f} / {it[b][0].step.flops / 1e9:.3f}")
    row("bwd / fwd FLOPs (measured; DeepSpeed assumes 2)",
        lambda b: f"{it[b][0].backward.flops / it[b][0].forward.flops:.3f}")
    row("bwd / fwd MACs (measured)", lambda b: f"{it[b][0].backward.macs / it[b][0].forward.macs:.3f}")


if __name__ == "__main__":
    main()
