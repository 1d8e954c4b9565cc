"""Scenario ``collectives`` of scenarios.py, for tests/test_communication.py and tests/test_trace.py: 2 gloo ranks.

Writes ``<out>/<scenario>.rank<r>.json`` (a ProfileResult) for each scenario:

* ``direct``: one of each collective called from user code, under ``Profiler()``;
* ``ddp``: one DDP training step of a small MLP under ``Profiler(ddp_model, optimizer)``;
* ``module``: a module whose forward all-reduces its output (tensor parallelism's row layer);
* ``overlap``: an asynchronous all-reduce hidden behind rank 0's compute, then a synchronous one;
* ``ddp_buckets``: DDP reducing three layers' gradients in three buckets;
* ``fsdp2``: one training step of a small MLP sharded with ``fully_shard`` (FSDP2);
* ``late_reduce_scatter``: rank 1 joins a reduce-scatter into one tensor (gloo's has no future:
  its wait copies this rank's part out of an all-reduce) 0.2 s late, then an asynchronous one;
  each rank's own measure of the two calls (issue to the wait's return) in
  ``late_reduce_scatter.rank<r>.seconds``, and whether ``Work.wait`` was put back;
* ``nested_reduce_scatter``: an asynchronous one issued in two profiles at once, the inner one
  stopped before the wait, rank 1 0.2 s late: the outer one's (its measure in its ``.seconds``).
"""

import pathlib
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import flopsight

out = sys.argv[1]
rank = dist.get_rank()
torch.manual_seed(0)


def save(name: str, result) -> None:
    result.save(f"{out}/{name}.rank{rank}.json")


with flopsight.Profiler() as prof:
    dist.all_reduce(torch.ones(100))  # 400 bytes
    dist.all_gather([torch.zeros(3), torch.zeros(3)], torch.ones(3))  # 12 bytes this rank gives
    dist.all_gather_into_tensor(torch.zeros(6), torch.ones(3))  # 12 bytes
    dist.reduce_scatter_tensor(torch.zeros(2), torch.ones(4))  # 8 bytes this rank keeps
    dist.broadcast(torch.ones(5), src=0)  # 20 bytes
    dist.all_to_all_single(torch.zeros(4), torch.ones(4))  # 16 bytes
    if rank == 0:
        dist.send(torch.ones(6), dst=1)  # 24 bytes
    else:
        dist.recv(torch.zeros(6), src=0)  # 24 bytes
    dist.barrier()
    summed = fc.all_reduce(torch.ones(8), "sum", dist.group.WORLD)  # 32 bytes
    assert float(summed.sum()) == 16.0  # waits for it
save("direct", prof.result)

model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with flopsight.Profiler(model, optimizer=opt) as prof:
    model(torch.randn(8, 16)).sum().backward()
    opt.step()
save("ddp", prof.result)


class RowParallel(nn.Module):
    """Each rank holds half of a linear layer; the partial outputs are summed across ranks."""

    def __init__(self):
        super().__init__()
        self.part = nn.Linear(8, 4, bias=False)

    def forward(self, x):
        y = self.part(x)
        dist.all_reduce(y)  # 2 x 4 fp32: 32 bytes
        return y


model = nn.Sequential(nn.Linear(8, 8), RowParallel())
with flopsight.Profiler(model) as prof:
    model(torch.randn(2, 8))
save("module", prof.result)

# Rank 1 joins the asynchronous all-reduce only once rank 0 has run ops in its flight (a file
# says so, not a collective of its own): rank 0's flight surely holds compute, however the machine
# schedules the ranks. Rank 1's may not (its half can land before its first op).
computing = pathlib.Path(out, "overlap.rank0-computing")
dist.barrier()
with flopsight.Profiler() as prof:
    while rank == 1 and not computing.exists():
        time.sleep(0.001)
    work = dist.all_reduce(torch.ones(250_000), async_op=True)  # 1 MB
    x = torch.randn(128, 128)
    for i in range(200):
        x = torch.tanh(x @ x)
        if rank == 0 and i == 0:
            computing.touch()
    work.wait()
    dist.all_reduce(torch.ones(1000))  # the rank waits for this one
save("overlap", prof.result)

# three 1 MB layers with 1 MB buckets: DDP reduces one bucket per layer
torch.manual_seed(0)
model = DistributedDataParallel(nn.Sequential(nn.Linear(512, 512), nn.Linear(512, 512), nn.Linear(512, 512)),
                                bucket_cap_mb=1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _step in range(2):  # DDP settles its buckets after the first step; the second is profiled
    with flopsight.Profiler(model, optimizer=opt) as prof:
        model(torch.randn(4, 512)).sum().backward()
        opt.step()
        opt.zero_grad()
save("ddp_buckets", prof.result)

from torch.distributed.fsdp import fully_shard  # noqa: E402

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
fully_shard(model[0])
fully_shard(model[2])
fully_shard(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _step in range(2):  # the second step is profiled
    with flopsight.Profiler(model, optimizer=opt) as prof:
        model(torch.randn(8, 16)).sum().backward()
        opt.step()
        opt.zero_grad()
save("fsdp2", prof.result)


original_wait = dist.Work.__dict__["wait"]
dist.barrier()
with flopsight.Profiler() as prof:
    if rank == 1:
        time.sleep(0.2)
    t0 = time.perf_counter()
    dist.reduce_scatter_tensor(torch.zeros(2), torch.ones(4))  # 8 bytes this rank keeps
    t1 = time.perf_counter()
    if rank == 1:
        time.sleep(0.2)
    work = dist.reduce_scatter_tensor(torch.zeros(2), torch.ones(4), async_op=True)
    work.wait()
    t2 = time.perf_counter()
save("late_reduce_scatter", prof.result)
pathlib.Path(out, f"late_reduce_scatter.rank{rank}.seconds").write_text(
    f"{t1 - t0} {t2 - t1} {dist.Work.__dict__['wait'] is original_wait}")

dist.barrier()
with flopsight.Profiler() as outer:
    with flopsight.Profiler(gather_timeout=None):
        if rank == 1:
            time.sleep(0.2)
        t0 = time.perf_counter()
        work = dist.reduce_scatter_tensor(torch.zeros(2), torch.ones(4), async_op=True)
    work.wait()  # the inner profile has stopped: the outer one still sees it end here
    t1 = time.perf_counter()
save("nested_reduce_scatter", outer.result)
pathlib.Path(out, f"nested_reduce_scatter.rank{rank}.seconds").write_text(
    f"{t1 - t0} {dist.Work.__dict__['wait'] is original_wait}")
