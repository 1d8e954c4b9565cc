"""A profiled training step against an un-profiled one, measured in one run.

    python benchmarks/training_step.py                 # BERT-base, batch 1 x 128, AdamW
    python benchmarks/training_step.py --repeats 11 --seq-len 64

Each round runs an un-profiled step (forward, backward, AdamW step) and a step inside
``flopsight.Profiler(model, optimizer=opt)``, interleaved; the ratio is the median, over
rounds, of the profiled step's time divided by the plain step's time in the same round
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

    def profiled():
        with flopsight.Profiler(model, optimizer=opt) as prof:
            step()
        return prof.result

    step()  # warm up both paths (allocator, optimizer state, lazy imports)
    profiled()
    plain_t, prof_t, results = [], [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        step()
        plain_t.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        results.append(profiled())
        prof_t.append(time.perf_counter() - t0)

    ratio = statistics.median(p / q for p, q in zip(prof_t, plain_t))
    it = [r.iteration for r in results]

    def med(values):
        return statistics.median(values) * 1e3

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, BERT-base for sequence classification, "
          f"batch {args.batch_size} x {args.seq_len}, AdamW, {args.repeats} interleaved rounds\n")
    print("| measure | value |")
    print("|---|---:|")
    print(f"| un-profiled step (median) | {med(plain_t):.1f} ms |")
    print(f"| profiled step (median) | {med(prof_t):.1f} ms |")
    print(f"| profiled / un-profiled (median of paired ratios) | {ratio:.2f}x |")
    print(f"| profiled / un-profiled (ratio of medians) | {statistics.median(prof_t) / statistics.median(plain_t):.2f}x |")
    print(f"| reported fwd latency | {med([i.forward.latency for i in it]):.1f} ms |")
    print(f"| reported bwd latency | {med([i.backward.latency for i in it]):.1f} ms |")
    print(f"| reported step latency | {med([i.step.latency for i in it]):.1f} ms |")
    print(f"| reported iteration latency | {med([i.latency for i in it]):.1f} ms |")
    fwd, bwd = it[0].forward, it[0].backward
    print(f"| fwd / bwd / step GFLOPs (measured) | {fwd.flops / 1e9:.2f} / {bwd.flops / 1e9:.2f} / {it[0].step.flops / 1e9:.3f} |")
    print(f"| bwd / fwd FLOPs (measured; DeepSpeed assumes 2) | {bwd.flops / fwd.flops:.3f} |")
    print(f"| bwd / fwd MACs (measured) | {bwd.macs / fwd.macs:.3f} |")


if __name__ == "__main__":
    main()
