"""Lightning: profile one training step of a ``lightning.Trainer`` run with FlopsightCallback.

    python examples/lightning_trainer.py                  # writes the report and metrics.csv under out/
    python examples/lightning_trainer.py --accumulate 2   # a step of two micro-batches
    python examples/lightning_trainer.py --peak 1e12      # MFU against a peak of 1 TFLOP/s

A small MLP trains on random data on the CPU for a few steps; the callback profiles step
``--profile-step`` (in ``trainer.global_step`` numbering), logs the ``flopsight/...``
figures to the CSV logger and writes ``flopsight_profile.html`` beside its metrics.csv.
"""

import argparse

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from flopsight.integrations.lightning import FlopsightCallback


class MLP(L.LightningModule):
    def __init__(self, width: int = 64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, width), nn.ReLU(), nn.Linear(width, 10))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def main(argv=None) -> FlopsightCallback:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out", help="the logger's folder (created)")
    parser.add_argument("--profile-step", type=int, default=1, help="the trainer.global_step to profile")
    parser.add_argument("--accumulate", type=int, default=1, help="accumulate_grad_batches")
    parser.add_argument("--peak", type=float, default=None, help="the device's peak FLOP/s, for MFU")
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(256, 32), torch.randint(0, 10, (256,)))
    callback = FlopsightCallback(profile_step=args.profile_step, output="flopsight_profile.html", peak=args.peak)
    trainer = L.Trainer(
        max_steps=args.profile_step + 2,
        accumulate_grad_batches=args.accumulate,
        callbacks=[callback],
        logger=CSVLogger(args.out, name="lightning"),
        accelerator="cpu",
        devices=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(MLP(), DataLoader(data, batch_size=32))

    for name, value in callback.metrics.items():
        print(f"{name:42} {value:.6g}")
    print("report:", callback.path)
    print("metrics:", f"{trainer.logger.log_dir}/metrics.csv")
    return callback


if __name__ == "__main__":
    main()
