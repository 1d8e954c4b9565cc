"""A model of 20,000 sibling modules (issue 18): what profiling it costs, against a plain forward.

    python benchmarks/wide_model.py [--modules 20000] [--runs 5]

Prints the median of ``--runs`` runs of a plain forward, ``flopsight.profile`` (count and
timing passes, the result built) and rendering its text and HTML reports, and the process's
peak resident memory. A ModuleList of Linear(2, 2) layers called in turn: the cost is per
module, not per FLOP.
"""

from __future__ import annotations

import argparse
import resource

import torch
from pairing import median_seconds

import flopsight


class Wide(torch.nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(2, 2) for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modules", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model, x = Wide(args.modules), torch.ones(1, 2)
    flopsight.profile(Wide(4), x)  # one-time costs (imports, the native recorder) left out
    with torch.no_grad():
        figures = {"plain forward": median_seconds(lambda: model(x), args.runs),
                   "flopsight.profile": median_seconds(lambda: flopsight.profile(model, x), args.runs)}
        result = flopsight.profile(model, x)
    figures["render text"] = median_seconds(lambda: result.render("text"), args.runs)
    figures["render html"] = median_seconds(lambda: result.render("html"), args.runs)
    print(f"{args.modules} sibling modules, median of {args.runs} runs:")
    for name, seconds in figures.items():
        print(f"  {name:<18} {seconds:8.3f} s")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  peak resident memory {peak:.0f} MB")
    return figures


if __name__ == "__main__":
    main()
