"""generate() of encoder-decoder models: the encoder pass is part of the prefill.

T5, BART and Whisper run their encoder once, before the first call of the model and
outside it (``model.get_encoder()(...)``); the split must still add up to the whole call.
"""

import pytest
import torch

import flopsight
from flopsight.renderers.numbers import macs_to_string
from flopsight.renderers.text_renderer import render_text
from flopsight.result import ModelCall, ModuleStats, ProfileResult
from flopsight.result.metadata import Metadata
from flopsight.result.stats import Stats

transformers = pytest.importorskip("transformers")

B, L, N = 2, 5, 3  # batch, prompt length, new tokens
GENERATE = dict(max_new_tokens=N, min_new_tokens=N, do_sample=False)


def t5():
    cfg = transformers.T5Config(
        vocab_size=100, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
    )
    torch.manual_seed(0)
    return transformers.T5ForConditionalGeneration(cfg).eval(), (torch.randint(2, 100, (B, L)),)


def bart():
    cfg = transformers.BartConfig(
        vocab_size=100, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None,
    )
    torch.manual_seed(0)
    return transformers.BartForConditionalGeneration(cfg).eval(), (torch.randint(3, 100, (B, L)),)


def whisper():
    cfg = transformers.WhisperConfig(
        vocab_size=100, num_mel_bins=8, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=8,
        max_target_positions=32, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
    )
    torch.manual_seed(0)
    # 16 frames: the encoder's second conv (stride 2) makes the 8 source positions
    return transformers.WhisperForConditionalGeneration(cfg).eval(), (torch.randn(B, 8, 16),)


def profile_generate(model, args, **generate):
    with torch.no_grad():
        return flopsight.profile(model, args, dict(GENERATE, **generate), mode="generate", warm_up=0)


def encoder_alone(model, args):
    with torch.no_grad():
        return flopsight.profile(model.get_encoder(), args, warm_up=0).total.forward


# -- T5, derived by hand ----------------------------------------------------------------------
# d_model 64, 4 heads of d_kv 16 (inner 64), d_ff 128, 2 layers each side, vocab 100.
# Encoder, B*L = 10 rows, per layer: q, k, v, o: 4 * 10*64*64 = 163,840; QK^T and AV:
# 2 * B*heads*L*L*d_kv = 2 * 2*4*5*5*16 = 6,400; wi and wo: 2 * 10*64*128 = 163,840; the
# relative position bias is an embedding lookup (0). 2 layers: 2 * 334,080 = 668,160.
T5_ENCODER = 2 * (4 * 10 * 64 * 64 + 2 * 2 * 4 * 5 * 5 * 16 + 2 * 10 * 64 * 128)


def t5_decoder_call(step):
    """One decoder call with ``step`` tokens in the self-attention cache (B rows of 1 token):
    self q, k, v, o 4 * 2*64*64; QK^T, AV 2 * 2*4*1*step*16; cross q, o 2 * 2*64*64; cross
    QK^T, AV 2 * 2*4*1*5*16; wi, wo 2 * 2*64*128; the cross k, v of the 10 encoder rows
    (2 * 10*64*64) on the first call only (then cached); lm_head 2*64*100."""
    per_layer = (
        4 * 2 * 64 * 64 + 2 * 2 * 4 * step * 16 + 2 * 2 * 64 * 64 + 2 * 2 * 4 * 5 * 16 + 2 * 2 * 64 * 128
        + (2 * 10 * 64 * 64 if step == 1 else 0)
    )
    return 2 * per_layer + 2 * 64 * 100


def test_t5_prefill_is_the_encoder_and_the_first_decoder_call_derived_by_hand():
    assert T5_ENCODER == 668_160
    assert [t5_decoder_call(s) for s in (1, 2, 3)] == [343_552, 180_224, 180_736]
    model, args = t5()
    result = profile_generate(model, args)
    g = result.generation
    assert g.encoder_paths == ["encoder"]
    assert g.encoder.macs == T5_ENCODER == encoder_alone(model, args).macs
    assert g.encoder.calls == 1
    assert g.prefill.macs == T5_ENCODER + t5_decoder_call(1)
    assert g.prefill.calls == 1
    assert (g.decode.macs, g.decode.calls) == (t5_decoder_call(2) + t5_decoder_call(3), 2)
    assert g.new_tokens == N and g.batch_size == B
    # nothing of the model is left out of the split: generate()'s own work (argmax) has no MACs
    assert g.total.macs == result.total.forward.macs == T5_ENCODER + sum(t5_decoder_call(s) for s in (1, 2, 3))
    assert g.other.macs == 0
    assert g.prefill.macs + g.decode.macs + g.other.macs == g.total.macs
    assert g.prefill.flops + g.decode.flops + g.other.flops == g.total.flops


def test_t5_encoder_flops_and_latency_are_the_encoder_modules():
    model, args = t5()
    result = profile_generate(model, args)
    g = result.generation
    encoder = result.module("encoder").forward
    first = result.root_calls[0].stats
    assert (g.encoder.flops, g.encoder.latency) == (encoder.flops, encoder.latency)
    assert g.encoder.flops == encoder_alone(model, args).flops
    assert g.prefill.flops == encoder.flops + first.flops
    assert g.prefill.latency == pytest.approx(encoder.latency + first.latency)
    assert g.prefill.latency + g.decode.latency + g.other.latency == pytest.approx(g.total.latency)


def test_t5_a_single_new_token_has_the_encoder_in_its_prefill():
    model, args = t5()
    result = profile_generate(model, args, max_new_tokens=1, min_new_tokens=1)
    g = result.generation
    assert g.encoder_paths == ["encoder"]
    assert (g.prefill.macs, g.decode.calls) == (T5_ENCODER + t5_decoder_call(1), 0)
    assert g.prefill.macs + g.other.macs == g.total.macs


def test_t5_beam_search_runs_the_encoder_once():
    model, args = t5()
    result = profile_generate(model, args, num_beams=2)
    g = result.generation
    assert g.encoder_paths == ["encoder"]
    assert g.encoder.macs == T5_ENCODER
    assert g.prefill.macs + g.decode.macs + g.other.macs == g.total.macs


@pytest.mark.parametrize("build", [bart, whisper], ids=["bart", "whisper"])
def test_encoder_is_the_separately_profiled_encoder_and_the_split_adds_up(build):
    model, args = build()
    result = profile_generate(model, args)
    g = result.generation
    alone = encoder_alone(model, args)
    assert g.encoder_paths == ["model.encoder"]
    assert (g.encoder.macs, g.encoder.flops) == (alone.macs, alone.flops)
    assert g.prefill.macs == alone.macs + result.root_calls[0].stats.macs
    assert g.decode.calls == N - 1
    assert g.prefill.macs + g.decode.macs + g.other.macs == g.total.macs == result.total.forward.macs
    assert g.prefill.flops + g.decode.flops + g.other.flops == g.total.flops
    assert g.other.macs == 0


def test_report_prints_the_encoder_line_only_for_encoder_decoder_models(fake_clock):
    model, args = t5()
    text = render_text(profile_generate(model, args))
    lines = {line.split(":")[0]: line.rsplit(":", 1)[1].strip() for line in text.splitlines() if ": " in line}
    assert lines["encoder MACs per GPU (part of prefill)"] == macs_to_string(T5_ENCODER)
    assert lines["prefill MACs per GPU"] == macs_to_string(T5_ENCODER + t5_decoder_call(1))
    assert text.index("encoder MACs per GPU") < text.index("prefill MACs per GPU")
    assert "encoder latency (part of prefill):" in text


def test_decoder_only_generate_has_no_encoder(fake_clock):
    cfg = transformers.GPT2Config(vocab_size=100, n_positions=32, n_embd=32, n_layer=1, n_head=2)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    result = profile_generate(model, (torch.randint(0, 100, (B, L)),), pad_token_id=0)
    g = result.generation
    assert g.encoder is None and g.encoder_paths == []
    assert g.prefill.macs == result.root_calls[0].stats.macs
    assert g.prefill.macs + g.decode.macs + g.other.macs == g.total.macs
    assert "encoder" not in render_text(result)


# -- the split on hand-made results ------------------------------------------------------------
def hand_made(encoder_macs, decoder_macs, root_calls, other_flops=0):
    """A root with an encoder (called once from outside the model) and a decoder; ``root_calls``
    are the model's calls' MACs (their FLOPs are 2x), the encoder's FLOPs 2x its MACs."""

    def module(name, parent, children, macs, flops, calls):
        return ModuleStats(
            name=name, type_name="M", depth=0 if name == "" else 1, parent=parent, children=tuple(children),
            params=0, params_trainable=0, phases={"forward": Stats(macs, flops, 0.001 * calls, calls)},
        )

    modules = {
        "": module("", None, ["embed", "encoder", "decoder"], 0, other_flops, len(root_calls)),
        "embed": module("embed", "", [], 0, 0, len(root_calls) + 1),
        "encoder": module("encoder", "", [], encoder_macs, 2 * encoder_macs, 1),
        "decoder": module("decoder", "", [], decoder_macs, 2 * decoder_macs, len(root_calls)),
    }
    encoder = [ModelCall("encoder", Stats(encoder_macs, 2 * encoder_macs, 0.001, 1), 2)] if encoder_macs else []
    calls = encoder + [ModelCall("", Stats(m, 2 * m, 0.001, 1), 2) for m in root_calls]
    return ProfileResult(modules, metadata=Metadata(mode="generate"), calls=calls)


def test_the_encoder_is_the_top_level_call_of_a_submodule():
    # decoder: 3 calls of 10, 4, 4 MACs; encoder 50 MACs, called by generate() itself
    g = hand_made(50, 18, [10, 4, 4], other_flops=7).generation
    assert g.encoder_paths == ["encoder"]
    assert (g.encoder.macs, g.encoder.flops, g.encoder.calls) == (50, 100, 1)
    assert (g.prefill.macs, g.prefill.flops) == (50 + 10, 100 + 20)
    assert (g.decode.macs, g.decode.calls) == (8, 2)
    # the 7 FLOPs the root ran outside every module (logits processing) are the rest
    assert (g.other.macs, g.other.flops) == (0, 7)
    assert g.prefill.flops + g.decode.flops + g.other.flops == g.total.flops == 100 + 36 + 7


def test_no_encoder_when_every_top_level_call_was_the_model():
    g = hand_made(0, 18, [10, 4, 4]).generation
    assert g.encoder is None and g.encoder_paths == []
    assert g.prefill.macs == 10
