"""Profile step 2 of a plain training loop from a DeepSpeed config's flops_profiler block.

    python examples/deepspeed_config.py                     # prints DeepSpeed's report at step 2
    python examples/deepspeed_config.py --config ds.json    # your own DeepSpeed config file

``flopsight.attach`` reads the block as DeepSpeed's engine would (``enabled``,
``profile_step``, ``module_depth``, ``top_modules``, ``detailed``, ``output_file``) and
profiles that step of the loop without touching it: forward, backward and the optimizer step.
``profile_step`` counts as the engine does, the optimizer steps taken before the profiled
one: 1 (DeepSpeed's default) is the loop's second step, 0 its first.
No DeepSpeed install is needed; inside a DeepSpeed engine use
``flopsight.deepspeed.install()`` instead (docs/howto/deepspeed.md).
"""

import argparse

import torch
from torch import nn

import flopsight

CONFIG = {
    "train_micro_batch_size_per_gpu": 16,
    "flops_profiler": {"enabled": True, "profile_step": 1, "module_depth": -1, "top_modules": 1, "detailed": False},
}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="a DeepSpeed config JSON file (default: a built-in one)")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    handle = flopsight.attach(model, opt, args.config or CONFIG)   # the one added line
    for _ in range(args.steps):
        x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    handle.close()  # removes its hooks (they are gone already once the step was profiled)


if __name__ == "__main__":
    main()
