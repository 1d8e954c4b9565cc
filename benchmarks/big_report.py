"""The text report of a model with ~15,000 modules: how long it takes to render.

    python benchmarks/big_report.py                  # 50 stages x 10 blocks x 29 Linear/ReLU
    python benchmarks/big_report.py --stages 5       # a smaller one
    python benchmarks/big_report.py --forward-only   # no backward pass (no bwd columns)

The model is plain torch (nested nn.Sequential of small Linears and ReLUs, every block
identical, so ``collapse=True`` folds each stage's 10 blocks and the 50 stages into one
entry), profiled on CPU with tiny inputs. Each variant of the report is rendered a few times
and the fastest run printed with the report's size. Figures are printed, never asserted
(tests never assert on wall-clock time).
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

import flopsight
from flopsight.renderers.text_renderer import render_text


def build(stages: int, blocks: int, leaves: int, width: int = 8) -> nn.Module:
    """stages x blocks x leaves Linear/ReLU modules under two levels of nn.Sequential."""
    def block() -> nn.Sequential:
        return nn.Sequential(*[nn.Linear(width, width) if k % 2 == 0 else nn.ReLU() for k in range(leaves)])

    return nn.Sequential(*[nn.Sequential(*[block() for _ in range(blocks)]) for _ in range(stages)])


#: report variant -> render_text's options
VARIANTS = {
    "default (DeepSpeed's layout)": {},
    "collapse=True": {"collapse": True},
    "detail_depth=2": {"detail_depth": 2},
    "collapse=True, ops=3": {"collapse": True, "ops": 3},
    "ops=3 (every module)": {"ops": 3},
}


def best_of(repeat: int, fn) -> tuple[float, object]:
    """The fastest of ``repeat`` runs of ``fn()``, in seconds, and what it returned."""
    best, value = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return best, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", type=int, default=50)
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--leaves", type=int, default=29)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--forward-only", action="store_true")
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    model = build(args.stages, args.blocks, args.leaves)
    x = torch.ones(2, 8)
    start = time.perf_counter()
    if args.forward_only:
        result = flopsight.profile(model, x, warm_up=0)
    else:
        with flopsight.Profiler(model) as prof:
            model(x).sum().backward()
        result = prof.result
    profiled = time.perf_counter() - start
    print(f"modules: {len(result.modules)}, phases: {', '.join(result.phases)}, profiled in {profiled:.2f} s")
    for name, options in VARIANTS.items():
        seconds, text = best_of(args.repeat, lambda: render_text(result, **options))
        print(f"render_text, {name:<30} {seconds:7.3f} s  {len(text.splitlines()):>7} lines  {len(text) / 1e6:6.2f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
