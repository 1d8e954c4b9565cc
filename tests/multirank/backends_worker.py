"""Scenario ``backends`` of scenarios.py, for tests/test_backends_ranks.py: 2 gloo ranks.

The same training step on both backends, memory on: each model is built afresh from the same
seed, takes one unprofiled step (DDP and FSDP2 settle their buckets and buffers), then one step
under ``Profiler(model, optimizer, memory=True, backend=...)``. Writes
``<out>/<model>.<backend>.rank<r>.json``:

* ``ddp``: an MLP under DDP (its gradient all-reduce runs in the backward, from a hook);
* ``fsdp2``: an MLP sharded with ``fully_shard`` (all-gathers, reduce-scatters, FSDP2's copies);
* ``row``: a tensor-parallel row layer that all-reduces its output in the forward, and a
  functional all-reduce waited for later.
"""

import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

import flopsight

out = sys.argv[1]
rank = dist.get_rank()


def mlp():
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 10))


def ddp():
    return DistributedDataParallel(mlp(), bucket_cap_mb=0.1)  # two buckets


def fsdp2():
    model = mlp()
    for layer in (model[0], model[2], model[4]):
        fully_shard(layer)
    return fully_shard(model)


class Row(nn.Module):
    """Each rank holds part of a layer; the partial outputs are summed across ranks."""

    def __init__(self):
        super().__init__()
        self.up, self.part = nn.Linear(64, 128), nn.Linear(128, 64, bias=False)

    def forward(self, x):
        y = self.part(torch.relu(self.up(x)))
        dist.all_reduce(y.detach())  # summed in place (a real layer wraps it in an autograd function)
        z = fc.all_reduce(y.detach().sum(0), "sum", dist.group.WORLD)  # waited for below
        return y * 2 + z.sum()


for name, build in {"ddp": ddp, "fsdp2": fsdp2, "row": Row}.items():
    for backend in ("python", "native"):
        torch.manual_seed(0)
        model = build()
        opt = torch.optim.AdamW(model.parameters())
        x = torch.randn(32, 64)

        def step():
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()

        step()
        with flopsight.Profiler(model, optimizer=opt, memory=True, backend=backend) as prof:
            step()
        prof.result.save(f"{out}/{name}.{backend}.rank{rank}.json")
