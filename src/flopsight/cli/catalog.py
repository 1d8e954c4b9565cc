"""The zoo as ``flopsight list`` prints it, without building anything: each model's name,
family, parameter count, default inputs and the checkpoint whose hyper-parameters it uses.

Written down so that listing imports neither torch nor transformers; tests/test_cli.py builds
every entry on the meta device and checks each row against it.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Row", "CATALOG"]


class Row(NamedTuple):
    name: str
    family: str
    params: int  # counted on the meta device, each tensor once
    inputs: str  # the default inputs at batch 1
    source: str
    needs_transformers: bool


CATALOG: tuple[Row, ...] = (
    Row('bert-base', 'encoder', 109482240, 'input_ids [1, 128]', 'google-bert/bert-base-uncased', True),
    Row('bert-large', 'encoder', 335141888, 'input_ids [1, 128]', 'google-bert/bert-large-uncased', True),
    Row('roberta-base', 'encoder', 124645632, 'input_ids [1, 128]', 'FacebookAI/roberta-base', True),
    Row('gpt2', 'decoder', 124439808, 'input_ids [1, 128]', 'openai-community/gpt2', True),
    Row('gpt2-xl', 'decoder', 1557611200, 'input_ids [1, 128]', 'openai-community/gpt2-xl', True),
    Row('llama-2-7b', 'decoder', 6738415616, 'input_ids [1, 128]', 'meta-llama/Llama-2-7b-hf', True),
    Row('llama-3-8b', 'decoder', 8030261248, 'input_ids [1, 128]', 'meta-llama/Meta-Llama-3-8B', True),
    Row('llama-3-70b', 'decoder', 70553706496, 'input_ids [1, 128]', 'meta-llama/Meta-Llama-3-70B', True),
    Row('mistral-7b', 'decoder', 7241732096, 'input_ids [1, 128]', 'mistralai/Mistral-7B-v0.1', True),
    Row('mixtral-8x7b', 'decoder (mixture of experts)', 46702792704, 'input_ids [1, 128]',
        'mistralai/Mixtral-8x7B-v0.1', True),
    Row('qwen2.5-7b', 'decoder', 7615616512, 'input_ids [1, 128]', 'Qwen/Qwen2.5-7B', True),
    Row('t5-small', 'encoder-decoder', 60506624, 'input_ids [1, 128], decoder_input_ids [1, 128]',
        'google-t5/t5-small', True),
    Row('t5-base', 'encoder-decoder', 222903552, 'input_ids [1, 128], decoder_input_ids [1, 128]',
        'google-t5/t5-base', True),
    Row('bart-base', 'encoder-decoder', 139420416, 'input_ids [1, 128], decoder_input_ids [1, 128]',
        'facebook/bart-base', True),
    Row('whisper-small', 'encoder-decoder (speech)', 241734912,
        'input_features [1, 80, 3000], decoder_input_ids [1, 32]', 'openai/whisper-small', True),
    Row('vit-base', 'vision', 86567656, 'pixel_values [1, 3, 224, 224]', 'google/vit-base-patch16-224', True),
    Row('clip', 'vision-text', 151277313, 'input_ids [1, 77], pixel_values [1, 3, 224, 224]',
        'openai/clip-vit-base-patch32', True),
    Row('convnext-tiny', 'vision', 28589128, 'pixel_values [1, 3, 224, 224]', 'facebook/convnext-tiny-224', True),
    Row('resnet-18', 'vision (plain torch)', 11689512, 'x [1, 3, 224, 224]', 'torchvision resnet18', False),
    Row('resnet-34', 'vision (plain torch)', 21797672, 'x [1, 3, 224, 224]', 'torchvision resnet34', False),
    Row('resnet-50', 'vision (plain torch)', 25557032, 'x [1, 3, 224, 224]', 'torchvision resnet50', False),
)
