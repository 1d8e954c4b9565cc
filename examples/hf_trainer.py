"""HF Trainer: profile one training step of a ``transformers.Trainer`` run with FlopsightCallback.

    python examples/hf_trainer.py                      # writes out/hf_trainer/flopsight_profile.html
    python examples/hf_trainer.py --accumulate 2       # a step of two micro-batches
    python examples/hf_trainer.py --peak 1e12          # MFU against a peak of 1 TFLOP/s

A small GPT-2 (built from a config, random weights, nothing downloaded) trains on random
token ids on the CPU for a few steps; the callback profiles step ``--profile-step`` (the
optimizer steps taken before it, as DeepSpeed counts: 0 is the first step), logs the ``flopsight/...``
figures into ``trainer.state.log_history`` and writes the report into the Trainer's
``output_dir``. The script prints the logged figures and the report's path.
"""

import argparse

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from flopsight.integrations.hf import FlopsightCallback


class RandomTokens(torch.utils.data.Dataset):
    """``size`` sequences of ``seq_len`` random token ids, the labels a causal LM shifts itself."""

    def __init__(self, size: int, seq_len: int, vocab: int):
        self.ids = torch.randint(0, vocab, (size, seq_len), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main(argv=None) -> FlopsightCallback:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/hf_trainer", help="the Trainer's output_dir (created)")
    parser.add_argument("--profile-step", type=int, default=1,
                        help="the step to profile: optimizer steps taken before it (0: the first)")
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps to train (max_steps)")
    parser.add_argument("--accumulate", type=int, default=1, help="gradient_accumulation_steps")
    parser.add_argument("--batch-size", type=int, default=4, help="per_device_train_batch_size")
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--peak", type=float, default=None, help="the device's peak FLOP/s, for MFU")
    args = parser.parse_args(argv)

    transformers.logging.set_verbosity_error()  # keep the output to the figures
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=args.seq_len,
                        bos_token_id=0, eos_token_id=0)
    training = TrainingArguments(
        output_dir=args.out, use_cpu=True, report_to=[], save_strategy="no", max_steps=args.steps,
        per_device_train_batch_size=args.batch_size, gradient_accumulation_steps=args.accumulate,
        logging_steps=1, disable_tqdm=True, seed=0,
    )
    callback = FlopsightCallback(profile_step=args.profile_step, output="flopsight_profile.html", peak=args.peak)
    data = RandomTokens(args.batch_size * args.accumulate * args.steps, args.seq_len, config.vocab_size)
    trainer = Trainer(model=GPT2LMHeadModel(config), args=training, train_dataset=data, callbacks=[callback])
    trainer.train()

    print(f"\nprofile_step {args.profile_step}, as logged in trainer.state.log_history:")
    for key, value in callback.metrics.items():
        print(f"  {key:<30} {value:.6g}")
    for path in callback.written:
        print(f"report: {path}")
    return callback


if __name__ == "__main__":
    main()
