"""Normalisation backward: ``y = norm(x); y.sum().backward()`` as users run it, hand-derived.

Per element of the input (n = numel(x)); x_hat recomputed once (1) for input/weight grads:
  layer / group norm: x_hat 1 + grad_input 8 (7 without weight) + grad_weight 2 + grad_bias 1
  batch norm, batch statistics: x_hat 1 [input|weight] + sum(g) 1 [input|bias]
                                + sum(g*x_hat) 2 [input|weight] + combine 4 [input]
  batch norm, running statistics: grad_input 1, grad_weight x_hat 1 + 2, grad_bias 1
  RMS norm: x_hat 1 + grad_input 6 (5 without weight) + grad_weight 2
  weight norm: 5 * numel(v) + 3 * numel(g)
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import layer_backward, measure_on, require_meta_kernel, schema_cost
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

from flopsight.formulas import Cost

aten = torch.ops.aten

# (id, input requires grad, parameters trainable)
SCENARIOS = [("all", True, True), ("first-layer", False, True), ("frozen", True, False)]


def _run(device, layer, shape, x_grad, p_grad):
    layer.requires_grad_(p_grad)
    return layer_backward(device, layer, torch.randn(shape, requires_grad=x_grad))


# (id, module factory, input shape, {scenario: FLOPs per element}, the op that runs)
LN, GN = "aten.native_layer_norm_backward", "aten.native_group_norm_backward"
BN = "aten.native_batch_norm_backward"
LAYERS = [
    # all: 1 + 8 + 2 + 1; first-layer: x_hat 1 + weight 2 + bias 1; frozen: 1 + 8
    ("layer", lambda: nn.LayerNorm(16), (2, 8, 16), {"all": 12, "first-layer": 4, "frozen": 9}, LN),
    # no bias: all 1 + 8 + 2; first-layer 1 + 2
    ("layer-no-bias", lambda: nn.LayerNorm(16, bias=False), (2, 8, 16),
     {"all": 11, "first-layer": 3, "frozen": 9}, LN),
    # no affine: 1 + 7
    ("layer-no-affine", lambda: nn.LayerNorm(16, elementwise_affine=False), (2, 8, 16), {"all": 8, "frozen": 8}, LN),
    ("layer-2d-shape", lambda: nn.LayerNorm((4, 4)), (3, 4, 4), {"all": 12, "first-layer": 4, "frozen": 9}, LN),
    ("group", lambda: nn.GroupNorm(2, 4), (2, 4, 5, 5), {"all": 12, "first-layer": 4, "frozen": 9}, GN),
    ("group-no-affine", lambda: nn.GroupNorm(2, 4, affine=False), (2, 4, 5, 5), {"all": 8}, GN),
    # batch statistics: all 1 + 1 + 2 + 4; first-layer: x_hat 1 + sum(g) 1 + sum(g*x_hat) 2
    ("batch2d-train", lambda: nn.BatchNorm2d(4), (2, 4, 5, 5), {"all": 8, "first-layer": 4, "frozen": 8}, BN),
    ("batch2d-train-no-affine", lambda: nn.BatchNorm2d(4, affine=False), (2, 4, 5, 5), {"all": 8}, BN),
    ("batch1d-train", lambda: nn.BatchNorm1d(4), (6, 4), {"all": 8, "first-layer": 4, "frozen": 8}, BN),
    ("batch3d-train", lambda: nn.BatchNorm3d(2), (2, 2, 3, 3, 3), {"all": 8, "first-layer": 4}, BN),
    # no running stats: batch statistics in eval too
    ("batch2d-eval-no-running", lambda: nn.BatchNorm2d(4, track_running_stats=False).eval(), (2, 4, 5, 5),
     {"all": 8, "first-layer": 4}, BN),
    # running statistics: all 1 + 3 + 1; first-layer 3 + 1; frozen 1
    ("batch2d-eval", lambda: nn.BatchNorm2d(4).eval(), (2, 4, 5, 5), {"all": 5, "first-layer": 4, "frozen": 1}, BN),
    ("batch1d-eval-no-affine", lambda: nn.BatchNorm1d(4, affine=False).eval(), (2, 4, 6), {"all": 1}, BN),
    # instance norm = batch norm over a (1, N*C, ...) view with batch statistics
    ("instance2d", lambda: nn.InstanceNorm2d(4), (2, 4, 5, 5), {"all": 8}, BN),
    ("instance1d", lambda: nn.InstanceNorm1d(4), (2, 4, 7), {"all": 8}, BN),
]  # fmt: skip

CASES = [(*layer, scenario) for layer in LAYERS for scenario in SCENARIOS if scenario[0] in layer[3]]


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("name, make, shape, per, op, scenario", CASES,
                         ids=[f"{c[0]}-{c[-1][0]}" for c in CASES])  # fmt: skip
def test_norm_backward(name, make, shape, per, op, scenario, device):
    label, x_grad, p_grad = scenario
    counted, ops = _run(device, make(), shape, x_grad, p_grad)
    n = torch.Size(shape).numel()
    assert counted == (0, per[label] * n)
    assert ops[op] == (1, 0, per[label] * n)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize(
    "name, make, per",
    [
        ("train", lambda: nn.InstanceNorm2d(4, affine=True), 8),
        # eval with running statistics: the running-stats constants
        ("eval-running", lambda: nn.InstanceNorm2d(4, affine=True, track_running_stats=True).eval(), 5),
    ],
)
def test_affine_instance_norm_backward(name, make, per, device):
    """The affine parameters are repeated N times for the (1, N*C, ...) batch norm; the repeat's
    backward sums the N*C-sized weight and bias grads back to C (reduction family: one add
    per summed element)."""
    counted, ops = layer_backward(device, make(), torch.randn(2, 4, 5, 5, requires_grad=True))
    n = 2 * 4 * 5 * 5
    assert ops[BN] == (1, 0, per * n)
    assert ops["aten.sum"] == (2, 0, 2 * (2 * 4))  # weight and bias: N*C elements each
    assert counted == (0, per * n + 2 * 2 * 4)


# -- RMS norm: a unit, charged whole as rms_norm.backward -------------------------------------
RMS = [
    # all: x_hat 1 + input 6 + weight 2; first-layer: 1 + 2; frozen: 1 + 6 (g * weight still)
    ("affine", lambda: nn.RMSNorm(16), {"all": 9, "first-layer": 3, "frozen": 7}),
    ("no-affine", lambda: nn.RMSNorm(16, elementwise_affine=False), {"all": 6}),  # 1 + 5
]
RMS_CASES = [(*r, s) for r in RMS for s in SCENARIOS if s[0] in r[2]]


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("name, make, per, scenario", RMS_CASES, ids=[f"{c[0]}-{c[-1][0]}" for c in RMS_CASES])
def test_rms_norm_backward(name, make, per, scenario, device):
    label, x_grad, p_grad = scenario
    counted, ops = _run(device, make(), (2, 8, 16), x_grad, p_grad)
    n = 2 * 8 * 16
    assert counted == (0, per[label] * n)
    # the decomposed pow/mean/rsqrt/mul backward kernels are folded into the unit's one entry
    assert ops == {**{k: v for k, v in ops.items() if v[1:] == (0, 0)}, "rms_norm.backward": (1, 0, per[label] * n)}


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_functional_rms_norm_backward(device):
    w = torch.randn(16, requires_grad=True)
    x = torch.randn(4, 16, requires_grad=True)
    counted, ops = layer_backward(device, lambda x, w: F.rms_norm(x, [16], w), x, w)
    assert counted == (0, 9 * 4 * 16)
    assert ops["rms_norm.backward"] == (1, 0, 9 * 4 * 16)


def test_rms_norm_backward_charged_once_per_call():
    """Two calls of one RMSNorm in a forward: two unit backwards, each charged once."""
    norm = nn.RMSNorm(8)
    counted, ops = layer_backward("cpu", nn.Sequential(norm, norm), torch.randn(3, 8, requires_grad=True))
    # inner call: input and weight grads (9); outer: the same (its input, the inner output, requires grad)
    assert ops["rms_norm.backward"] == (2, 0, 2 * 9 * 3 * 8)
    assert counted == (0, 2 * 9 * 3 * 8)


# -- weight norm -----------------------------------------------------------------------------
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_weight_norm_backward(device):
    """Linear(4, 8) with weight norm: v (8, 4), g (8, 1): 5*32 + 3*8."""
    name = "aten::_weight_norm_interface_backward"
    require_meta_kernel(device, name)  # 2.9 has none
    layer = weight_norm(nn.Linear(4, 8))
    _, ops = layer_backward(device, layer, torch.randn(2, 4))
    assert ops["aten._weight_norm_interface_backward"] == (1, 0, 5 * 8 * 4 + 3 * 8)


# -- the training-graph ops (export/compile) and kernels reached elsewhere ------------------------
class _Stats(nn.Module):
    """A 4-channel batch norm calling one aten op directly, with trainable weight and bias."""

    def __init__(self, call):
        super().__init__()
        self.call = call
        self.weight, self.bias = nn.Parameter(torch.ones(4)), nn.Parameter(torch.zeros(4))
        self.register_buffer("mean", torch.zeros(4))
        self.register_buffer("var", torch.ones(4))

    def forward(self, x):
        return self.call(x, self.weight, self.bias, self.mean, self.var)[0]


OP_CALLS = [
    # training graph ops: batch_norm_backward with update=True (batch stats) / False (running)
    ("_batch_norm_with_update", lambda x, w, b, m, v: aten._batch_norm_with_update(x, w, b, m, v, 0.1, 1e-5), 8,
     "aten.batch_norm_backward"),
    ("_batch_norm_no_update", lambda x, w, b, m, v: aten._batch_norm_no_update(x, w, b, m, v, 0.1, 1e-5), 5,
     "aten.batch_norm_backward"),
    ("_native_batch_norm_legit", lambda x, w, b, m, v: aten._native_batch_norm_legit(x, w, b, m, v, True, 0.1, 1e-5),
     8, BN),
    ("_native_batch_norm_legit.no_stats",
     lambda x, w, b, m, v: aten._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5), 8, BN),
    ("_native_batch_norm_legit_no_training",
     lambda x, w, b, m, v: aten._native_batch_norm_legit_no_training(x, w, b, m, v, 0.1, 1e-5), 5, BN),
]  # fmt: skip


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("name, call, per, op", OP_CALLS, ids=[c[0] for c in OP_CALLS])
def test_batch_norm_op_variants_backward(name, call, per, op, device):
    counted, ops = layer_backward(device, _Stats(call), torch.randn(2, 4, 3, 3, requires_grad=True))
    assert counted == (0, per * 2 * 4 * 3 * 3)
    assert ops[op] == (1, 0, per * 2 * 4 * 3 * 3)


m = "meta"
XM, GM = torch.empty(2, 4, 3, 3, device=m), torch.empty(2, 4, 3, 3, device=m)
C = torch.empty(4, device=m)
NM = 2 * 4 * 3 * 3
ALL, IN_ONLY = [True, True, True], [True, False, False]

SCHEMA_CALLS = [
    ("native_layer_norm_backward-keyword", aten.native_layer_norm_backward,
     (None, GM, XM, [3], XM[..., :1], XM[..., :1]), {"weight": C[:3], "bias": None, "output_mask": [True, True, False]},
     11 * NM),
    ("native_group_norm_backward", aten.native_group_norm_backward,
     (None, GM, XM, C[:2], C[:2], None, 2, 4, 9, 2, IN_ONLY), {}, 8 * NM),
    ("native_batch_norm_backward-train-weight-only", aten.native_batch_norm_backward,
     (None, GM, XM, C, C, C, C, C, True, 1e-5, [False, True, False]), {}, 3 * NM),
    ("native_batch_norm_backward-eval-bias-only", aten.native_batch_norm_backward,
     (None, GM, XM, C, C, C, None, None, False, 1e-5, [False, False, True]), {}, 1 * NM),
    ("batch_norm_backward-update-keyword", aten.batch_norm_backward,
     (None, GM, XM, C, C, C, C, C), {"update": True, "eps": 1e-5, "output_mask": ALL, "reserve": C}, 8 * NM),
    ("_batch_norm_impl_index_backward-eval", aten._batch_norm_impl_index_backward,
     (None, 0, XM, GM, C, C, C, None, None, False, 1e-5, IN_ONLY, C), {}, 1 * NM),
    # cuDNN/MIOpen: training only, all three grads
    ("cudnn_batch_norm_backward", aten.cudnn_batch_norm_backward, (None, XM, GM, C, C, C, C, C, 1e-5, C), {}, 8 * NM),
    ("miopen_batch_norm_backward", aten.miopen_batch_norm_backward, (None, XM, GM, C, C, C, C, C, 1e-5), {}, 8 * NM),
    # SyncBatchNorm: reduce 4, elemt 5
    ("batch_norm_backward_reduce", aten.batch_norm_backward_reduce, (None, GM, XM, C, C, C, True, True, True), {},
     4 * NM),
    ("batch_norm_backward_elemt", aten.batch_norm_backward_elemt, (None, GM, XM, C, C, C, C, C, C), {}, 5 * NM),
    # fused RMS norm (CUDA): the unit's count
    ("_fused_rms_norm_backward", aten._fused_rms_norm_backward, (None, GM, XM, [3], XM[..., :1], C[:3], [True, True]),
     {}, 9 * NM),
    ("_fused_rms_norm_backward-no-weight", aten._fused_rms_norm_backward,
     (None, GM, XM, [3], XM[..., :1], None, [True, False]), {}, 6 * NM),
    ("_fused_rms_norm_backward-weight-only", aten._fused_rms_norm_backward,
     (None, GM, XM, [3], XM[..., :1], C[:3], [False, True]), {}, 3 * NM),
    # weight norm: v (8, 4), g (8, 1)
    ("_weight_norm_differentiable_backward", aten._weight_norm_differentiable_backward,
     (None, torch.empty(8, 4, device=m), torch.empty(8, 4, device=m), torch.empty(8, 1, device=m),
      torch.empty(8, 1, device=m), 0), {}, 5 * 32 + 3 * 8),
]  # fmt: skip


@pytest.mark.parametrize("name, op, call, kwargs, flops", SCHEMA_CALLS, ids=[c[0] for c in SCHEMA_CALLS])
def test_backward_kernel_formulas_follow_their_schema(name, op, call, kwargs, flops):
    assert schema_cost(op, *call, **kwargs) == Cost(0, flops)


def test_fused_rms_norm_backward_runs_on_meta():
    """The CUDA kernel has a meta implementation: dispatched, it is counted like the unit."""
    x, go, w = torch.empty(4, 16, device=m), torch.empty(4, 16, device=m), torch.empty(16, device=m)
    rstd = torch.empty(4, 1, device=m)
    call = lambda: aten._fused_rms_norm_backward(go, x, [16], rstd, w, [True, True])  # noqa: E731
    assert measure_on("meta", call) == (0, 9 * 4 * 16)


def test_integer_inputs_cost_nothing():
    xi = torch.empty(2, 4, 3, 3, dtype=torch.int64, device=m)
    assert schema_cost(aten.native_batch_norm_backward, None, GM, xi, C, C, C, C, C, True, 1e-5, ALL) == Cost()
