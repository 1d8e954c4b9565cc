"""``python -m flopsight``: profile a built-in model and print the report.

    python -m flopsight                                  # ResNet-18, batch 1, full report
    python -m flopsight --model resnet50 --no-detailed --top 2
    python -m flopsight diff a.json b.json --fail-on "flops>+1%"   # compare two saved profiles
"""

from __future__ import annotations

import argparse
import sys

import torch

from .profiler import profile
from .renderers.output import print_report
from .zoo import MODELS, build


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["diff"]:  # the one subcommand: everything else is the profile command, as before
        from .diff_cli import main as diff_main

        return diff_main(argv[1:])
    parser = argparse.ArgumentParser(prog="flopsight", description=__doc__.splitlines()[0],
                                     epilog="flopsight diff a.json b.json: compare two profiles (flopsight diff --help)")
    parser.add_argument("--model", default="resnet18", choices=sorted(MODELS), help="built-in model (default: resnet18)")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--depth", type=int, default=-1, help="aggregated profile depth (-1: all)")
    parser.add_argument("--top", type=int, default=3, help="top modules per depth")
    parser.add_argument("--no-detailed", action="store_true", help="omit the per-module tree")
    parser.add_argument("--warm-up", type=int, default=1)
    args = parser.parse_args(argv)

    model, inputs = build(args.model, args.batch_size)
    with torch.no_grad():
        result = profile(model, inputs, warm_up=args.warm_up)
    print_report(result, profile_step=args.warm_up, module_depth=args.depth, top_modules=args.top,
                 detailed=not args.no_detailed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
