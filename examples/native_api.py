"""The native API: profile a model, read the figures, save the reports.

    python examples/native_api.py                 # prints figures, writes profile.{json,html,csv,md} under out/
    python examples/native_api.py --out /tmp/fs   # somewhere else

A forward pass with ``flopsight.profile``, then a training step with ``flopsight.Profiler``;
each result is data (``result.total``, ``result.module(path)``, ``result.iteration``) and
saves in the format its file name says.
"""

import argparse
import os

import torch
from torch import nn

import flopsight


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out", help="folder for the reports (created)")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(16, 10))
    x = torch.randn(8, 3, 32, 32)

    # a forward pass: counted in a warm-up pass, timed in a separate one
    with torch.no_grad():
        result = flopsight.profile(model, x)
    print("forward MACs:", flopsight.macs_to_string(result.total.forward.macs))
    print("conv's share of FLOPs:", f"{result.module('0').forward.flops / result.total.forward.flops:.1%}")
    print("top operators:", list(result.ops())[:3])

    # a training step: forward, backward and optimizer step, each measured
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with flopsight.Profiler(model, optimizer=opt) as prof:
        nn.functional.cross_entropy(model(x), torch.randint(0, 10, (8,))).backward()
        opt.step()
    it = prof.result.iteration
    print("training step FLOPs (fwd, bwd, step):", it.forward.flops, it.backward.flops, it.step.flops)
    for name in ("profile.json", "profile.html", "profile.csv", "profile.md", "profile.trace.json"):
        prof.result.save(os.path.join(args.out, name))
    print("wrote", ", ".join(sorted(os.listdir(args.out))), "in", args.out)


if __name__ == "__main__":
    main()
