"""Embeddings: lookups free, bags reduce, max_norm renormalises. Hand-derived, CPU == meta.

``nn.EmbeddingBag(V, D)`` over ``n`` indices in ``B`` bags: sum n·D, sum with
per-sample weights 2·n·D, mean n·D + B·D, max n·D. ``max_norm`` costs, per looked-up
index, its row's p-norm (2·D + 1 for p=2), a compare and a scale factor (3) and the
rescale (D).
"""

import pytest
import torch
import torch.nn.functional as F
from helpers import measure_cpu_meta, measure_on, ops_of
from torch import nn

V, D = 100, 16


def IDS():  # 4 bags of 5 indices: n = 20
    return torch.randint(0, V, (4, 5))


def FLAT():  # 10 indices, bags by offsets
    return torch.randint(0, V, (10,))


CASES = [
    ("embedding", nn.Embedding(V, D), lambda: (IDS(),), 0),
    ("embedding_padding_idx", nn.Embedding(V, D, padding_idx=0), lambda: (IDS(),), 0),
    # 20 indices, each: 2-norm of a 16-wide row (2*16 + 1), compare + scale factor (3), rescale (16)
    ("embedding_max_norm", nn.Embedding(V, D, max_norm=1.0), lambda: (IDS(),), 20 * ((2 * D + 1) + 3 + D)),
    ("embedding_max_norm_p1", nn.Embedding(V, D, max_norm=1.0, norm_type=1.0), lambda: (IDS(),),
     20 * (2 * D + 3 + D)),
    ("bag_sum", nn.EmbeddingBag(V, D, mode="sum"), lambda: (IDS(),), 20 * D),
    ("bag_mean", nn.EmbeddingBag(V, D, mode="mean"), lambda: (IDS(),), 20 * D + 4 * D),
    ("bag_max", nn.EmbeddingBag(V, D, mode="max"), lambda: (IDS(),), 20 * D),
    ("bag_sum_per_sample_weights", nn.EmbeddingBag(V, D, mode="sum"), lambda: (IDS(), None, torch.rand(4, 5)),
     2 * 20 * D),
    # 10 indices into 3 bags by offsets
    ("bag_mean_offsets", nn.EmbeddingBag(V, D, mode="mean"), lambda: (FLAT(), torch.tensor([0, 3, 7])),
     10 * D + 3 * D),
    ("bag_mean_include_last_offset", nn.EmbeddingBag(V, D, mode="mean", include_last_offset=True),
     lambda: (FLAT(), torch.tensor([0, 3, 7, 10])), 10 * D + 3 * D),
    ("bag_sum_padding_idx", nn.EmbeddingBag(V, D, mode="sum", padding_idx=0), lambda: (IDS(),), 20 * D),  # dense
]


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("module, inputs, flops", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_embedding(module, inputs, flops, grad):
    # a copy of the shared case module is measured (helpers.to_device): max_norm's in-place
    # renormalisation does not touch it
    with torch.set_grad_enabled(grad):
        assert measure_cpu_meta(module, *inputs()) == (0, flops)


def test_functional_embedding_bag_max():
    w = torch.randn(V, D)
    assert measure_on("cpu", lambda i, w: F.embedding_bag(i, w, mode="max"), IDS(), w) == (0, 20 * D)


def test_embedding_is_one_free_lookup():
    assert ops_of(nn.Embedding(V, D), IDS()) == {"aten.embedding": (1, 0, 0)}


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_bag_kernel_depends_on_autograd_but_not_the_count(device):
    # a weight that needs no grad runs _embedding_bag_forward_only, a parameter _embedding_bag
    w = torch.randn(V, D, device=device)
    bag = lambda i, w: F.embedding_bag(i, w, mode="mean")  # noqa: E731
    ids = IDS().to(device)
    assert ops_of(bag, ids, w)["aten._embedding_bag_forward_only"] == (1, 0, 20 * D + 4 * D)
    assert ops_of(bag, ids, nn.Parameter(w))["aten._embedding_bag"] == (1, 0, 20 * D + 4 * D)
