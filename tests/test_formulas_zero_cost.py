"""Zero-cost ops: views, copies, creation, random sampling, indexing, ordering.

Each case is written the way users write it (``x.view``, ``torch.cat``, ``x[idx]`` ...)
and must cost (0 MACs, 0 FLOPs) on CPU and on meta. Each case also checks that the
aten ops it dispatched are ones :mod:`flopsight.formulas.zero_cost` registers, so a case
cannot pass by exercising some other family (or nothing at all). Inputs that need
computing (masks, indices) are built outside the measured call.

The last tests run real transformers models and require every op they dispatch to have
a formula: the coverage check for this family (and, transitively, the others).
"""

import pytest
import torch
import torch.nn.functional as F
from helpers import measure_on, ops_of

import flopsight
from flopsight.formulas import REGISTRY
from flopsight.formulas import zero_cost as zero

ZERO_NAMES = {str(op) for op in zero.ZERO_COST_OPS}
# Packets owned by the reduction family because they also have accumulating forms; their
# plain (writing) forms, and integer reductions such as one_hot's index bound checks
# (aminmax; a min and a max on torch 2.9 and 2.11), cost 0.
ALSO_FREE_HERE = {"aten.index_put", "aten.index_put_", "aten.scatter", "aten.scatter_", "aten.aminmax", "aten.min",
                  "aten.max"}


def X():
    return torch.randn(4, 6, 8)


def IDX():  # valid indices into dims 0 (size 4), 1 (size 6) and 2 (size 8)
    return torch.tensor([0, 3, 1])


def MASK():
    return torch.randn(4, 6, 8) > 0


def CPLX():
    return torch.randn(4, 6, 4, 2)


# (id, fn, inputs, runs on meta)
VIEWS = [
    ("view", lambda x: x.view(24, 8), X, True),
    ("reshape_viewable", lambda x: x.reshape(-1), X, True),
    ("reshape_copying", lambda x: x.transpose(0, 1).reshape(24, 8), X, True),  # clone + _unsafe_view
    ("flatten", lambda x: x.flatten(1), X, True),
    ("unflatten", lambda x: x.unflatten(2, (2, 4)), X, True),
    ("view_as", lambda x: x.view_as(x), X, True),
    ("expand", lambda x: x[:1].expand(4, 6, 8), X, True),
    ("expand_as", lambda x: x[:1].expand_as(x), X, True),
    ("broadcast_to", lambda x: torch.broadcast_to(x[0], (3, 6, 8)), X, True),
    ("permute", lambda x: x.permute(2, 0, 1), X, True),
    ("transpose", lambda x: x.transpose(1, 2), X, True),
    ("t", lambda x: x[0].t(), X, True),
    ("mT", lambda x: x.mT, X, True),
    ("movedim", lambda x: x.movedim(0, 2), X, True),
    ("swapaxes", lambda x: x.swapaxes(0, 1), X, True),
    ("squeeze", lambda x: x[:1].squeeze(), X, True),
    ("squeeze_dim", lambda x: x[:1].squeeze(0), X, True),
    ("squeeze_dims", lambda x: x[:1, :1].squeeze((0, 1)), X, True),
    ("unsqueeze", lambda x: x.unsqueeze(1), X, True),
    ("squeeze_inplace", lambda x: x[:1].clone().squeeze_(0), X, True),
    ("unsqueeze_inplace", lambda x: x.clone().unsqueeze_(0), X, True),
    ("t_inplace", lambda x: x[0].clone().t_(), X, True),
    ("transpose_inplace", lambda x: x.clone().transpose_(0, 1), X, True),
    ("select", lambda x: x[:, 2], X, True),
    ("slice", lambda x: x[1:3, ::2], X, True),
    ("narrow", lambda x: x.narrow(0, 1, 2), X, True),
    ("split", lambda x: x.split(3, 1), X, True),
    ("split_with_sizes", lambda x: x.split([2, 4], 1), X, True),
    ("chunk", lambda x: x.chunk(2, 1), X, True),
    ("tensor_split", lambda x: x.tensor_split(3, 1), X, True),
    ("unbind", lambda x: x.unbind(0), X, True),
    ("as_strided", lambda x: x.as_strided((2, 2), (1, 1)), X, True),
    ("diagonal", lambda x: x.diagonal(0, 1, 2), X, True),
    ("tensor_unfold", lambda x: x.unfold(2, 2, 2), X, True),
    ("view_as_complex", lambda c: torch.view_as_complex(c), CPLX, True),
    ("view_as_real", lambda c: torch.view_as_real(torch.view_as_complex(c)), CPLX, True),
    ("conj_resolve", lambda c: torch.view_as_complex(c).conj().resolve_conj(), CPLX, True),
    ("detach", lambda x: x.detach(), X, True),
    ("meshgrid", lambda x: torch.meshgrid(x[0, 0], x[0, 1], indexing="ij"), X, True),
    ("atleast_3d", lambda x: torch.atleast_3d(x[0, 0]), X, True),
    ("size_and_numel", lambda x: x.view(x.size(0), x.numel() // x.size(0)), X, True),
]

COPIES = [
    ("clone", lambda x: x.clone(), X, True),
    ("contiguous", lambda x: x.transpose(0, 1).contiguous(), X, True),
    ("to_dtype", lambda x: x.to(torch.float64), X, True),
    ("half", lambda x: x.half(), X, True),
    ("copy_", lambda x: torch.empty(4, 6, 8, device=x.device).copy_(x), X, True),
    ("copy_broadcast", lambda x: x.clone().copy_(x[0]), X, True),
    ("fill_", lambda x: x.clone().fill_(2.0), X, True),
    ("zero_", lambda x: x.clone().zero_(), X, True),
    ("setitem_scalar", lambda x: x.clone().__setitem__((slice(None), 0), 1.0), X, True),
    ("empty_like", lambda x: torch.empty_like(x), X, True),
    ("zeros_like", lambda x: torch.zeros_like(x), X, True),
    ("ones_like", lambda x: torch.ones_like(x), X, True),
    ("full_like", lambda x: torch.full_like(x, 3.0), X, True),
    ("rand_like", lambda x: torch.rand_like(x), X, True),
    ("randn_like", lambda x: torch.randn_like(x), X, True),
    ("resize_", lambda x: x.clone().resize_(2, 2), X, True),
    ("new_tensors", lambda x: (x.new_empty(2), x.new_zeros(2), x.new_ones(2), x.new_full((2,), 3.0)), X, True),
    ("torch_tensor", lambda x: torch.tensor([1.0, 2.0], device=x.device), X, True),
]

CREATION = [
    ("empty", lambda x: torch.empty(3, 4, device=x.device), X, True),
    ("empty_strided", lambda x: torch.empty_strided((2, 2), (1, 2), device=x.device), X, True),
    ("zeros", lambda x: torch.zeros(3, device=x.device), X, True),
    ("ones", lambda x: torch.ones(3, device=x.device), X, True),
    ("full", lambda x: torch.full((3,), 2.0, device=x.device), X, True),
    ("arange", lambda x: torch.arange(0, 10, 2, device=x.device), X, True),
    ("linspace", lambda x: torch.linspace(0, 1, 5, device=x.device), X, True),
    ("logspace", lambda x: torch.logspace(0, 1, 5, device=x.device), X, True),
    ("eye", lambda x: torch.eye(3, device=x.device), X, True),
    ("scalar_tensor", lambda x: torch.scalar_tensor(2.0, device=x.device), X, True),
    ("tril", lambda x: x.tril(), X, True),
    ("triu_offset", lambda x: x.triu(1), X, True),
    ("triu_indices", lambda x: torch.triu_indices(3, 3, device=x.device), X, True),
    ("diag_embed", lambda x: torch.diag_embed(x), X, True),
    ("block_diag", lambda x: torch.block_diag(x[0], x[1]), X, True),
    ("rand", lambda x: torch.rand(3, device=x.device), X, True),
    ("randn", lambda x: torch.randn(3, device=x.device), X, True),
    ("randint", lambda x: torch.randint(0, 5, (3,), device=x.device), X, True),
    ("randperm", lambda x: torch.randperm(5, device=x.device), X, True),
    ("normal_", lambda x: x.clone().normal_(), X, True),
    ("uniform_", lambda x: x.clone().uniform_(), X, True),
    ("bernoulli", lambda x: torch.bernoulli(x.clone().uniform_()), X, True),
    ("bernoulli_", lambda x: x.clone().bernoulli_(0.5), X, True),
    ("random_", lambda x: x.clone().random_(0, 5), X, True),
    ("exponential_", lambda x: x.clone().exponential_(), X, True),
    ("multinomial", lambda x: torch.multinomial(x[0].clone().uniform_(), 2), X, False),
]

INDEXING = [
    ("index_tensor", lambda x, i: x[i], lambda: (X(), IDX()), True),
    ("index_two_dims", lambda x, i: x[i, i], lambda: (X(), IDX()), True),
    ("index_bool_mask", lambda x, m: x[m], lambda: (X(), MASK()), False),
    ("index_select", lambda x, i: x.index_select(1, i), lambda: (X(), IDX()), True),
    ("gather", lambda x, i: x.gather(2, i), lambda: (X(), torch.randint(0, 8, (4, 6, 3))), True),
    ("take", lambda x, i: x.take(i), lambda: (X(), IDX()), True),
    ("masked_select", lambda x, m: x.masked_select(m), lambda: (X(), MASK()), False),
    ("masked_scatter", lambda x, m: x.masked_scatter(m, x), lambda: (X(), MASK()), True),
    ("nonzero", lambda m: m.nonzero(), lambda: (MASK(),), False),
    ("index_put_plain", lambda x, i: x.clone().index_put_((i,), torch.zeros(3, 6, 8, device=x.device)),
     lambda: (X(), IDX()), True),
    ("setitem_index", lambda x, i, v: x.clone().__setitem__(i, v), lambda: (X(), IDX(), torch.ones(3, 6, 8)), True),
    ("scatter_plain", lambda x, i: x.scatter(2, i, 1.0), lambda: (X(), torch.randint(0, 8, (4, 6, 8))), True),
    ("index_fill", lambda x, i: x.index_fill(0, i, 2.0), lambda: (X(), IDX()), True),
    ("index_copy", lambda x, i: x.index_copy(0, i[:2], x[:2]), lambda: (X(), IDX()), True),
    ("item", lambda x: x[0, 0, 0].item(), X, False),
    ("cat", lambda x: torch.cat([x, x], 1), X, True),
    ("stack", lambda x: torch.stack([x, x]), X, True),
    ("hstack", lambda x: torch.hstack([x, x]), X, True),
    ("vstack", lambda x: torch.vstack([x, x]), X, True),
    ("roll", lambda x: x.roll(1, 0), X, True),
    ("flip", lambda x: x.flip(0), X, True),
    ("rot90", lambda x: x.rot90(1, (1, 2)), X, True),
    ("repeat", lambda x: x.repeat(2, 1, 1), X, True),
    ("tile", lambda x: x.tile(2), X, True),
    ("repeat_interleave", lambda x: x.repeat_interleave(2, dim=0), X, True),
    ("repeat_interleave_tensor", lambda x, r: x.repeat_interleave(r, dim=0),
     lambda: (X(), torch.tensor([1, 2, 0, 1])), False),
    ("pad_constant", lambda x: F.pad(x, (1, 2)), X, True),
    ("pad_reflect", lambda x: F.pad(x, (1, 1), mode="reflect"), X, True),
    ("pad_replicate", lambda x: F.pad(x, (1, 1), mode="replicate"), X, True),
    ("pad_circular", lambda x: F.pad(x, (1, 1), mode="circular"), X, True),
    ("pad_reflect_2d", lambda x: F.pad(x.unsqueeze(0), (1, 1, 1, 1), mode="reflect"), X, True),
    ("pixel_shuffle", lambda x: F.pixel_shuffle(x.reshape(1, 4, 6, 8), 2), X, True),
    ("pixel_unshuffle", lambda x: F.pixel_unshuffle(x.reshape(1, 4, 6, 8), 2), X, True),
    ("channel_shuffle", lambda x: F.channel_shuffle(x.reshape(1, 4, 6, 8), 2), X, True),
    ("nn_unfold_im2col", lambda x: F.unfold(x.unsqueeze(0), 2), X, True),
    ("one_hot", lambda i: F.one_hot(i, 4), IDX, False),
]

ORDERING = [
    ("sort", lambda x: x.sort(dim=1), X, True),
    ("argsort", lambda x: x.argsort(), X, True),
    ("argsort_stable", lambda x: x.argsort(stable=True), X, True),
    ("topk", lambda x: x.topk(2), X, True),
    ("kthvalue", lambda x: x.kthvalue(2), X, True),
    ("median", lambda x: x.median(), X, True),
    ("median_dim", lambda x: x.median(1), X, True),
    ("mode", lambda x: x.mode(1), X, True),
    ("unique", lambda i: torch.unique(i), IDX, False),
    ("unique_dim", lambda i: torch.unique(i.view(3, 1), dim=0), IDX, False),
    ("unique_consecutive", lambda i: torch.unique_consecutive(i), IDX, False),
    ("bucketize", lambda x, b: torch.bucketize(x, b), lambda: (X(), torch.tensor([-1.0, 0.0, 1.0])), True),
    ("searchsorted", lambda x, b: torch.searchsorted(b, x), lambda: (X(), torch.tensor([-1.0, 0.0, 1.0])), True),
    ("isin", lambda i, t: torch.isin(i, t), lambda: (IDX(), torch.tensor([1, 3])), True),
    ("histc", lambda x: torch.histc(x, bins=4, min=-1, max=1), X, True),
]

CASES = VIEWS + COPIES + CREATION + INDEXING + ORDERING


def _inputs(inputs):
    value = inputs()
    return value if isinstance(value, tuple) else (value,)


@pytest.mark.parametrize("fn, inputs, on_meta", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_zero_cost(fn, inputs, on_meta):
    ops = ops_of(fn, *_inputs(inputs))
    assert ops, "the call dispatched no aten op: the case tests nothing"
    assert {name: (macs, flops) for name, (_, macs, flops) in ops.items()} == {name: (0, 0) for name in ops}
    assert set(ops) <= ZERO_NAMES | ALSO_FREE_HERE, f"not zero-cost ops: {set(ops) - ZERO_NAMES - ALSO_FREE_HERE}"
    assert measure_on("cpu", fn, *_inputs(inputs)) == (0, 0)
    if on_meta:
        assert measure_on("meta", fn, *_inputs(inputs)) == (0, 0)


def test_zero_ops_are_registered_as_free():
    from flopsight.formulas.registry import ZERO

    for op in zero.ZERO_COST_OPS:
        assert REGISTRY.lookup(op)[1] is ZERO, op


def test_ownership_boundaries():
    # where/masked_fill belong to the elementwise family; cumsum and the accumulating
    # scatter forms are reductions, not free
    for name in ("where", "masked_fill", "cumsum", "scatter_add", "index_add", "sum", "max"):
        assert str(getattr(torch.ops.aten, name)) not in ZERO_NAMES, name


def test_a_zero_cost_op_is_counted_per_call():
    ops = ops_of(lambda x: [x.view(-1) for _ in range(3)], X())
    assert ops == {"aten.view": (3, 0, 0)}


# -- real models: every op they dispatch must have a formula --------------------------------
transformers = pytest.importorskip("transformers")
from models import TINY_ENCODER, tiny_llama_config  # noqa: E402


def _models():
    t = transformers
    small = TINY_ENCODER
    ids = torch.randint(0, 100, (2, 8))
    pix = torch.randn(2, 3, 32, 32)
    llama = tiny_llama_config()
    t5 = t.T5Config(num_layers=2, d_model=32, d_kv=8, num_heads=4, d_ff=64, vocab_size=100, decoder_start_token_id=0)
    return {
        # name: (builder, args, kwargs, runs on meta)
        "bert": (lambda: t.BertModel(t.BertConfig(num_hidden_layers=2, vocab_size=100, **small)),
                 (ids,), {"attention_mask": torch.ones(2, 8, dtype=torch.long)}, False),  # .item() on the mask
        "gpt2": (lambda: t.GPT2LMHeadModel(t.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100)),
                 (ids,), {"labels": ids}, True),
        "llama": (lambda: t.LlamaForCausalLM(llama), (ids,), {"labels": ids}, True),
        "t5": (lambda: t.T5ForConditionalGeneration(t5), (ids,), {"labels": ids}, True),
        "vit": (lambda: t.ViTModel(t.ViTConfig(num_hidden_layers=2, image_size=32, patch_size=8, **small)),
                (pix,), {}, True),
        "resnet": (lambda: t.ResNetModel(t.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])),
                   (pix,), {}, True),
    }


@pytest.mark.parametrize("name", list(_models()))
def test_transformers_forward_has_no_unsupported_op(name):
    build, args, kwargs, on_meta = _models()[name]
    torch.manual_seed(0)
    model = build().eval()
    with torch.no_grad():
        cpu = flopsight.profile(model, args, kwargs, warm_up=0)
    assert cpu.unsupported_ops == {}
    assert cpu.total.forward.flops > 0
    if on_meta:
        to_meta = lambda v: v.to("meta") if isinstance(v, torch.Tensor) else v  # noqa: E731
        with torch.no_grad():
            meta = flopsight.profile(model.to("meta"), tuple(map(to_meta, args)),
                                     {k: to_meta(v) for k, v in kwargs.items()}, warm_up=0)
        assert (meta.total.forward.macs, meta.total.forward.flops) == (cpu.total.forward.macs, cpu.total.forward.flops)


@pytest.mark.parametrize("name, gen", [
    ("gpt2", dict(max_new_tokens=3, do_sample=False)),
    ("llama", dict(max_new_tokens=3, do_sample=True, top_k=5, top_p=0.9, temperature=0.7, repetition_penalty=1.2)),
    ("llama", dict(max_new_tokens=3, num_beams=2)),
])
def test_transformers_generate_has_no_unsupported_op(name, gen):
    build, args, _, _ = _models()[name]
    torch.manual_seed(0)
    model = build().eval()
    with torch.no_grad():
        result = flopsight.profile(model, (args[0][:, :4],), dict(gen, pad_token_id=0), mode="generate", warm_up=0)
    assert result.unsupported_ops == {}
