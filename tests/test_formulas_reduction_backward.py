"""Reductions, scans and accumulating index ops in backward: ``y = f(x); y.sum().backward()``.

Reductions have no backward kernels: autograd runs elementwise ops and reductions (each
derivation below follows the function's formula in PyTorch's ``derivatives.yaml`` /
``FunctionsManual.cpp``), counted by their forward formulas. The backward *kernels* that
accumulate gradients into an input (``unfold_backward``, reflection/replication padding)
cost one add per incoming gradient element, as ``col2im``. CPU and meta count the same.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import formula_of, layer_backward, meta, python_backend_only, require, torch_op
from torch import nn

import flopsight
from flopsight.formulas import Cost

aten = torch.ops.aten

SHAPE = (4, 6, 5)
n = 4 * 6 * 5  # input elements


def X():
    return torch.randn(SHAPE, requires_grad=True)


def IDX(*values):
    return torch.tensor(values)


CASES = [
    # (id, function, extra inputs, backward FLOPs)
    ("sum dim", lambda y: y.sum(1), (), 0),  # g expanded back: free
    ("mean dim", lambda y: y.mean(1), (), n),  # g expanded / 6: a divide per input element
    ("mean all", lambda y: y.mean(), (), n),
    # var(dim=1): (2 / (N - 1)) * g (n_out = 20) * (x - x.mean(1)) (mean n + n_out, sub n, mul n)
    ("var", lambda y: y.var(1), (), 20 + (n + 20) + n + n),
    ("var_mean", lambda y: torch.var_mean(y, 1)[0], (), 20 + (n + 20) + n + n),
    # std = var_backward(g / (2 * std)): mul, div, == 0 test on the 20 outputs + var's
    ("std", lambda y: y.std(1), (), 3 * 20 + 20 + (n + 20) + n + n),
    # 2-norm: x / norm (n), norm == 0 (1 output), masked_fill_ (free), * g (n)
    ("norm", lambda y: y.norm(), (), 2 * n + 1),
    ("norm dim", lambda y: y.norm(dim=-1), (), 2 * n + 24),
    ("norm p=1", lambda y: y.norm(p=1, dim=-1), (), 2 * n),  # sgn(x) * g
    # p=3: x * |x|^(p-2) * g / norm^(p-1): abs, pow, mul, mul (4n); pow, div, == 0 (3 per output)
    ("norm p=3", lambda y: y.norm(p=3, dim=-1), (), 4 * n + 3 * 24),
    ("logsumexp", lambda y: y.logsumexp(1), (), 3 * n),  # g * exp(x - result): sub, exp, mul
    # values selected along a dim: g scattered into zeros (free)
    ("max dim", lambda y: y.max(1).values, (), 0),
    ("min dim", lambda y: y.min(-1)[0], (), 0),
    ("median dim", lambda y: y.median(1).values, (), 0),
    ("kthvalue", lambda y: y.kthvalue(2, 1).values, (), 0),
    ("topk", lambda y: y.topk(2, 1).values, (), 0),
    ("sort", lambda y: y.sort(1).values, (), 0),
    # amax(dim): g / count (20 outputs) * (x == amax) (== n, * n); the bool count is free
    ("amax", lambda y: y.amax(1), (), 2 * n + 20),
    # max(): mask = (x == max) | (isnan(x) & isnan(max)): ==, isnan (n + 1); g / count (1),
    # mask * that (n)
    ("max all", lambda y: y.max(), (), 3 * n + 2),
    ("cumsum", lambda y: y.cumsum(1), (), n),  # g flipped, cumsum, flipped back
    ("cummax", lambda y: y.cummax(1).values, (), n),  # scatter_add of g: one add per element
    # prod(dim) via exclusive cumulative products (the zero-safe path): 2 cumprod, 2 mul
    ("prod", lambda y: y.prod(1), (), 4 * n),
    # accumulating gradients into the input
    ("index_select", lambda y, i: y.index_select(1, i), (IDX(0, 2, 2),), 4 * 3 * 5),  # index_add of g
    ("gather", lambda y, i: y.gather(1, i), (torch.zeros(4, 2, 5, dtype=torch.long),), 4 * 2 * 5),  # scatter_add
    ("advanced index", lambda y, i: y[i], (IDX(0, 0, 1),), 3 * 6 * 5),  # index_put(accumulate=True)
    ("expand", lambda y: y[:, :1].expand(4, 6, 5), (), n),  # sum over the expanded dim
    ("repeat", lambda y: y.repeat(2, 1, 1), (), 2 * n),  # sum over the repeats
    ("cat self", lambda y: torch.cat([y, y]), (), n),  # two slices of g, added
    # Tensor.unfold(1, size=3, step=1): 4 windows of 3 along dim 1 -> g (4, 4, 5, 3)
    ("unfold overlapping", lambda y: y.unfold(1, 3, 1), (), 4 * 4 * 5 * 3),
    ("unfold disjoint", lambda y: y.unfold(1, 3, 3), (), 4 * 2 * 5 * 3),  # still one add each
    # padding the last dim (5) by (2, 1): g is (4, 6, 8), each element added into its source
    ("reflection pad", lambda y: F.pad(y, (2, 1), mode="reflect"), (), 4 * 6 * 8),
    ("replication pad", lambda y: F.pad(y, (2, 1), mode="replicate"), (), 4 * 6 * 8),
    ("reflection pad 2d", lambda y: F.pad(y.unsqueeze(0), (1, 1, 2, 2), mode="reflect"), (), 4 * 10 * 7),
    ("constant pad", lambda y: F.pad(y, (2, 1)), (), 0),  # a slice of g
]


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("name, fn, extra, flops", CASES, ids=[c[0] for c in CASES])
def test_reduction_backward(device, name, fn, extra, flops, backend):
    if name in ("max all", "prod") and device == "cpu":
        python_backend_only(backend)
    total, _ = layer_backward(device, fn, X(), *extra)
    assert total == (0, flops)


@pytest.mark.parametrize("fn", [lambda y: y.cumprod(1), lambda y: y.prod(), lambda y: y.as_strided((2, 2), (1, 1))],
                         ids=["cumprod", "prod all", "as_strided"])
def test_composite_backward_agrees_on_cpu_and_meta(fn, backend, request):
    """Backward formulas too long to derive here (cumprod's zero-safe backward runs 20
    ops): at least every op is known and the devices agree (under a dispatch mode, where
    torch takes the zero-safe branch on both)."""
    if "as_strided" not in request.node.name:
        python_backend_only(backend)
    cpu, _ = layer_backward("cpu", fn, X())
    assert cpu[1] > 0
    assert layer_backward("meta", fn, X())[0] == cpu


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_accumulating_kernels_by_name(device):
    _, ops = layer_backward(device, lambda y: y.unfold(1, 3, 1), X())
    assert ops == {"aten.unfold_backward": (1, 0, 4 * 4 * 5 * 3)}
    _, ops = layer_backward(device, nn.ReflectionPad2d((1, 1, 2, 2)), torch.randn(2, 3, 6, 5, requires_grad=True))
    assert ops == {"aten.reflection_pad2d_backward": (1, 0, 2 * 3 * 10 * 7)}
    _, ops = layer_backward(device, nn.ReplicationPad3d(1), torch.randn(1, 2, 3, 4, 5, requires_grad=True))
    assert ops == {"aten.replication_pad3d_backward": (1, 0, 1 * 2 * 5 * 6 * 7)}


def test_multi_tensor_reductions():
    xs = [meta(3, 4), meta(5)]
    norms = [meta(()), meta(())]
    # _foreach_norm (clip_grad_norm_): per tensor square, add per element, sqrt: 2n + 1
    assert formula_of(aten._foreach_norm)(norms, self=xs, ord=2) == Cost(0, (2 * 12 + 1) + (2 * 5 + 1))
    assert formula_of(aten._foreach_norm)(norms, self=xs, ord=float("inf")) == Cost(0, 2 * 17)  # abs, compare
    assert formula_of(aten._foreach_max)(norms, self=xs) == Cost(0, 17)  # a comparison per element


def test_multi_tensor_power_sums():
    powsum = torch_op("aten._foreach_powsum")  # 2.9 has none
    require(powsum)
    xs = [meta(3, 4), meta(5)]
    norms = [meta(()), meta(())]
    assert formula_of(powsum)(norms, self=xs, ord=2) == Cost(0, 2 * 17)  # square, add (no root)
    assert formula_of(powsum)(norms, self=xs, ord=3) == Cost(0, 3 * 17)  # abs, pow, add


def test_sparse_coalesce_adds_duplicate_values():
    i = torch.tensor([[0, 0, 2]])
    v = torch.randn(3, 4)
    x = torch.sparse_coo_tensor(i, v, (5, 4), check_invariants=True)
    with flopsight.Profiler() as prof:
        x.coalesce()
    # one add per stored value
    assert {name: o.flops for name, o in prof.result.ops().items()}["aten._coalesce"] == 3 * 4
