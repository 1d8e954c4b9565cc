"""Embedding backward: ``emb(ids).sum().backward()`` as users run it.

The weight's gradient accumulates the looked-up rows: one add per gathered element into a
zeroed ``(num_weights, D)`` gradient (dense: repeated indices are data); a per-index scale
that is not 1 (per-sample weight, 1/bag size, 1/frequency) adds a multiply per gathered
element and a divide or multiply per index and factor; a sparse gradient copies the rows
(free). ``n`` indices, width ``D``, ``B`` bags. CPU and meta count the same.
"""

from __future__ import annotations

import pytest
import torch
from helpers import formula_of, layer_backward, meta
from torch import nn

import flopsight
from flopsight.formulas import Cost

aten = torch.ops.aten

V, D = 20, 8  # vocabulary, width
IDS = (3, 5)
n = 3 * 5  # indices of nn.Embedding
nb, B = 12, 3  # indices and bags of nn.EmbeddingBag


def ids():
    return torch.randint(0, V, IDS)


def flat():
    return torch.randint(0, V, (nb,))


def offsets():
    return torch.tensor([0, 4, 8])


DENSE = "aten.embedding_dense_backward"
BAG = "aten._embedding_bag_backward"
PSW = "aten._embedding_bag_per_sample_weights_backward"

CASES = [
    # (id, layer, inputs, {op: FLOPs})
    ("Embedding", lambda: nn.Embedding(V, D), lambda: (ids(),), {DENSE: n * D}),
    ("Embedding padding_idx", lambda: nn.Embedding(V, D, padding_idx=0), lambda: (ids(),), {DENSE: n * D}),  # dense
    # 1/count per index (n), the scaled add: a multiply and an add per element
    ("Embedding scale_grad_by_freq", lambda: nn.Embedding(V, D, scale_grad_by_freq=True), lambda: (ids(),),
     {DENSE: n * D + n * D + n}),
    ("Embedding max_norm", lambda: nn.Embedding(V, D, max_norm=1.0), lambda: (ids(),), {DENSE: n * D}),
    # sparse: the rows become a sparse gradient's values (copies, sparse bookkeeping): free
    ("Embedding sparse", lambda: nn.Embedding(V, D, sparse=True), lambda: (ids(),), {}),
    ("EmbeddingBag sum", lambda: nn.EmbeddingBag(V, D, mode="sum"), lambda: (flat(), offsets()), {BAG: nb * D}),
    # mean: each index's row scaled by 1/bag size (n divides), multiply + add per element
    ("EmbeddingBag mean", lambda: nn.EmbeddingBag(V, D, mode="mean"), lambda: (flat(), offsets()),
     {BAG: 2 * nb * D + nb}),
    # mean and frequency: two factors per index (2n), still one multiply per element
    ("EmbeddingBag mean freq", lambda: nn.EmbeddingBag(V, D, mode="mean", scale_grad_by_freq=True),
     lambda: (flat(), offsets()), {BAG: 2 * nb * D + 2 * nb}),
    # max: each bag's gradient goes to its selected elements: B*D adds
    ("EmbeddingBag max", lambda: nn.EmbeddingBag(V, D, mode="max"), lambda: (flat(), offsets()), {BAG: B * D}),
    ("EmbeddingBag sum sparse", lambda: nn.EmbeddingBag(V, D, mode="sum", sparse=True), lambda: (flat(), offsets()),
     {BAG: 0}),
    # sparse mean: no accumulation, the 1/bag-size scale (n) and its multiply (n*D)
    ("EmbeddingBag mean sparse", lambda: nn.EmbeddingBag(V, D, mode="mean", sparse=True),
     lambda: (flat(), offsets()), {BAG: nb * D + nb}),
    # per-sample weights that need a gradient: the weight's gradient scales by them (n*D + n on
    # top of the adds) and each weight's gradient is a dot product of D (2 per element)
    ("EmbeddingBag per_sample_weights", lambda: nn.EmbeddingBag(V, D, mode="sum"),
     lambda: (flat(), offsets(), torch.rand(nb, requires_grad=True)), {BAG: 2 * nb * D + nb, PSW: 2 * nb * D}),
    ("EmbeddingBag per_sample_weights constant", lambda: nn.EmbeddingBag(V, D, mode="sum"),
     lambda: (flat(), offsets(), torch.rand(nb)), {BAG: 2 * nb * D + nb}),
]


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("name, layer, inputs, expected", CASES, ids=[c[0] for c in CASES])
def test_embedding_backward(device, name, layer, inputs, expected):
    total, ops = layer_backward(device, layer(), *inputs())
    assert total == (0, sum(expected.values()))
    assert {op: ops[op][2] for op in expected} == expected


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_frozen_bag_with_trainable_per_sample_weights(device):
    """Only the per-sample weights need a gradient: the weight's backward does not run."""
    bag = nn.EmbeddingBag(V, D, mode="sum")
    bag.requires_grad_(False)
    total, ops = layer_backward(device, bag, flat(), offsets(), torch.rand(nb, requires_grad=True))
    assert total == (0, 2 * nb * D) and BAG not in ops


def test_embedding_in_a_language_model():
    """Token + position embeddings of a tiny LM: each table's gradient accumulates its rows."""

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos, self.head = nn.Embedding(V, D), nn.Embedding(16, D), nn.Linear(D, V)

        def forward(self, x):
            return self.head(self.tok(x) + self.pos(torch.arange(x.shape[1], device=x.device)))

    model = LM()
    x = ids()
    with flopsight.Profiler(model) as prof:
        nn.functional.cross_entropy(model(x).flatten(0, 1), x.flatten()).backward()
    assert prof.result.module("tok").backward.flops == n * D  # 15 rows of 8
    # positions (5, D) broadcast over the batch: 5 rows (summing g over the batch first, 3*5*8
    # adds, is the backward of the root's add, counted there)
    assert prof.result.module("pos").backward.flops == 5 * D
    assert prof.result.unsupported_ops == {}


def test_embedding_backward_formulas_called_directly():
    g, idx = meta(15, D), meta(15, dtype=torch.int64)
    # composites (decomposed before dispatch on every device): named for modes that see them
    backward = formula_of(aten.embedding_backward)
    assert backward(meta(V, D), g, idx, scale_grad_by_freq=False, sparse=False) == Cost(0, 15 * D)
    assert backward(None, g, idx, scale_grad_by_freq=False, sparse=True) == Cost()
    assert formula_of(aten.embedding_sparse_backward)(None, g, idx, scale_grad_by_freq=True) == Cost(0, 15 * D + 15)
    bags, fi = meta(B, D), meta(nb, dtype=torch.int64)
    dense, sparse = formula_of(aten._embedding_bag_dense_backward), formula_of(aten._embedding_bag_sparse_backward)
    assert dense(meta(V, D), bags, fi, scale_grad_by_freq=False, mode=1, per_sample_weights=None) == Cost(
        0, 2 * nb * D + nb)
    assert sparse(None, bags, fi, scale_grad_by_freq=False, mode=0, per_sample_weights=meta(nb)) == Cost(
        0, nb * D + nb)
    assert formula_of(aten.embedding_dense_backward)(None, g.long(), idx, scale_grad_by_freq=False) == Cost()  # integer
