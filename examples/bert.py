"""Profile BERT-base for sequence classification (built offline from its default config).

    python examples/bert.py                      # batch 4, sequence 128, like the DeepSpeed example
    python examples/bert.py --batch-size 1 --seq-len 64
"""

import argparse

import torch
from transformers import BertConfig, BertForSequenceClassification

from flopsight import get_model_profile


def bert_inputs(batch_size: int, seq_len: int, config: BertConfig) -> dict:
    """What a tokenizer would give for ``batch_size`` padded sequences, plus labels."""
    input_ids = torch.full((batch_size, seq_len), config.pad_token_id, dtype=torch.long)
    input_ids[:, 0], input_ids[:, -1] = 101, 102  # [CLS] ... [SEP]
    return {
        "input_ids": input_ids,
        "token_type_ids": torch.zeros_like(input_ids),
        "attention_mask": torch.ones_like(input_ids),
        "labels": torch.ones(batch_size, dtype=torch.long),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--layers", type=int, default=12)
    args = parser.parse_args(argv)

    config = BertConfig(num_hidden_layers=args.layers)
    model = BertForSequenceClassification(config)
    flops, macs, params = get_model_profile(
        model, kwargs=bert_inputs(args.batch_size, args.seq_len, config), print_profile=True, detailed=True
    )
    print("{:<30}  {:<8}".format("Number of flops: ", flops))
    print("{:<30}  {:<8}".format("Number of MACs: ", macs))
    print("{:<30}  {:<8}".format("Number of parameters: ", params))
    return flops, macs, params


if __name__ == "__main__":
    main()
