"""Real transformers models, built offline from configs, against hand-derived MACs."""

import pytest
import torch

import flopsight

transformers = pytest.importorskip("transformers")
from helpers import gpt2_small  # noqa: E402
from models import gqa_llama_config  # noqa: E402


def bert_layer_macs(L, H, I):
    # Q, K, V and attention-output projections: 4*L*H*H; scores QK^T and weighted sum AV:
    # L*L*dh per head, H/dh heads each: 2*L*L*H; intermediate and output dense: 2*L*H*I
    return 4 * L * H * H + 2 * L * L * H + 2 * L * H * I


@pytest.fixture(scope="module")
def bert():
    torch.manual_seed(0)
    return transformers.BertModel(transformers.BertConfig()).eval()


def test_bert_base_per_module_macs(bert):
    L, H, I, N = 128, 768, 3072, 12
    ids = torch.ones(1, L, dtype=torch.long)
    with torch.no_grad():
        result = flopsight.profile(bert, ids)
    layer = bert_layer_macs(L, H, I)
    assert layer == 931_135_488
    assert result.module("encoder.layer.0").forward.macs == layer
    assert result.module("encoder.layer.0.attention.self").forward.macs == 3 * L * H * H + 2 * L * L * H
    assert result.module("encoder.layer.0.attention.self.query").forward.macs == L * H * H
    assert result.module("encoder.layer.0.intermediate").forward.macs == L * H * I
    assert result.module("embeddings").forward.macs == 0
    assert result.module("pooler").forward.macs == H * H  # the first token only
    assert result.total.forward.macs == N * layer + H * H == 11_174_215_680
    assert result.total.params == 109_482_240
    assert result.unsupported_ops == {}


def gpt2_macs(L, H, N, V):
    # per layer: c_attn L*H*3H, attention 2*L*L*H, c_proj L*H*H, mlp 2*L*H*4H; lm_head L*H*V
    return N * (12 * L * H * H + 2 * L * L * H) + L * H * V


def test_gpt2_small_lm_head(bert):
    L = 64
    model = gpt2_small()
    ids = torch.ones(1, L, dtype=torch.long)
    with torch.no_grad():
        result = flopsight.profile(model, ids, kwargs={"use_cache": False})
    assert result.total.forward.macs == gpt2_macs(L, 768, 12, 50257)
    assert result.module("transformer.h.0.attn.c_attn").forward.macs == L * 768 * 3 * 768
    assert result.module("lm_head").forward.macs == L * 768 * 50257
    assert result.total.params == 124_439_808  # lm_head ties to wte: counted once
    assert result.unsupported_ops == {}


def test_llama_small_with_grouped_query_attention():
    L, H, I, N, V, heads, kv_heads = 32, 256, 688, 2, 1000, 8, 4
    kv = H // heads * kv_heads  # 128: K and V project to the KV heads only
    model = transformers.LlamaForCausalLM(gqa_llama_config()).eval()
    with torch.no_grad():
        result = flopsight.profile(model, torch.ones(1, L, dtype=torch.long), kwargs={"use_cache": False})
    attn = L * H * H + 2 * L * H * kv + L * H * H + 2 * L * L * H  # q, k, v, o; QK^T and AV over query heads
    mlp = 3 * L * H * I  # gate, up, down
    assert result.module("model.layers.0.self_attn").forward.macs == attn
    assert result.module("model.layers.0.mlp").forward.macs == mlp
    assert result.total.forward.macs == N * (attn + mlp) + L * H * V
    assert result.unsupported_ops == {}


def meta_twin(factory, *inputs_shapes):
    with torch.device("meta"):
        return factory()


@pytest.mark.parametrize(
    "name, factory, inputs",
    [
        ("bert", lambda: transformers.BertModel(transformers.BertConfig(num_hidden_layers=2)), {"input_ids": (2, 16)}),
        ("gpt2", lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2)), {"input_ids": (2, 16)}),
        ("llama", lambda: transformers.LlamaForCausalLM(gqa_llama_config()), {"input_ids": (2, 16)}),
        ("t5", lambda: transformers.T5Model(transformers.T5Config(num_layers=2)),
         {"input_ids": (2, 16), "decoder_input_ids": (2, 8)}),
        ("vit", lambda: transformers.ViTModel(transformers.ViTConfig(num_hidden_layers=2)),
         {"pixel_values": (1, 3, 224, 224)}),
        ("resnet", lambda: transformers.ResNetModel(transformers.ResNetConfig(depths=[1, 1, 1, 1])),
         {"pixel_values": (1, 3, 64, 64)}),
    ],
)
def test_cpu_and_meta_give_identical_counts(name, factory, inputs):
    def make_inputs(device):
        return {
            k: (torch.ones(shape, dtype=torch.long, device=device) if k.endswith("ids")
                else torch.ones(shape, device=device))
            for k, shape in inputs.items()
        }

    torch.manual_seed(0)
    cpu_model = factory().eval()
    with torch.device("meta"):
        meta_model = factory().eval()
    with torch.no_grad():
        cpu = flopsight.profile(cpu_model, kwargs=make_inputs("cpu"), warm_up=0)
        meta = flopsight.profile(meta_model, kwargs=make_inputs("meta"), warm_up=0)
    assert cpu.total.forward.macs > 0
    assert {s.name: (s.forward.macs, s.forward.flops) for s in cpu.walk()} == {
        s.name: (s.forward.macs, s.forward.flops) for s in meta.walk()
    }
    assert cpu.unsupported_ops == meta.unsupported_ops == {}
