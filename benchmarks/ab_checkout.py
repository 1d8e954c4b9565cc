"""flopsight's own cost against another checkout of it (the commit before a change), in pairs.

    git archive ead28ec src | tar -x -C /tmp/base            # the checkout to compare with
    python benchmarks/ab_checkout.py --baseline /tmp/base/src --pairs 10

Each pair runs this script's measurement once with the baseline's sources first on the path
and once with this tree's (the order kept, so the machine's drift hits both alike); each run
is a fresh process timing, on one thread, the median of many calls of: ``flopsight.profile``
of a 2-layer BERT (hidden 128, 1 x 32 tokens, no_grad), ``flopsight.profile`` of a tiny MLP of
10 Linears (where the fixed cost per profile dominates), and a training step of that MLP
inside ``flopsight.Profiler``. Printed: per figure, the median over pairs of this tree's time
over the baseline's, and the spread of those ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from pairing import median_seconds

SRC = Path(__file__).resolve().parents[1] / "src"
FIGURES = ("bert profile", "10-Linear profile", "10-Linear training step")


def measure() -> dict[str, float]:
    import torch
    from transformers import BertConfig, BertModel

    import flopsight

    torch.manual_seed(0)
    torch.set_num_threads(1)
    bert = BertModel(BertConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4,
                                intermediate_size=512)).eval()
    tokens = torch.ones(1, 32, dtype=torch.long)
    mlp = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(10)])
    x = torch.ones(2, 16)
    opt = torch.optim.SGD(mlp.parameters(), lr=0.01)

    def step():
        with flopsight.Profiler(mlp, optimizer=opt, gather_timeout=None):
            mlp(x).sum().backward()
            opt.step()

    with torch.no_grad():
        for _ in range(5):  # warm up: lazy imports, caches
            flopsight.profile(bert, tokens, warm_up=0)
        figures = {"bert profile": median_seconds(lambda: flopsight.profile(bert, tokens, warm_up=0), 60),
                   "10-Linear profile": median_seconds(lambda: flopsight.profile(mlp, x, warm_up=0), 400)}
    figures["10-Linear training step"] = median_seconds(step, 300)
    return figures


def _run(src: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run([sys.executable, __file__, "--measure"], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="the src/ folder of the checkout to compare with")
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure()))
        return
    if not args.baseline:
        parser.error("--baseline: expected the src/ folder of the checkout to compare with")
    ratios = {name: [] for name in FIGURES}
    for _ in range(args.pairs):
        base, new = _run(args.baseline), _run(str(SRC))
        for name in FIGURES:
            ratios[name].append(new[name] / base[name])
    print(f"| {args.pairs} pairs, this tree / baseline | median | min | max |")
    print("|---|---:|---:|---:|")
    for name, values in ratios.items():
        print(f"| {name} | {statistics.median(values):.3f}x | {min(values):.3f}x | {max(values):.3f}x |")


if __name__ == "__main__":
    main()
