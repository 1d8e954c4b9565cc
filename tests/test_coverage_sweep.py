"""Real transformers architectures, built tiny from configs, that used to run ops nobody
counted: nothing may be unsupported now, and the kernels that were missing count what their
hand derivation says.

Found by profiling one forward of ~100 architectures (text, vision, audio, MoE, state-space)
and a training step of 30 of them:
FNet ran ``_fft_c2c`` (its token mixing), Qwen3-Next ``linalg_solve_triangular`` (the
gated delta rule's UT transform), Llama 4 ``polar`` (complex rotary frequencies).
"""

from __future__ import annotations

import pytest
import torch

import flopsight

transformers = pytest.importorskip("transformers")

L = 16  # tokens


def ids(vocab=512):
    return torch.randint(0, vocab, (1, L))


def kernels(result, *names):
    return {name: (o.calls, o.macs, o.flops) for name, o in result.ops().items() if name in names}


def test_fnet_forward_and_training_step():
    H, layers = 32, 2
    config = transformers.FNetConfig(vocab_size=512, hidden_size=H, intermediate_size=64, num_hidden_layers=layers)
    model = transformers.FNetModel(config)
    with torch.no_grad():
        result = flopsight.profile(model.eval(), ids(), warm_up=0)
    assert result.unsupported_ops == {}
    # fftn over (L, H) per layer: 5 * L*H * log2(L*H) = 5 * 512 * 9
    assert kernels(result, "aten._fft_c2c") == {"aten._fft_c2c": (layers, 0, layers * 23_040)}
    # a training step: the gradient of each (real part of an) FFT is another transform of
    # the same (L, H) complex grid, charged to the mixing module: 23,040 again
    with flopsight.Profiler(model.train()) as prof:
        model(ids()).last_hidden_state.sum().backward()
    assert prof.result.unsupported_ops == {}
    for i in range(layers):
        ops = prof.result.module(f"encoder.layer.{i}.fourier.self").ops
        assert ops["backward"]["aten._fft_c2c"].flops == ops["forward"]["aten._fft_c2c"].flops == 23_040


def test_qwen3_next_gated_delta_rule():
    config = transformers.Qwen3NextConfig(
        vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8,
        linear_value_head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=32, layer_types=["linear_attention", "full_attention"],
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.Qwen3NextModel(config).eval()
    with torch.no_grad():
        result = flopsight.profile(model, ids(), kwargs={"use_cache": False}, warm_up=0)
    assert result.unsupported_ops == {}
    # the one linear-attention layer solves its unit lower-triangular (64 x 64) UT system (the
    # 16 tokens padded to one chunk of 64) for the values and for the decayed keys: 2 solves
    # with 4 value heads x 8 features = 32 right-hand sides each: 64^2 * 32 FLOPs per solve
    flops = 64 * 64 * 32
    assert kernels(result, "aten.linalg_solve_triangular") == {
        "aten.linalg_solve_triangular": (2, flops, 2 * flops)  # MACs = FLOPs / 2 per solve
    }


def test_llama4_complex_rotary_frequencies():
    config = transformers.Llama4TextConfig(
        vocab_size=512, hidden_size=32, intermediate_size=64, intermediate_size_mlp=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_local_experts=4, num_experts_per_tok=1,
        interleave_moe_layer_step=1, no_rope_layers=[1, 0], attention_chunk_size=8,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.Llama4TextModel(config).eval()
    with torch.no_grad():
        result = flopsight.profile(model, ids(), kwargs={"use_cache": False}, warm_up=0)
    assert result.unsupported_ops == {}
    # freqs_cis = polar(1, freqs) once per forward over (1, L, head_dim/2) = 64 angles, 4 each
    assert kernels(result, "aten.polar") == {"aten.polar": (1, 0, 256)}
