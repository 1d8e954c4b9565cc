"""Reference models with expected costs derived by hand from their hyperparameters."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class LeNet(nn.Module):
    """The LeNet of the DeepSpeed data-parallel sample report (3x32x32 inputs)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)

    @staticmethod
    def expected_macs(batch: int) -> dict[str, int]:
        # conv: Cout * Hout * Wout * Cin * k * k per sample; linear: in * out per sample
        per_sample = {
            "conv1": 6 * 28 * 28 * 3 * 5 * 5,  # 32-5+1 = 28
            "conv2": 16 * 10 * 10 * 6 * 5 * 5,  # pool: 28/2 = 14; 14-5+1 = 10
            "fc1": 400 * 120,
            "fc2": 120 * 84,
            "fc3": 84 * 10,
            "pool": 0,
        }
        macs = {k: v * batch for k, v in per_sample.items()}
        macs[""] = sum(macs.values())
        return macs

    @staticmethod
    def expected_flops(batch: int) -> int:
        macs = LeNet.expected_macs(batch)[""]
        bias = (6 * 28 * 28 + 16 * 10 * 10 + 120 + 84 + 10) * batch  # one add per output element
        relu = (6 * 28 * 28 + 16 * 10 * 10 + 120 + 84) * batch  # one per element
        pool = (6 * 28 * 28 + 16 * 10 * 10) * batch  # one per *input* element (DeepSpeed)
        return 2 * macs + bias + relu + pool


class JSC_Tiny(nn.Module):
    """The 117-parameter model of the ZeRO-3 sample report."""

    def __init__(self):
        super().__init__()
        self.seq_blocks = nn.Sequential(nn.BatchNorm1d(16), nn.ReLU(inplace=True), nn.Linear(16, 5),
                                        nn.ReLU(inplace=True))

    def forward(self, x):
        return self.seq_blocks(x)


class Stack(nn.Module):
    """A ModuleList container (never called itself) and a norm that is never used."""

    def __init__(self, width: int = 8, depth: int = 3):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(depth))
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:  # the last norm never runs
                x = self.norms[i](x)
        return self.head(x)


class SharedChild(nn.Module):
    """One Linear object reachable from two parents (and called from each)."""

    def __init__(self):
        super().__init__()
        shared = nn.Linear(4, 4, bias=False)
        self.enc = nn.Sequential(shared, nn.Linear(4, 4, bias=False))
        self.dec = nn.Sequential(shared)

    def forward(self, x):
        return self.dec(self.enc(x))


class Recursive(nn.Module):
    """Calls itself ``depth`` times: each call runs one matmul of its own."""

    def __init__(self, width: int = 4):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width, width))

    def forward(self, x, depth: int = 2):
        x = x @ self.weight
        return self(x, depth - 1) if depth > 0 else x


class KwargsOnly(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 2)

    def forward(self, *, x, scale=1.0):
        return self.proj(x) * scale


class TiedLM(nn.Module):
    """An embedding whose weight is also the output projection (tied, counted once)."""

    def __init__(self, vocab: int = 10, dim: int = 4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(self.embed(ids))


class Tagger(nn.Module):
    """An LSTM over a sequence, then a Linear on its last step."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 4, batch_first=True)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


#: Sizes of the tiny transformers encoders (BERT, ViT) that op-coverage tests build.
TINY_ENCODER = dict(hidden_size=32, num_attention_heads=2, intermediate_size=64)


def tiny_llama_config():
    """A 2-layer Llama with grouped-query attention (4 query heads, 2 KV heads)."""
    import transformers

    return transformers.LlamaConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                                    num_key_value_heads=2, intermediate_size=64, vocab_size=100)


def gqa_llama_config():
    """A 2-layer Llama, 256 wide, with grouped-query attention (8 query heads, 4 KV heads): its
    hand-derived counts are in tests/test_transformers_models.py; `.ci/version_row.py` reports it
    on every tested torch."""
    import transformers

    return transformers.LlamaConfig(
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=4,  # grouped-query attention
        vocab_size=1000,
        max_position_embeddings=128,
    )
