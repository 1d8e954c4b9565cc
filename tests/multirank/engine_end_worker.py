"""For tests/test_process_end.py: the DeepSpeed engine drop-in on 2 CPU ranks, its
``flops_profiler`` block profiling steps 2 to 9 into ``OUT/report.txt``, with training that
ends before them: ``raise`` (rank 1 raises in the fourth step) or ``steps`` (5 steps trained).

    DS_ACCELERATOR=cpu deepspeed --num_gpus 2 tests/multirank/engine_end_worker.py raise|steps OUT
"""

import sys

import deepspeed
import torch
from torch import nn

import flopsight.deepspeed

how, out = [a for a in sys.argv[1:] if not a.startswith("--local_rank")]  # the launcher adds --local_rank
flopsight.deepspeed.install()
deepspeed.init_distributed()
rank = torch.distributed.get_rank()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
config = {"train_micro_batch_size_per_gpu": 4,
          "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
          "flops_profiler": {"enabled": True, "profile_step": 2, "steps": 8, "detailed": False,
                             "output_file": f"{out}/report.txt"}}
engine, _, _, _ = deepspeed.initialize(model=model, config=config)
for step in range(5):
    if how == "raise" and step == 3 and rank == 1:
        raise RuntimeError("rank 1 fails")
    loss = engine(torch.randn(4, 16)).pow(2).mean()
    engine.backward(loss)
    engine.step()
