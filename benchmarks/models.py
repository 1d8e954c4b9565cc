"""A registry of benchmark models, from a tiny MLP to GPT-2 small, all built offline.

    from benchmarks.models import MODELS, build    # or, from benchmarks/: from models import ...
    model, args, kwargs = build("bert-base")
    python benchmarks/models.py                     # time every model's plain forward once

Every builder returns ``(model.eval(), args, kwargs)`` with inputs ready for
``model(*args, **kwargs)``. Vision models are plain torch or transformers *configs*
(torchvision's compiled ops are not needed), language models are transformers configs with
random weights (never ``from_pretrained``). Sizes are chosen so that each plain forward takes
roughly 0.2-400 ms on a 2-core CPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch import nn

Built = tuple[nn.Module, tuple, dict]


def _ids(batch: int = 1, seq: int = 128, vocab: int = 1000) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0))


# --------------------------------------------------------------------------- plain torch


class TinyMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))

    def forward(self, x):
        return self.net(x)


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.Tanh(), nn.AvgPool2d(2),
            nn.Conv2d(6, 16, 5), nn.Tanh(), nn.AvgPool2d(2),
        )  # fmt: skip
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.Tanh(), nn.Linear(120, 84), nn.Tanh(), nn.Linear(84, 10)
        )

    def forward(self, x):
        return self.classifier(self.features(x))


def _conv_bn(cin: int, cout: int, stride: int = 1, groups: int = 1, k: int = 3) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout), nn.ReLU6(inplace=True)
    )


class SmallCNN(nn.Module):
    """CIFAR-style: three conv-bn-relu-pool stages, dropout, a classifier."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            _conv_bn(3, 32), nn.MaxPool2d(2), _conv_bn(32, 64), nn.MaxPool2d(2), _conv_bn(64, 128), nn.MaxPool2d(2)
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.2), nn.Linear(128 * 4 * 4, 256), nn.ReLU(),
                                  nn.Linear(256, 10))

    def forward(self, x):
        return self.head(self.features(x))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        layers = [_conv_bn(cin, hidden, k=1)] if expand != 1 else []
        layers += [
            _conv_bn(hidden, hidden, stride, groups=hidden),
            nn.Conv2d(hidden, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):
    """MobileNetV2 (width 1.0): depthwise-separable inverted residual blocks."""

    SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1)]

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [_conv_bn(3, 32, 2)]
        cin = 32
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(_conv_bn(cin, 1280, k=1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x):
        x = self.features(x)
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class UNetSmall(nn.Module):
    """A three-level UNet: conv blocks down, ConvTranspose2d up, skip concatenations."""

    def __init__(self, cin: int = 3, base: int = 16, classes: int = 2):
        super().__init__()

        def block(a, b):
            return nn.Sequential(nn.Conv2d(a, b, 3, padding=1), nn.BatchNorm2d(b), nn.ReLU(inplace=True),
                                 nn.Conv2d(b, b, 3, padding=1), nn.BatchNorm2d(b), nn.ReLU(inplace=True))  # fmt: skip

        self.down1, self.down2, self.mid = block(cin, base), block(base, base * 2), block(base * 2, base * 4)
        self.up2 = nn.ConvTranspose2d(base * 4, base * 2, 2, stride=2)
        self.dec2 = block(base * 4, base * 2)
        self.up1 = nn.ConvTranspose2d(base * 2, base, 2, stride=2)
        self.dec1 = block(base * 2, base)
        self.out = nn.Conv2d(base, classes, 1)

    def forward(self, x):
        d1 = self.down1(x)
        d2 = self.down2(nn.functional.max_pool2d(d1, 2))
        m = self.mid(nn.functional.max_pool2d(d2, 2))
        u2 = self.dec2(torch.cat([self.up2(m), d2], 1))
        u1 = self.dec1(torch.cat([self.up1(u2), d1], 1))
        return self.out(u1)


class RNNClassifier(nn.Module):
    """Embedding -> LSTM/GRU -> Linear on the last step."""

    def __init__(self, cell: str = "lstm", hidden: int = 256, layers: int = 1, bidirectional: bool = False):
        super().__init__()
        self.embed = nn.Embedding(1000, 128)
        rnn = nn.LSTM if cell == "lstm" else nn.GRU
        self.rnn = rnn(128, hidden, num_layers=layers, batch_first=True, bidirectional=bidirectional)
        self.head = nn.Linear(hidden * (2 if bidirectional else 1), 10)

    def forward(self, ids):
        out, _ = self.rnn(self.embed(ids))
        return self.head(out[:, -1])


class LoopedCells(nn.Module):
    """An LSTMCell and a GRUCell stepped by hand in a Python loop (many tiny ops)."""

    def __init__(self, features: int = 64, hidden: int = 128):
        super().__init__()
        self.lstm = nn.LSTMCell(features, hidden)
        self.gru = nn.GRUCell(hidden, hidden)
        self.head = nn.Linear(hidden, 10)

    def forward(self, x):  # x: (batch, time, features)
        b = x.shape[0]
        h = c = g = x.new_zeros(b, self.lstm.hidden_size)
        for t in range(x.shape[1]):
            h, c = self.lstm(x[:, t], (h, c))
            g = self.gru(h, g)
        return self.head(g)


class MHAModel(nn.Module):
    """Embedding, two self-attention blocks built from nn.MultiheadAttention, a pooled head."""

    def __init__(self, d: int = 256, heads: int = 8, blocks: int = 2):
        super().__init__()
        self.embed = nn.Embedding(1000, d)
        self.attn = nn.ModuleList(nn.MultiheadAttention(d, heads, batch_first=True) for _ in range(blocks))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(blocks))
        self.head = nn.Linear(d, 10)

    def forward(self, ids):
        x = self.embed(ids)
        for attn, norm in zip(self.attn, self.norms):
            x = norm(x + attn(x, x, x, need_weights=False)[0])
        return self.head(x.mean(1))


class RecSys(nn.Module):
    """DLRM-style: dense MLP, sparse EmbeddingBags, pairwise dot interactions, top MLP."""

    def __init__(self, tables: int = 8, rows: int = 10000, dim: int = 64, dense: int = 13):
        super().__init__()
        self.bags = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(tables))
        self.bottom = nn.Sequential(nn.Linear(dense, 256), nn.ReLU(), nn.Linear(256, dim), nn.ReLU())
        n = tables + 1
        self.top = nn.Sequential(nn.Linear(dim + n * (n - 1) // 2, 256), nn.ReLU(), nn.Linear(256, 1), nn.Sigmoid())

    def forward(self, dense, indices, offsets):
        x = self.bottom(dense)
        feats = torch.stack([x] + [bag(indices[i], offsets) for i, bag in enumerate(self.bags)], 1)
        inter = torch.bmm(feats, feats.transpose(1, 2))
        i, j = torch.triu_indices(feats.shape[1], feats.shape[1], 1)
        return self.top(torch.cat([x, inter[:, i, j]], 1))


# --------------------------------------------------------------------------- builders


def tiny_mlp() -> Built:
    return TinyMLP().eval(), (torch.randn(32, 256),), {}


def lenet() -> Built:
    return LeNet().eval(), (torch.randn(1, 1, 28, 28),), {}


def small_cnn() -> Built:
    return SmallCNN().eval(), (torch.randn(8, 3, 32, 32),), {}


def resnet18() -> Built:
    from flopsight.cli import zoo

    model, inputs = zoo.build("resnet18", batch_size=1)
    return model.eval(), tuple(inputs), {}


def mobilenet_v2() -> Built:
    return MobileNetV2().eval(), (torch.randn(1, 3, 224, 224),), {}


def unet_small() -> Built:
    return UNetSmall().eval(), (torch.randn(1, 3, 128, 128),), {}


def lstm() -> Built:
    return RNNClassifier("lstm").eval(), (_ids(4, 64),), {}


def gru() -> Built:
    return RNNClassifier("gru").eval(), (_ids(4, 64),), {}


def bilstm_3layer() -> Built:
    return RNNClassifier("lstm", hidden=128, layers=3, bidirectional=True).eval(), (_ids(4, 64),), {}


def rnn_cells_loop() -> Built:
    return LoopedCells().eval(), (torch.randn(4, 32, 64),), {}


def transformer_encoder() -> Built:
    layer = nn.TransformerEncoderLayer(256, 8, 1024, batch_first=True)
    model = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
    return model.eval(), (torch.randn(2, 64, 256),), {}


def mha() -> Built:
    return MHAModel().eval(), (_ids(2, 64),), {}


def recsys() -> Built:
    batch, tables, per_bag = 32, 8, 4
    g = torch.Generator().manual_seed(0)
    indices = torch.randint(0, 10000, (tables, batch * per_bag), generator=g)
    offsets = torch.arange(0, batch * per_bag, per_bag)
    return RecSys(tables).eval(), (torch.randn(batch, 13), indices, offsets), {}


def _hf(model_cls: str, config_cls: str, **config) -> nn.Module:
    import transformers

    torch.manual_seed(0)
    return getattr(transformers, model_cls)(getattr(transformers, config_cls)(**config)).eval()


def vit_small() -> Built:
    model = _hf("ViTModel", "ViTConfig", hidden_size=384, num_hidden_layers=12, num_attention_heads=6,
                intermediate_size=1536, image_size=224, patch_size=16)  # fmt: skip
    return model, (torch.randn(1, 3, 224, 224),), {}


def convnext_tiny() -> Built:
    model = _hf("ConvNextModel", "ConvNextConfig", depths=[3, 3, 9, 3], hidden_sizes=[96, 192, 384, 768])
    return model, (torch.randn(1, 3, 224, 224),), {}


def swin_tiny() -> Built:
    model = _hf("SwinModel", "SwinConfig", image_size=224, embed_dim=96, depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24])
    return model, (torch.randn(1, 3, 224, 224),), {}


def bert_base() -> Built:
    return _hf("BertModel", "BertConfig"), (_ids(1, 128),), {}


def distilbert() -> Built:
    return _hf("DistilBertModel", "DistilBertConfig"), (_ids(1, 128),), {}


def gpt2() -> Built:
    return _hf("GPT2LMHeadModel", "GPT2Config"), (_ids(1, 128),), {"use_cache": False}


def t5_small() -> Built:
    model = _hf("T5Model", "T5Config", d_model=512, d_ff=2048, num_layers=6, num_heads=8, vocab_size=32128)
    return model, (), {"input_ids": _ids(1, 128), "decoder_input_ids": _ids(1, 32), "use_cache": False}


def bart_small() -> Built:
    model = _hf("BartModel", "BartConfig", d_model=256, encoder_layers=4, decoder_layers=4,
                encoder_attention_heads=4, decoder_attention_heads=4,
                encoder_ffn_dim=1024, decoder_ffn_dim=1024, vocab_size=50265)  # fmt: skip
    return model, (), {"input_ids": _ids(1, 128), "decoder_input_ids": _ids(1, 32), "use_cache": False}


def whisper_tiny() -> Built:
    model = _hf("WhisperModel", "WhisperConfig", d_model=384, encoder_layers=4, decoder_layers=4,
                encoder_attention_heads=6, decoder_attention_heads=6,
                encoder_ffn_dim=1536, decoder_ffn_dim=1536, num_mel_bins=80, vocab_size=51865)  # fmt: skip
    features = torch.randn(1, 80, 3000, generator=torch.Generator().manual_seed(0))
    return model, (), {"input_features": features, "decoder_input_ids": _ids(1, 16), "use_cache": False}


_TINY_DECODER = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=8,
                     num_key_value_heads=4, vocab_size=32000, max_position_embeddings=512)  # fmt: skip


def llama_tiny() -> Built:
    return _hf("LlamaForCausalLM", "LlamaConfig", **_TINY_DECODER), (_ids(1, 128),), {"use_cache": False}


def mistral_tiny() -> Built:
    model = _hf("MistralForCausalLM", "MistralConfig", sliding_window=64, **_TINY_DECODER)
    return model, (_ids(1, 128),), {"use_cache": False}


def qwen2_tiny() -> Built:
    return _hf("Qwen2ForCausalLM", "Qwen2Config", **_TINY_DECODER), (_ids(1, 128),), {"use_cache": False}


#: name -> builder, ordered roughly from smallest to largest
MODELS: dict[str, Callable[[], Built]] = {
    "tiny-mlp": tiny_mlp,
    "lenet": lenet,
    "small-cnn": small_cnn,
    "recsys": recsys,
    "rnn-cells-loop": rnn_cells_loop,
    "lstm": lstm,
    "gru": gru,
    "bilstm-3layer": bilstm_3layer,
    "mha": mha,
    "transformer-encoder": transformer_encoder,
    "unet-small": unet_small,
    "mobilenet-v2": mobilenet_v2,
    "resnet18": resnet18,
    "llama-tiny": llama_tiny,
    "mistral-tiny": mistral_tiny,
    "qwen2-tiny": qwen2_tiny,
    "bart-small": bart_small,
    "vit-small": vit_small,
    "convnext-tiny": convnext_tiny,
    "swin-tiny": swin_tiny,
    "whisper-tiny": whisper_tiny,
    "t5-small": t5_small,
    "distilbert": distilbert,
    "bert-base": bert_base,
    "gpt2": gpt2,
}


def build(name: str) -> Built:
    """``(model.eval(), args, kwargs)`` for a registered model."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; expected one of {', '.join(MODELS)}")
    model, args, kwargs = MODELS[name]()
    return model.eval(), tuple(args), dict(kwargs)


def main() -> None:
    torch.set_num_threads(2)
    print("| model | params | plain forward (median of 5) |\n|---|---:|---:|")
    with torch.no_grad():
        for name in MODELS:
            model, args, kwargs = build(name)
            model(*args, **kwargs)
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                model(*args, **kwargs)
                times.append(time.perf_counter() - t0)
            params = sum(p.numel() for p in model.parameters())
            print(f"| {name} | {params / 1e6:.2f} M | {sorted(times)[2] * 1e3:.2f} ms |")


if __name__ == "__main__":
    main()
