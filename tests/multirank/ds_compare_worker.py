"""Scenario ``compare`` of scenarios.py: DeepSpeed's own flops profiler and flopsight's engine
drop-in on the same runs, their reports
side by side (tests/test_deepspeed_report_lines.py compares them line by line).

On 2 CPU ranks started by DeepSpeed's launcher: for ZeRO stages 0 to 3 and gradient accumulation 1 and 2, trains
the MLP of ``deepspeed_worker.py`` for 3 steps with the ``flops_profiler`` block enabled at
``profile_step`` 2, once with DeepSpeed's profiler (``OUT/deepspeed/<stage>_<ga>.txt``) and once
after ``flopsight.deepspeed.install()`` (``OUT/flopsight/<stage>_<ga>.txt``).
"""

import os
import sys
import warnings

import deepspeed
import torch
from torch import nn

import flopsight.deepspeed

warnings.filterwarnings("ignore")
out = sys.argv[-1]


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


for who in ("deepspeed", "flopsight"):
    if who == "flopsight":
        flopsight.deepspeed.install()
    for stage in range(4):
        for ga in (1, 2):
            torch.manual_seed(0)
            config = {
                "train_micro_batch_size_per_gpu": 4,
                "gradient_accumulation_steps": ga,
                "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
                "zero_optimization": {"stage": stage},
                "flops_profiler": {"enabled": True, "profile_step": 2, "top_modules": 2,
                                   "output_file": f"{out}/{who}/{stage}_{ga}.txt"},
            }
            os.makedirs(f"{out}/{who}", exist_ok=True)
            engine, _, _, _ = deepspeed.initialize(model=MLP(), config=config)
            for _step in range(3):
                for _ in range(ga):
                    engine.backward(engine(torch.randn(4, 16)).pow(2).mean())
                    engine.step()
flopsight.deepspeed.uninstall()
