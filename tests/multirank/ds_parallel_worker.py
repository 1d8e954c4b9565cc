"""Scenario ``ds_parallel`` of scenarios.py, for tests/test_parallel_forms.py: DeepSpeed's own
pipeline and expert parallelism on 2 CPU ranks started by DeepSpeed's launcher.

Writes ``<out>/<name>.rank<r>.json`` (a ProfileResult) for:

* ``pipe``: a ``PipelineModule`` of four ``Linear(64, 64)`` in two stages (rank r runs stage r:
  two layers), a squared-error loss, trained by its ``PipelineEngine`` with a batch of 8 in 4
  micro-batches of 2 rows; its second ``train_batch`` profiled with ``Profiler(engine.module)``;
* ``moe``: ``Linear(64, 64)``, then ``deepspeed.moe.layer.MoE`` of 2 experts
  (``Linear(64, 128) -> ReLU -> Linear(128, 64)``) over both ranks (``ep_size`` 2, top-1, a
  capacity of 4 tokens an expert), then ``Linear(64, 64)``, on 4 rows a rank; its second
  training step (forward, ``engine.backward``, ``engine.step``) profiled with
  ``Profiler(engine.module)``.

The MoE model comes first: DeepSpeed's groups keep the pipeline's topology once it is made (and
an expert-parallel group over it would not divide); the scenario runs last in its launch.
"""

import sys

import deepspeed
import torch
import torch.distributed as dist
from deepspeed.moe.layer import MoE
from deepspeed.moe.utils import split_params_into_different_moe_groups_for_optimizer
from deepspeed.pipe import PipelineModule
from torch import nn

import flopsight

out = sys.argv[1]
rank = dist.get_rank()

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp, self.out = nn.Linear(64, 64), nn.Linear(64, 64)
        expert = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64))
        self.moe = MoE(hidden_size=64, expert=expert, num_experts=2, ep_size=2, k=1, min_capacity=4,
                       capacity_factor=1.0)

    def forward(self, x):
        h, aux, _ = self.moe(torch.relu(self.inp(x)))
        return self.out(h), aux


torch.manual_seed(0)
net = Net()
groups = split_params_into_different_moe_groups_for_optimizer({"params": list(net.parameters()), "name": "all"})
engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=groups, config={
    "train_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "steps_per_print": 1000,
    "optimizer": {"type": "SGD", "params": {"lr": 0.01}}})
g = torch.Generator().manual_seed(10 + rank)
x, y = torch.randn(4, 64, generator=g), torch.randn(4, 64, generator=g)


def step():
    out, aux = engine(x)
    engine.backward(nn.functional.mse_loss(out, y) + 0.01 * aux)
    engine.step()


step()
with flopsight.Profiler(engine.module) as prof:
    step()
prof.result.save(f"{out}/moe.rank{rank}.json")


torch.manual_seed(0)
pipe = PipelineModule(layers=[nn.Linear(64, 64) for _ in range(4)], num_stages=2, loss_fn=nn.MSELoss(),
                      partition_method="uniform")
engine, _, _, _ = deepspeed.initialize(model=pipe, model_parameters=list(pipe.parameters()), config={
    "train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1000,
    "optimizer": {"type": "SGD", "params": {"lr": 0.01}}})


def batches():
    g = torch.Generator().manual_seed(1)
    while True:
        yield torch.randn(2, 64, generator=g), torch.randn(2, 64, generator=g)


data = batches()
engine.train_batch(data_iter=data)
with flopsight.Profiler(engine.module) as prof:
    engine.train_batch(data_iter=data)
prof.result.save(f"{out}/pipe.rank{rank}.json")
