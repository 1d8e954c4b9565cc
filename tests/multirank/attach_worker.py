"""Scenario ``attach`` of scenarios.py, for tests/test_config_hook.py: 2 gloo ranks.

Each rank trains a DDP model for 3 steps under ``flopsight.attach`` with a DeepSpeed config
whose block profiles step 2 (``profile_step`` 1: one step taken before it) into
``OUT/report.txt`` (rank 0 prints it); rank r's batch has 4 + 2r rows, which tells the
ranks' results apart. Every rank writes ``OUT/rank<r>.json``: what its handle says, and the
optimizer hooks left behind.
"""

import json
import sys

import torch
import torch.distributed as dist
from torch import nn

import flopsight

out = sys.argv[1]
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.Linear(16, 4)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
config = {"flops_profiler": {"enabled": True, "profile_step": 1, "output_file": f"{out}/report.txt"}}
rows = 4 if rank == 0 else 6
with flopsight.attach(model, opt, config) as handle:
    for _step in range(3):
        model(torch.ones(rows, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
state = {
    "steps": handle.steps, "done": handle.done, "attached": handle.attached,
    "report": handle.report is not None, "result": handle.result is not None,
    "ranks": [r.iteration.samples if r else None for r in handle.result.ranks],
    "hooks": [len(opt._optimizer_step_post_hooks), len(opt._optimizer_step_pre_hooks)],
}
with open(f"{out}/rank{rank}.json", "w") as f:
    json.dump(state, f)
