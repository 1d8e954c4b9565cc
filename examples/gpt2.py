"""Profile GPT-2 small (built offline from its default config): one forward of a batch.

    python examples/gpt2.py                      # batch 1, sequence 128
    python examples/gpt2.py --seq-len 32 --layers 2
"""

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from flopsight import get_model_profile


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--layers", type=int, default=12)
    args = parser.parse_args(argv)

    model = GPT2LMHeadModel(GPT2Config(n_layer=args.layers))
    input_ids = torch.randint(0, model.config.vocab_size, (args.batch_size, args.seq_len))
    flops, macs, params = get_model_profile(model, args=[input_ids], kwargs={"use_cache": False})
    print("{:<30}  {:<8}".format("Number of flops: ", flops))
    print("{:<30}  {:<8}".format("Number of MACs: ", macs))
    print("{:<30}  {:<8}".format("Number of parameters: ", params))
    return flops, macs, params


if __name__ == "__main__":
    main()
