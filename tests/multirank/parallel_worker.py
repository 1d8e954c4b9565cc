"""Scenario ``parallel`` of scenarios.py, for tests/test_parallel_forms.py: 2 gloo ranks.

Writes ``<out>/<name>.rank<r>.json`` (a ProfileResult) for each of these, each one training
step (forward and backward) under ``Profiler(model)``:

* ``tp_python``, ``tp_native``: ``Linear(64, 256) -> ReLU -> Linear(256, 64)`` split column-
  then row-wise (``ColwiseParallel``, ``RowwiseParallel``) over a mesh named ``("tp",)``, on 8
  rows, with each backend;
* ``tp_unnamed``: the same on an unnamed mesh (the sizes read off the placements);
* ``tp_late_python``, ``tp_late_native``: the same with a ``ReLU`` after the row layer, which
  first uses its all-reduced output, and rank 1 late to the all-reduce by 0.3 s (it sleeps
  before the row layer): rank 0 waits for it inside the ReLU's op;
* ``tp_norm``: ``LayerNorm(64)`` left whole, then the same two layers split (the norm's work
  repeated on both ranks);
* ``loss_python``, ``loss_native``: ``Linear(64, 64) -> ReLU -> Linear(64, 32)`` and a cross
  entropy in one module: the first layer's input, 4 rows on each rank, all-gathered by
  ``PrepareModuleInput`` (the layer left whole), the last one split by columns with its
  output kept sharded (``use_local_output=False``), the loss computed on the sharded logits
  under ``loss_parallel()``, forward and backward;
* ``sp_native``: ``LayerNorm(64)`` in sequence parallel, then the same two
  layers (the first all-gathers the sequence, the second reduce-scatters it), on this rank's
  4 of 8 positions of 2 sequences;
* ``tp_failed``: the tensor-parallel model with a last layer that raises on rank 1, after the
  row layer's all-reduce (rank 0 only: its gathered result names rank 1 as failed);
* ``single``: the tensor-parallel model's layers in one process (rank 0 only), for the job's figures;
* ``pp_<schedule>_<backend>_<step>``: two pipeline stages of ``Linear(64, 64) -> Linear(64, 64)``
  (rank r runs stage r) under ``ScheduleGPipe`` or ``Schedule1F1B``, 4 micro-batches of 2 rows,
  each stage profiled with ``Profiler(stage_module)`` over its first step (``step1``: the one
  that infers the shapes) and its second (``step2``);
* ``moe_python``, ``moe_native``: ``Linear(64, 64)``, then a mixture of 2 experts
  (``Linear(64, 128) -> ReLU -> Linear(128, 64)``), one per rank, top-1: each rank routes 6 of
  its 8 tokens to rank 0's expert and 2 to rank 1's, with ``all_to_all_single`` there and
  back; one training step.
"""

import sys
import time
import warnings

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn
from helpers import PIPELINING_ON_GLOO
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    loss_parallel,
    parallelize_module,
)

import flopsight

out = sys.argv[1]
rank = dist.get_rank()


def save(name: str, result) -> None:
    result.save(f"{out}/{name}.rank{rank}.json")


def mlp(norm: bool = False) -> nn.Sequential:
    torch.manual_seed(0)
    layers = [nn.LayerNorm(64)] if norm else []
    return nn.Sequential(*layers, nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64))


def step(name: str, model: nn.Module, x: torch.Tensor, backend: str = "native") -> None:
    with flopsight.Profiler(model, backend=backend) as prof:
        model(x).sum().backward()
    save(name, prof.result)


named = init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
tensor_parallel = {"0": ColwiseParallel(), "2": RowwiseParallel()}
for backend in ("python", "native"):
    torch.manual_seed(1)
    step(f"tp_{backend}", parallelize_module(mlp(), named, tensor_parallel), torch.randn(8, 64), backend)
torch.manual_seed(1)
step("tp_unnamed", parallelize_module(mlp(), init_device_mesh("cpu", (2,)), tensor_parallel), torch.randn(8, 64))

def late(module, args):
    if rank == 1:
        time.sleep(LATE)


LATE = 0.3
for backend in ("python", "native"):
    torch.manual_seed(1)
    model = parallelize_module(mlp(), named, tensor_parallel).append(nn.ReLU())
    model[2].register_forward_pre_hook(late)
    step(f"tp_late_{backend}", model, torch.randn(8, 64), backend)

torch.manual_seed(1)
step("tp_norm", parallelize_module(mlp(norm=True), named, {"1": ColwiseParallel(), "3": RowwiseParallel()}),
     torch.randn(8, 64))

class WithLoss(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, target):
        return nn.functional.cross_entropy(self.model(x), target)


for backend in ("python", "native"):
    torch.manual_seed(3)
    gathered = PrepareModuleInput(input_layouts=(Shard(0),), desired_input_layouts=(Replicate(),),
                                  use_local_output=True)
    model = parallelize_module(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 32)), named,
                               {"0": gathered, "2": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)})
    wrapped = WithLoss(model)
    x, target = torch.randn(4, 64), torch.randint(0, 32, (8,))
    with flopsight.Profiler(wrapped, backend=backend) as prof, loss_parallel():
        wrapped(x, target).backward()
    save(f"loss_{backend}", prof.result)

sequence_parallel = {"0": SequenceParallel(), "1": ColwiseParallel(input_layouts=Shard(1)),
                     "3": RowwiseParallel(output_layouts=Shard(1))}
torch.manual_seed(2 + rank)  # (both backends are held alike on tensor parallelism, above)
step("sp_native", parallelize_module(mlp(norm=True), named, sequence_parallel), torch.randn(2, 4, 64))

def pipeline(name: str, schedule_class, backend: str) -> None:
    torch.manual_seed(10 + rank)
    stage_module = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64))
    stage = PipelineStage(stage_module, rank, 2, torch.device("cpu"))
    schedule = schedule_class(stage, 4, loss_fn=lambda out, target: ((out - target) ** 2).mean())
    x, target = torch.randn(8, 64), torch.randn(8, 64)
    for n in (1, 2):
        with flopsight.Profiler(stage_module, backend=backend) as prof:
            schedule.step(x) if rank == 0 else schedule.step(target=target, losses=[])
        save(f"{name}_{backend}_step{n}", prof.result)


for schedule_class, name in ((ScheduleGPipe, "pp_gpipe"), (Schedule1F1B, "pp_1f1b")) if PIPELINING_ON_GLOO else ():
    for backend in ("native", "python") if name == "pp_1f1b" else ("native",):
        pipeline(name, schedule_class, backend)

class MoE(nn.Module):
    """Top-1 routing to one expert per rank; the tokens go to their expert's rank and back
    with all_to_all_single (autograd's, so the backward exchanges their gradients)."""

    def __init__(self):
        super().__init__()
        self.router = nn.Linear(64, 2, bias=False)
        self.experts = nn.ModuleList([nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64))])

    def forward(self, x):
        gates = self.router(x).softmax(-1)
        choice = torch.tensor([0] * 6 + [1] * 2)  # a fixed routing, for counts worked by hand
        order = choice.argsort(stable=True)
        send = torch.bincount(choice, minlength=2)
        receive = torch.empty_like(send)
        dist.all_to_all_single(receive, send)  # how many tokens each expert gets from each rank
        send_rows, receive_rows = send.tolist(), receive.tolist()
        tokens = dist_nn.all_to_all_single(x.new_empty(sum(receive_rows), 64), x[order], receive_rows, send_rows)
        back = dist_nn.all_to_all_single(x.new_empty(8, 64), self.experts[0](tokens), send_rows, receive_rows)
        return back[order.argsort()] * gates.gather(1, choice[:, None])


class Raises(nn.Module):
    """Raises on rank 1 (after the tensor-parallel layers' collectives): a rank that fails."""

    def forward(self, x):
        if rank == 1:
            raise RuntimeError("rank 1's last layer failed")
        return x


failing = parallelize_module(mlp(), named, tensor_parallel).append(Raises())
torch.manual_seed(1)
prof = flopsight.Profiler(failing, gather_timeout=30)
try:
    with prof:
        failing(torch.randn(8, 64))
except RuntimeError:
    assert rank == 1
if rank == 0:
    save("tp_failed", prof.result)

# torch.distributed.nn's all_to_all_single (autograd's, in torch 2.9 to 2.15) says it is deprecated
warnings.filterwarnings("ignore", message=".*all_to_all_single is deprecated")
for backend in ("python", "native"):
    torch.manual_seed(20 + rank)
    model = nn.Sequential(nn.Linear(64, 64), MoE())
    step(f"moe_{backend}", model, torch.randn(8, 64), backend)

if rank == 0:
    torch.manual_seed(1)
    model = mlp()
    with flopsight.Profiler(model, gather_timeout=None) as prof:
        model(torch.randn(8, 64)).sum().backward()
    save("single", prof.result)
dist.barrier()
