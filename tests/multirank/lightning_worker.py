"""Scenario ``lightning`` of scenarios.py, for tests/test_lightning_callback.py: a
``lightning.Trainer`` with ``strategy="ddp"`` on 2 gloo ranks (under torchrun Lightning starts
no processes of its own and takes the process group the scenarios share).

Each rank trains a small MLP for 3 steps with ``FlopsightCallback(profile_step=1)``, logging to
``OUT``, and writes ``OUT/rank<r>.json``: what its callback holds and where it wrote.
"""

import json
import os
import sys

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from flopsight.integrations.lightning import FlopsightCallback


class MLP(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        return nn.functional.mse_loss(self(batch[0]), batch[1])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


out = sys.argv[1]
torch.manual_seed(0)
data = TensorDataset(torch.randn(64, 8), torch.randn(64, 4))
callback = FlopsightCallback(profile_step=1, output="profile.json", gather_timeout=60)
trainer = L.Trainer(default_root_dir=out, max_steps=3, callbacks=[callback], logger=CSVLogger(out),
                    accelerator="cpu", devices=2, strategy="ddp", enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
trainer.fit(MLP(), DataLoader(data, batch_size=4))
it = callback.result.iteration
state = {"rank": trainer.global_rank, "path": callback.path, "metrics": callback.metrics,
         "ranks": [r.iteration.model_flops for r in callback.result.ranks],
         "world_size": callback.result.metadata.world_size, "forward_calls": it.forward.calls,
         "log_dir": trainer.log_dir}
with open(os.path.join(out, f"rank{trainer.global_rank}.json"), "w") as f:
    json.dump(state, f)
