"""The architecture table of the zoo: published hyper-parameters, nothing downloaded.

Each :class:`Architecture` names a transformers config class, the model class built from
it (random weights) and the keyword arguments of the published ``config.json`` it copies
(cited beside each entry, by its hub name). Only what differs from the config class's
defaults *and* shapes the model is spelt out, plus the figures people look for (hidden
size, layers, heads, KV heads, intermediate size, vocabulary, rope, experts), so each entry
can be checked against its source at a glance. Plain-torch models (the ResNets) are in
:mod:`flopsight.cli.zoo.models`.

>>> ARCHITECTURES["llama-3-70b"].hyper["num_key_value_heads"], ARCHITECTURES["llama-3-70b"].inputs
(8, 'text')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Architecture", "ARCHITECTURES", "INPUT_KINDS"]

#: What a model is called with, by default (see :func:`flopsight.cli.zoo.models.default_inputs`):
#: text: input_ids (and attention_mask) of --seq-len tokens; text2text: the same plus
#: decoder_input_ids; image: pixel_values; speech: input_features plus decoder_input_ids;
#: text+image: input_ids and pixel_values (CLIP); tensor: one positional tensor.
INPUT_KINDS = ("text", "text2text", "image", "speech", "text+image", "tensor")


@dataclass(frozen=True)
class Architecture:
    """One zoo entry built by transformers: ``model`` (a class name in ``transformers``)
    from ``config`` (a config class name) with ``hyper``."""

    family: str
    config: str
    model: str
    hyper: dict[str, Any]
    source: str
    inputs: str
    seq_len: int = 128  # default --seq-len (decoder tokens for encoder-decoders)
    aliases: tuple[str, ...] = field(default=())


_BERT_VOCAB = 30522
_LLAMA_COMMON = dict(hidden_act="silu", rms_norm_eps=1e-5, tie_word_embeddings=False)

ARCHITECTURES: dict[str, Architecture] = {
    # google-bert/bert-base-uncased
    "bert-base": Architecture(
        "encoder", "BertConfig", "BertModel",
        dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
             vocab_size=_BERT_VOCAB, max_position_embeddings=512, type_vocab_size=2),
        "google-bert/bert-base-uncased", "text", aliases=("bert", "bert-base-uncased")),
    # google-bert/bert-large-uncased
    "bert-large": Architecture(
        "encoder", "BertConfig", "BertModel",
        dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
             vocab_size=_BERT_VOCAB, max_position_embeddings=512, type_vocab_size=2),
        "google-bert/bert-large-uncased", "text", aliases=("bert-large-uncased",)),
    # FacebookAI/roberta-base
    "roberta-base": Architecture(
        "encoder", "RobertaConfig", "RobertaModel",
        dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
             vocab_size=50265, max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-5,
             pad_token_id=1, bos_token_id=0, eos_token_id=2),
        "FacebookAI/roberta-base", "text", aliases=("roberta",)),
    # openai-community/gpt2
    "gpt2": Architecture(
        "decoder", "GPT2Config", "GPT2LMHeadModel",
        dict(n_embd=768, n_layer=12, n_head=12, vocab_size=50257, n_positions=1024, bos_token_id=50256,
             eos_token_id=50256),
        "openai-community/gpt2", "text", aliases=("gpt2-small",)),
    # openai-community/gpt2-xl
    "gpt2-xl": Architecture(
        "decoder", "GPT2Config", "GPT2LMHeadModel",
        dict(n_embd=1600, n_layer=48, n_head=25, vocab_size=50257, n_positions=1024, bos_token_id=50256,
             eos_token_id=50256),
        "openai-community/gpt2-xl", "text"),
    # meta-llama/Llama-2-7b-hf
    "llama-2-7b": Architecture(
        "decoder", "LlamaConfig", "LlamaForCausalLM",
        dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
             intermediate_size=11008, vocab_size=32000, max_position_embeddings=4096, rope_theta=10000.0,
             bos_token_id=1, eos_token_id=2, **_LLAMA_COMMON),
        "meta-llama/Llama-2-7b-hf", "text", aliases=("llama2-7b",)),
    # meta-llama/Meta-Llama-3-8B
    "llama-3-8b": Architecture(
        "decoder", "LlamaConfig", "LlamaForCausalLM",
        dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
             intermediate_size=14336, vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0,
             bos_token_id=128000, eos_token_id=128001, **_LLAMA_COMMON),
        "meta-llama/Meta-Llama-3-8B", "text", aliases=("llama3-8b",)),
    # meta-llama/Meta-Llama-3-70B
    "llama-3-70b": Architecture(
        "decoder", "LlamaConfig", "LlamaForCausalLM",
        dict(hidden_size=8192, num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8,
             intermediate_size=28672, vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0,
             bos_token_id=128000, eos_token_id=128001, **_LLAMA_COMMON),
        "meta-llama/Meta-Llama-3-70B", "text", aliases=("llama3-70b",)),
    # mistralai/Mistral-7B-v0.1
    "mistral-7b": Architecture(
        "decoder", "MistralConfig", "MistralForCausalLM",
        dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
             intermediate_size=14336, vocab_size=32000, max_position_embeddings=32768, rope_theta=10000.0,
             sliding_window=4096, bos_token_id=1, eos_token_id=2, **_LLAMA_COMMON),
        "mistralai/Mistral-7B-v0.1", "text"),
    # mistralai/Mixtral-8x7B-v0.1
    "mixtral-8x7b": Architecture(
        "decoder (mixture of experts)", "MixtralConfig", "MixtralForCausalLM",
        dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
             intermediate_size=14336, vocab_size=32000, max_position_embeddings=32768, rope_theta=1e6,
             num_local_experts=8, num_experts_per_tok=2, sliding_window=None, bos_token_id=1, eos_token_id=2,
             **_LLAMA_COMMON),
        "mistralai/Mixtral-8x7B-v0.1", "text", aliases=("mixtral",)),
    # Qwen/Qwen2.5-7B
    "qwen2.5-7b": Architecture(
        "decoder", "Qwen2Config", "Qwen2ForCausalLM",
        dict(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
             intermediate_size=18944, vocab_size=152064, max_position_embeddings=131072, rope_theta=1e6,
             rms_norm_eps=1e-6, use_sliding_window=False, max_window_layers=28, tie_word_embeddings=False,
             bos_token_id=151643, eos_token_id=151643),
        "Qwen/Qwen2.5-7B", "text", aliases=("qwen2.5",)),
    # google-t5/t5-small
    "t5-small": Architecture(
        "encoder-decoder", "T5Config", "T5ForConditionalGeneration",
        dict(d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_decoder_layers=6, num_heads=8, vocab_size=32128,
             feed_forward_proj="relu", decoder_start_token_id=0, pad_token_id=0, eos_token_id=1),
        "google-t5/t5-small", "text2text", aliases=("t5",)),
    # google-t5/t5-base
    "t5-base": Architecture(
        "encoder-decoder", "T5Config", "T5ForConditionalGeneration",
        dict(d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_decoder_layers=12, num_heads=12, vocab_size=32128,
             feed_forward_proj="relu", decoder_start_token_id=0, pad_token_id=0, eos_token_id=1),
        "google-t5/t5-base", "text2text"),
    # facebook/bart-base
    "bart-base": Architecture(
        "encoder-decoder", "BartConfig", "BartForConditionalGeneration",
        dict(d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12, decoder_attention_heads=12,
             encoder_ffn_dim=3072, decoder_ffn_dim=3072, vocab_size=50265, max_position_embeddings=1024,
             pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=2),
        "facebook/bart-base", "text2text", aliases=("bart",)),
    # openai/whisper-small: 30 s of audio is 3000 mel frames (2 x max_source_positions)
    "whisper-small": Architecture(
        "encoder-decoder (speech)", "WhisperConfig", "WhisperForConditionalGeneration",
        dict(d_model=768, encoder_layers=12, decoder_layers=12, encoder_attention_heads=12, decoder_attention_heads=12,
             encoder_ffn_dim=3072, decoder_ffn_dim=3072, vocab_size=51865, num_mel_bins=80, max_source_positions=1500,
             max_target_positions=448, pad_token_id=50257, bos_token_id=50257, eos_token_id=50257,
             decoder_start_token_id=50258),
        "openai/whisper-small", "speech", seq_len=32, aliases=("whisper",)),
    # google/vit-base-patch16-224 (ImageNet-1k head)
    "vit-base": Architecture(
        "vision", "ViTConfig", "ViTForImageClassification",
        dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072, image_size=224,
             patch_size=16, num_labels=1000),
        "google/vit-base-patch16-224", "image", aliases=("vit",)),
    # openai/clip-vit-base-patch32: text tower 512 wide, vision tower 768 wide, both 12 layers
    "clip": Architecture(
        "vision-text", "CLIPConfig", "CLIPModel",
        dict(projection_dim=512,
             text_config=dict(hidden_size=512, num_hidden_layers=12, num_attention_heads=8, intermediate_size=2048,
                              vocab_size=49408, max_position_embeddings=77, hidden_act="quick_gelu"),
             vision_config=dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                intermediate_size=3072, image_size=224, patch_size=32, hidden_act="quick_gelu")),
        "openai/clip-vit-base-patch32", "text+image", seq_len=77, aliases=("clip-vit-base-patch32",)),
    # facebook/convnext-tiny-224 (ImageNet-1k head)
    "convnext-tiny": Architecture(
        "vision", "ConvNextConfig", "ConvNextForImageClassification",
        dict(depths=[3, 3, 9, 3], hidden_sizes=[96, 192, 384, 768], patch_size=4, num_labels=1000,
             drop_path_rate=0.0),
        "facebook/convnext-tiny-224", "image", aliases=("convnext",)),
}
