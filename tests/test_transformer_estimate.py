"""The transformer cross-check: PaLM and Megatron-LM estimates beside the measured FLOPs, by part.

Real transformers models built from small configs (never downloaded); every expected number
derived by hand from the config below it.
"""

import pytest
import torch
from torch import nn

import flopsight
from flopsight.analysis.transformer_estimate import transformer_check
from flopsight.renderers.efficiency_lines import transformer_check_lines

transformers = pytest.importorskip("transformers")

B, T = 2, 16  # batch and sequence length of every profile here: 32 tokens
TOKENS = B * T


def ids():
    return torch.randint(0, 500, (B, T), generator=torch.Generator().manual_seed(0))


def forward(model, **kwargs):
    with torch.no_grad():
        return flopsight.profile(model.eval(), ids(), kwargs={"use_cache": False}, warm_up=0, **kwargs)


def train_step(model):
    x = ids()
    with flopsight.Profiler(model) as prof:
        model(x, labels=x, use_cache=False).loss.backward()
    return prof.result


def parts(check):
    return {p.name: p for p in check.parts}


def assert_parts_add_up(check):
    assert sum(p.difference for p in check.parts) == pytest.approx(check.measured - check.palm, abs=1e-6)
    assert sum(p.estimate for p in check.parts) == pytest.approx(check.palm, abs=1e-6)


# -- GPT-2: tied LM head, learned positions, fused QKV --------------------------------------------
def gpt2():
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=500, n_positions=64))


def test_gpt2_forward_by_part():
    check = transformer_check(forward(gpt2()))
    s = check.shape
    # N: wte 500*64 = 32000, wpe 64*64 = 4096; per layer ln_1 128 + c_attn 64*192+192 = 12480
    # + c_proj 64*64+64 = 4160 + ln_2 128 + c_fc 64*256+256 = 16640 + c_proj 256*64+64 = 16448
    # = 49984, x2 = 99968; ln_f 128: 136192. lm_head is wte: counted once, under embeddings
    assert (s.layers, s.hidden, s.attention_width, s.vocab, s.batch, s.seq_len) == (2, 64, 64, 500, 2, 16)
    assert (s.params, s.embedding_params, s.head_params, s.tied) == (136_192, 36_096, 0, True)
    # PaLM forward: (2N + 4*L*HQ*T) per token = 2*136192*32 + 4*2*64*16*32 = 8,716,288 + 262,144
    assert check.palm == 8_978_432 and not check.training
    # Megatron forward: 24*B*s*l*h^2*(1 + s/6h + V/12hl) = 6,291,456 * (1 + 16/384 + 500/1536)
    assert check.megatron == pytest.approx(8_601_600)
    p = parts(check)
    # embeddings: lookups cost 0 FLOPs, their 36,096 params are in 2N: -2*36096*32
    assert (p["embeddings"].estimate, p["embeddings"].measured) == (2_310_144, 0)
    # LM head: tied, so 0 estimated for it; measured 2*32*64*500 (no bias)
    assert (p["LM head"].estimate, p["LM head"].measured) == (0, 2_048_000)
    # QK^T and AV: 2 products of B*T*T*HQ MACs per layer = 2 * 2*2*16*16*64 FLOPs * 2 layers
    assert p["attention QK^T and AV"].measured == p["attention QK^T and AV"].estimate == 262_144
    # the rest: products of the layers' 2*99968*32 less their 1,792 norm and bias params
    # (2*1792*32 = 114,688 estimated, not measured as products), plus the non-product FLOPs:
    # per layer 2 layer norms 2*5*32*64 = 20480, GELU 8*32*256 = 65536, biases
    # 32*(192+64+256+64) = 18432, softmax and scaling in the attention 4096, residual adds
    # 2*32*64 = 4096: 112,640, x2 = 225,280; ln_f 10,240; wte + wpe add 2,048: 237,568
    assert p["the rest"].difference == 237_568 - 114_688 == 122_880
    assert check.measured == 8_839_168 and check.measured - check.palm == -139_264
    assert_parts_add_up(check)


def test_explicit_numbers_and_a_config_agree_with_the_module_tree():
    result = forward(gpt2())
    inferred = transformer_check(result)
    given = transformer_check(result, layers=2, hidden=64, heads=4, head_dim=16, vocab=500, batch_size=2, seq_len=16)
    from_config = transformer_check(result, gpt2().config)
    assert inferred.palm == given.palm == from_config.palm
    assert given.shape.sources["layers"] == "given" and from_config.shape.sources["layers"] == "config"
    assert inferred.shape.sources["seq_len"] == "inputs" and inferred.shape.sources["layers"] == "module tree"
    # GPT-2's QKV projection is fused (c_attn): H·Q is taken as the hidden size
    assert inferred.shape.sources["attention_width"] == "hidden size"
    assert transformer_check(result, heads=4, head_dim=32).shape.attention_width == 128
    # a longer sequence given by hand changes the estimate: 2N*64 + 4*2*64*32*64 tokens
    assert transformer_check(result, seq_len=32).palm == 2 * 136_192 * 64 + 4 * 2 * 64 * 32 * 64
    with pytest.raises(ValueError, match="layers: expected a positive int"):
        transformer_check(result, layers=0)


def test_effective_attention_shows_in_the_attention_part():
    check = transformer_check(forward(gpt2(), attention="effective"))
    att = parts(check)["attention QK^T and AV"]
    # causal: T*(T+1)/2 = 136 of the 256 score entries: 2 * (2 products * 2*136*64 MACs) * 2 layers
    assert att.measured == 139_264 and att.difference == 139_264 - 262_144
    assert "effective" in att.explanation
    assert_parts_add_up(check)


# -- Llama: untied head, grouped-query attention, SwiGLU; a training step -------------------------
def test_llama_training_step_by_part():
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=500))
    result = train_step(model)
    check = transformer_check(result)
    s = check.shape
    # N: embed 32000 + lm_head 32000 + per layer (q 4096, k 2048, v 2048, o 4096, gate/up/down
    # 3*8192, 2 RMSNorms 128 = 36992) x 2 + final norm 64 = 138,048
    assert (s.params, s.embedding_params, s.head_params, s.tied, s.attention_width) == (138_048, 32_000, 32_000,
                                                                                        False, 64)
    assert s.sources["attention_width"] == "module tree"  # q_proj's out_features: 4 heads x 16
    # PaLM: (6N + 12*L*HQ*T) * tokens = 6*138048*32 + 12*2*64*16*32 = 26,505,216 + 786,432
    assert check.training and check.palm == 27_291_648
    assert check.megatron == pytest.approx(3 * 8_601_600)  # 72 instead of 24: fwd + bwd
    p = parts(check)
    # embeddings: 6*32000*32 estimated; measured, the backward adds 32 rows of 64 into the grad
    assert (p["embeddings"].estimate, p["embeddings"].measured) == (6_144_000, 2_048)
    # LM head, untied: fwd 2*32*64*500 + bwd twice that = 6*32000*32, as estimated
    assert p["LM head"].measured == p["LM head"].estimate == 6_144_000
    # QK^T and AV: forward 2 products, backward 4 (dQ, dK, dV, dP): 12*L*HQ*T*tokens exactly
    assert p["attention QK^T and AV"].measured == p["attention QK^T and AV"].estimate == 786_432
    # the rest: 6 * (138048 - 32000 - 32000) * 32; of it the layers' weights (all but the 320
    # norm params) are measured as products: 6 * 73,728 * 32 = 14,155,776 FLOPs of 2 per MAC
    assert p["the rest"].estimate == 14_217_216
    layer_products = sum(2 * (n.forward.macs + n.backward.macs) for n in result.walk()
                         if n.type_name == "Linear" and n.name.startswith("model.layers."))
    assert layer_products == 14_155_776
    assert_parts_add_up(check)


# -- MoE: Mixtral and Qwen2-MoE, only the routed experts run -------------------------------------
def mixtral():
    config = transformers.MixtralConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=500, num_local_experts=4, num_experts_per_tok=2)
    torch.manual_seed(0)
    return transformers.MixtralForCausalLM(config), config


def test_mixtral_forward_by_part_with_its_config():
    model, config = mixtral()
    check = transformer_check(forward(model), config)
    s = check.shape
    # N: embed 32000, head 32000; per layer attention 12288, router 64*4 = 256, experts
    # 4 * 3*64*96 = 73728, 2 norms 128 (86,400) x 2; final norm 64: 236,864
    assert (s.params, s.expert_params, s.active_expert_fraction) == (236_864, 147_456, 0.5)
    assert s.sources["active_expert_fraction"] == "config"
    # PaLM forward: 2*236864*32 + 4*2*64*16*32 = 15,159,296 + 262,144
    assert check.palm == 15_421_440
    # with the active params: N - (1 - 2/4) * 147456 = 163,136: 2*163136*32 + 262,144
    assert check.palm_active == 10_702_848
    moe = parts(check)["MoE experts"]
    # 2N counts all 4 experts (2*147456*32); each token runs 2 of them: half of that measured
    assert (moe.estimate, moe.measured) == (9_437_184, 4_718_592)
    assert parts(check)["embeddings"].difference == -2 * 32_000 * 32
    assert parts(check)["LM head"].difference == 0
    assert_parts_add_up(check)
    lines = dict(transformer_check_lines(forward(model), config))
    assert lines["fwd flops, PaLM estimate with active params (N_active 163.14 K)"] == "10.7 M"
    assert lines["  MoE experts: only the routed experts run (k/E 0.5, config): N counts all of them"] == "-4.72 M"


def test_mixtral_without_its_config_infers_the_active_fraction():
    model, _ = mixtral()
    check = transformer_check(forward(model))
    assert check.shape.active_expert_fraction == 0.5 and check.shape.sources["active_expert_fraction"] == "measured"
    assert check.palm_active == 10_702_848


def test_qwen2_moe_shared_expert_is_dense_and_routed_experts_are_not():
    config = transformers.Qwen2MoeConfig(
        hidden_size=64, intermediate_size=128, moe_intermediate_size=32, shared_expert_intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=500, num_experts=4,
        num_experts_per_tok=2)
    torch.manual_seed(0)
    check = transformer_check(forward(transformers.Qwen2MoeForCausalLM(config)), config)
    # routed experts: 2 layers * 4 experts * 3*64*32 = 49,152 params, 2 of 4 run per token
    assert check.shape.expert_params == 49_152
    moe = parts(check)["MoE experts"]
    assert moe.difference == -(1 - 2 / 4) * 2 * 49_152 * TOKENS == -1_572_864
    assert_parts_add_up(check)


# -- not transformer language models --------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(x + self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))))


def test_a_resnet_like_model_gets_none():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), Block(8), Block(8), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(8, 10))
    result = flopsight.profile(model.eval(), torch.randn(2, 3, 16, 16), warm_up=0)
    assert transformer_check(result) is None and transformer_check_lines(result) == []


def test_an_embedding_and_lstm_language_model_gets_none():
    class LSTMLM(nn.Module):  # tokens in, logits out, but no attention layers
        def __init__(self):
            super().__init__()
            self.embed, self.lstm, self.head = (nn.Embedding(500, 32), nn.LSTM(32, 32, batch_first=True),
                                                nn.Linear(32, 500))

        def forward(self, x):
            return self.head(self.lstm(self.embed(x))[0])

    result = flopsight.profile(LSTMLM().eval(), ids(), warm_up=0)
    assert transformer_check(result) is None


def test_lines_read_as_a_report_section():
    lines = transformer_check_lines(forward(gpt2()))
    assert lines[0] == ("fwd flops, PaLM estimate (2N + 4·L·H·Q·T) x tokens (N 136.19 K, L 2, H·Q 64, T 16; "
                        "32 tokens)", "8.98 M")
    assert lines[2] == ("fwd flops, measured (recompute and optimizer step left out)", "8.84 M (0.984 x PaLM)")
    assert [label.split(":")[0] for label, _ in lines[3:]] == [
        "  embeddings", "  LM head", "  attention QK^T and AV", "  the rest"]
    assert [value for _, value in lines[3:]] == ["-2.31 M", "+2.05 M", "+0", "+122.88 K"]
