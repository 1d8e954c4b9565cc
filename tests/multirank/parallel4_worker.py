"""Scenario ``parallel4`` of scenarios.py, for tests/test_parallel_forms.py: 4 gloo ranks.

Writes ``<out>/<name>.rank<r>.json`` (a ProfileResult) for each of these:

* ``fsdp_tp``: ``Linear(64, 256) -> ReLU -> Linear(256, 64)`` on a 2 x 2 mesh named
  ``("dp", "tp")``: split column- then row-wise over "tp", then sharded with ``fully_shard``
  over "dp"; one training step (forward, backward) on 8 rows per data-parallel rank;
* ``pp4_step2``: four pipeline stages of ``Linear(64, 64) -> Linear(64, 64)`` (rank r runs
  stage r), ``Schedule1F1B``, 8 micro-batches of 2 rows, the second step profiled;
* ``interleaved_step2``: eight such stages, two per rank (rank r runs stages r and r + 4),
  ``ScheduleInterleaved1F1B``, 8 micro-batches of 2 rows, profiled with ``Profiler`` of a
  ``ModuleDict`` of the rank's two stage modules, the second step.
"""

import sys
import warnings

import torch
import torch.distributed as dist
from helpers import PIPELINING_ON_GLOO
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleInterleaved1F1B
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import flopsight

out = sys.argv[1]
rank = dist.get_rank()


def save(name: str, result) -> None:
    result.save(f"{out}/{name}.rank{rank}.json")


# the row layer hands FSDP2 its output as a view of the local tensor: FSDP2 warns of in-place use
warnings.filterwarnings("ignore", message="FSDP2-wrapped module")
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64))
parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
fully_shard(model, mesh=mesh["dp"])
torch.manual_seed(100 + mesh.get_coordinate()[0])  # the same rows on both ranks of a tensor-parallel pair
x = torch.randn(8, 64)
with flopsight.Profiler(model) as prof:
    model(x).sum().backward()
save("fsdp_tp", prof.result)


def loss(out, target):
    return ((out - target) ** 2).mean()


def stage_module(index: int) -> nn.Module:
    torch.manual_seed(index)
    return nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64))


x, target = torch.randn(16, 64), torch.randn(16, 64)


def steps(name: str, schedule, profiled: nn.Module, first: bool, last: bool) -> None:
    """The schedule's first step (shape inference), then its second, profiled."""

    def step():
        if first:
            schedule.step(x, target=target if last else None, losses=[] if last else None)
        else:
            schedule.step(target=target if last else None, losses=[] if last else None)

    step()
    with flopsight.Profiler(profiled) as prof:
        step()
    save(f"{name}_step2", prof.result)


if PIPELINING_ON_GLOO:
    module = stage_module(rank)
    stage = PipelineStage(module, rank, 4, torch.device("cpu"))
    steps("pp4", Schedule1F1B(stage, 8, loss_fn=loss), module, rank == 0, rank == 3)

    modules = nn.ModuleDict({"a": stage_module(rank), "b": stage_module(rank + 4)})
    stages = [PipelineStage(modules["a"], rank, 8, torch.device("cpu")),
              PipelineStage(modules["b"], rank + 4, 8, torch.device("cpu"))]
    # every rank runs the first stage's and the last one's part of the schedule: x and target everywhere
    schedule = ScheduleInterleaved1F1B(stages, 8, loss_fn=loss)
    steps("interleaved", schedule, modules, True, True)
dist.barrier()
