"""Profile T5-small's generate() (built offline from its default config, random weights).

    python examples/t5.py                        # 16 new tokens from a 12-token prompt
    python examples/t5.py --new-tokens 4
"""

import argparse

import torch
from transformers import T5Config, T5ForConditionalGeneration

from flopsight import get_model_profile


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt-len", type=int, default=12)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--layers", type=int, default=6)
    args = parser.parse_args(argv)

    model = T5ForConditionalGeneration(T5Config(num_layers=args.layers, num_decoder_layers=args.layers)).eval()
    input_ids = torch.randint(2, model.config.vocab_size, (1, args.prompt_len))
    # greedy decoding of exactly new_tokens tokens (random weights would stop at any EOS)
    generate_kwargs = {
        "max_new_tokens": args.new_tokens,
        "min_new_tokens": args.new_tokens,
        "do_sample": False,
        "decoder_start_token_id": model.config.pad_token_id,  # T5 starts decoding from <pad>
    }
    with torch.no_grad():
        flops, macs, params = get_model_profile(
            model, args=[input_ids], kwargs=generate_kwargs, warm_up=0, mode="generate", top_modules=1
        )
    print("{:<30}  {:<8}".format("Number of flops: ", flops))
    print("{:<30}  {:<8}".format("Number of MACs: ", macs))
    print("{:<30}  {:<8}".format("Number of parameters: ", params))
    return flops, macs, params


if __name__ == "__main__":
    main()
