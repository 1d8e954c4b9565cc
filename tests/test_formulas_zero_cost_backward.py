"""Backward plumbing is free, and real training steps have a formula for every op.

The gradients of views, selections and copies are written into zeros or picked from the
incoming gradient, without arithmetic: ``select_backward``, ``slice_backward``,
``diagonal_backward``, ``masked_scatter_backward``, the scatter of ``max(dim)``... cost 0.
The last tests train tiny transformers models (forward, backward, AdamW step) and require
every op to have a formula and CPU and meta to agree, phase by phase.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import layer_backward, python_backend_only
from torch import nn

import flopsight

SHAPE = (4, 6, 5)


def X():
    return torch.randn(SHAPE, requires_grad=True)


FREE = [
    # (id, function, extra inputs, a backward op that must run); every case costs 0
    ("select", lambda y: y[:, 0], (), "aten.select_backward"),
    ("slice", lambda y: y[:, 1:3], (), "aten.slice_backward"),
    ("narrow_copy", lambda y: y.narrow_copy(1, 0, 2), (), "aten.slice_backward"),
    ("diagonal", lambda y: y.diagonal(dim1=1, dim2=2), (), "aten.diagonal_backward"),
    ("masked_scatter", lambda y, z, m: z.masked_scatter(m, y),
     (torch.zeros(SHAPE), torch.ones(SHAPE, dtype=torch.bool)), "aten.masked_scatter_backward"),
    ("max dim", lambda y: y.max(1).values, (), "aten.scatter"),  # value_selecting_reduction_backward
    ("topk", lambda y: y.topk(2, 1).values, (), "aten.scatter"),
    ("view transpose", lambda y: y.view(4, 30).t(), (), "aten.t"),
    ("permute contiguous", lambda y: y.permute(2, 0, 1).contiguous(), (), "aten.permute"),
    ("unbind", lambda y: y.unbind(1)[2], (), "aten.stack"),  # zeros stacked with g
    ("chunk", lambda y: y.chunk(3, 1)[1], (), "aten.cat"),  # zeros concatenated with g
    ("flip", lambda y: y.flip(1), (), "aten.flip"),
    ("roll", lambda y: y.roll(1, 1), (), "aten.roll"),
    ("tril", lambda y: y.tril(), (), "aten.tril"),
    ("constant pad", lambda y: F.pad(y, (1, 2)), (), "aten.constant_pad_nd"),  # a negative pad: a slice
    ("to double", lambda y: y.double(), (), "aten._to_copy"),
    ("where", lambda y: torch.where(y > 0, y, 0.0), (), "aten.where"),
    ("pixel_shuffle", lambda y: F.pixel_shuffle(y.reshape(1, 4, 6, 5), 2), (), "aten.pixel_unshuffle"),
]


def narrow_copy_has_a_derivative() -> bool:
    """2.9's and 2.11's autograd raise "derivative for aten::narrow_copy is not implemented"."""
    try:
        torch.ones(2, 2, requires_grad=True).narrow_copy(1, 0, 1).sum().backward()
    except RuntimeError:
        return False
    return True


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("name, fn, extra, op", FREE, ids=[c[0] for c in FREE])
def test_backward_plumbing_is_free(device, name, fn, extra, op, backend):
    if name == "narrow_copy" and not narrow_copy_has_a_derivative():
        pytest.skip(f"torch {torch.__version__} has no derivative for aten::narrow_copy")
    if name in ("max dim", "topk") and device == "cpu":
        python_backend_only(backend)  # a plain run scatters in place
    total, ops = layer_backward(device, fn, X(), *extra)
    assert op in ops, f"{op} did not run: the case tests nothing"
    assert total == (0, 0)


def test_sparse_gradient_bookkeeping_is_free():
    emb = nn.Embedding(20, 8, sparse=True)
    total, ops = layer_backward("cpu", emb, torch.randint(0, 20, (3, 5)))
    assert {"aten._indices", "aten._values", "aten._sparse_coo_tensor_with_dims_and_tensors"} <= set(ops)
    assert total == (0, 0)


# -- real models: a training step with every op counted, the same on CPU and meta -----------
transformers = pytest.importorskip("transformers")
from models import TINY_ENCODER, tiny_llama_config  # noqa: E402


def _training_models():
    t = transformers
    small = TINY_ENCODER
    ids = torch.randint(0, 100, (2, 8))
    pix = torch.randn(2, 3, 16, 16)
    llama = tiny_llama_config()
    t5 = t.T5Config(num_layers=2, d_model=32, d_kv=8, num_heads=4, d_ff=64, vocab_size=100, decoder_start_token_id=0,
                    pad_token_id=0, feed_forward_proj="gated-gelu")
    return {
        # name: (builder, inputs)
        "bert-classification": (
            lambda: t.BertForSequenceClassification(t.BertConfig(num_hidden_layers=2, vocab_size=100, num_labels=3,
                                                                  **small)),
            dict(input_ids=ids, labels=torch.tensor([0, 2]))),
        "bert-regression": (
            lambda: t.BertForSequenceClassification(t.BertConfig(num_hidden_layers=1, vocab_size=100, num_labels=1,
                                                                  **small)),
            dict(input_ids=ids, labels=torch.tensor([0.5, -1.0]))),
        "gpt2": (lambda: t.GPT2LMHeadModel(t.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100,
                                                        n_positions=16)),
                 dict(input_ids=ids, labels=ids)),
        "llama": (lambda: t.LlamaForCausalLM(llama), dict(input_ids=ids, labels=ids)),
        "t5": (lambda: t.T5ForConditionalGeneration(t5), dict(input_ids=ids, labels=ids)),
        "vit": (lambda: t.ViTForImageClassification(t.ViTConfig(num_hidden_layers=2, image_size=16, patch_size=8,
                                                                 num_labels=3, **small)),
                dict(pixel_values=pix, labels=torch.tensor([0, 1]))),
    }


def _train(name, device):
    build, inputs = _training_models()[name]
    torch.manual_seed(0)
    with torch.device(device):  # built there: Module.to("meta") would untie GPT-2's tied embeddings
        model = build().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    inputs = {k: v.to(device) for k, v in inputs.items()}
    with flopsight.Profiler(model, optimizer=opt) as prof:
        model(**inputs).loss.backward()
        opt.step()
    return prof.result


@pytest.mark.parametrize("name", list(_training_models()))
def test_transformers_training_step_has_no_unsupported_op(name):
    cpu, meta = _train(name, "cpu"), _train(name, "meta")
    assert cpu.unsupported_ops == {} and meta.unsupported_ops == {}
    for phase in ("forward", "backward", "step"):
        c, m = cpu.phase_total(phase), meta.phase_total(phase)
        assert (m.macs, m.flops) == (c.macs, c.flops), phase
    # a backward pass costs between 1x (first layers) and 2x its forward's products
    assert cpu.phase_total("forward").macs < cpu.phase_total("backward").macs <= 2 * cpu.phase_total("forward").macs
    params = list(_training_models()[name][0]().parameters())  # tied weights once
    # AdamW: 14 FLOPs per parameter element, 1 per parameter tensor (its step count)
    assert cpu.phase_total("step").flops == 14 * sum(p.numel() for p in params) + len(params)
