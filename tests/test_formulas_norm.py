"""Normalisation formulas: DeepSpeed's per-element constants, 0 MACs.

layer/group norm 5 per element with weight, 4 without; batch norm with batch statistics
(training, or no running stats) 5/4, with running statistics (eval) 2/1; instance norm is
batch norm on a (1, N*C, ...) view; RMS norm 4/3, counted as one unit.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import measure_cpu_meta, measure_on, ops_on, schema_cost
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

import flopsight
from flopsight.formulas import REGISTRY, Cost

aten = torch.ops.aten


def mode(module: nn.Module, training: bool) -> nn.Module:
    return module.train(training)


# (id, module factory, input shape, expected FLOPs)
LAYER_GROUP = [
    # 2*8*16 = 256 elements
    ("layer", lambda: nn.LayerNorm(16), (2, 8, 16), 5 * 2 * 8 * 16),
    ("layer-noaffine", lambda: nn.LayerNorm(16, elementwise_affine=False), (2, 8, 16), 4 * 2 * 8 * 16),
    ("layer-nobias", lambda: nn.LayerNorm(16, bias=False), (2, 8, 16), 5 * 2 * 8 * 16),
    ("layer-2dims", lambda: nn.LayerNorm([8, 16]), (2, 8, 16), 5 * 2 * 8 * 16),
    ("group", lambda: nn.GroupNorm(2, 4), (2, 4, 6, 6), 5 * 2 * 4 * 6 * 6),
    ("group-noaffine", lambda: nn.GroupNorm(2, 4, affine=False), (2, 4, 6, 6), 4 * 2 * 4 * 6 * 6),
    ("group-1d", lambda: nn.GroupNorm(1, 4), (2, 4, 10), 5 * 2 * 4 * 10),
    ("group-3d", lambda: nn.GroupNorm(4, 4), (2, 4, 3, 3, 3), 5 * 2 * 4 * 3 * 3 * 3),
]

BN_SHAPES = [
    (nn.BatchNorm1d, (8, 4), 8 * 4),
    (nn.BatchNorm1d, (8, 4, 10), 8 * 4 * 10),
    (nn.BatchNorm2d, (2, 4, 6, 6), 2 * 4 * 6 * 6),
    (nn.BatchNorm3d, (2, 4, 3, 3, 3), 2 * 4 * 3 * 3 * 3),
]
# (kwargs, training, FLOPs per element)
BN_SETTINGS = [
    ({}, True, 5),  # batch statistics, affine
    ({}, False, 2),  # running statistics, affine
    ({"affine": False}, True, 4),
    ({"affine": False}, False, 1),
    ({"track_running_stats": False}, False, 5),  # no running stats: batch statistics in eval too
    ({"track_running_stats": False, "affine": False}, False, 4),
]

BATCH = [
    (f"{cls.__name__}-{len(shape)}d-{'train' if training else 'eval'}-{'-'.join(f'{k}={v}' for k, v in kw.items())}",
     (lambda cls=cls, kw=kw, training=training: mode(cls(4, **kw), training)), shape, per * n)
    for cls, shape, n in BN_SHAPES
    for kw, training, per in BN_SETTINGS
]  # fmt: skip

def eval_instance_norm_averages_running_stats() -> bool:
    """Whether ``instance_norm`` in eval with running statistics copies them back averaged
    over the batch, as in training: torch 2.9's composite does (a no-op on the values, but
    two ``mean`` over the ``(N, C)`` repeated statistics), later ones do not. Tried on a
    (1, 1, 1, 2) input under a dispatch mode."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.add(func.overloadpacket)
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Ops() as ops:
        nn.InstanceNorm2d(1, track_running_stats=True).eval()(torch.randn(1, 1, 1, 2))
    return aten.mean in ops.names


#: what 2.9's running-statistics copy-back adds to an eval InstanceNorm of (2, 4, ...): two
#: means of the (N, C) = (2, 4) statistics over N, an add per input and a divide per output
#: each: 2 * (2*4 + 4) = 24 (docs/conventions.md, "Where torch releases differ")
COPY_BACK = 2 * (2 * 4 + 4) if eval_instance_norm_averages_running_stats() else 0

INSTANCE = [
    # F.instance_norm normalises a (1, N*C, ...) view with batch statistics: 4/5 per element
    ("in1d", lambda: nn.InstanceNorm1d(4), (2, 4, 10), 4 * 2 * 4 * 10),
    ("in1d-affine", lambda: nn.InstanceNorm1d(4, affine=True), (2, 4, 10), 5 * 2 * 4 * 10),
    ("in1d-unbatched", lambda: nn.InstanceNorm1d(4), (4, 10), 4 * 4 * 10),
    ("in2d-affine", lambda: nn.InstanceNorm2d(4, affine=True), (2, 4, 6, 6), 5 * 2 * 4 * 6 * 6),
    ("in2d-stats-eval", lambda: mode(nn.InstanceNorm2d(4, track_running_stats=True), False), (2, 4, 6, 6),
     1 * 2 * 4 * 6 * 6 + COPY_BACK),  # running statistics: a plain eval batch norm, 1 per element without affine
    ("in2d-affine-stats-eval", lambda: mode(nn.InstanceNorm2d(4, affine=True, track_running_stats=True), False),
     (2, 4, 6, 6), 2 * 2 * 4 * 6 * 6 + COPY_BACK),
    ("in3d", lambda: nn.InstanceNorm3d(4), (2, 4, 3, 3, 3), 4 * 2 * 4 * 3 * 3 * 3),
]  # fmt: skip

RMS = [
    # 2*3*6 = 36 elements
    ("rms", lambda: nn.RMSNorm(6), (2, 3, 6), 4 * 2 * 3 * 6),
    ("rms-noaffine", lambda: nn.RMSNorm(6, elementwise_affine=False), (2, 3, 6), 3 * 2 * 3 * 6),
    ("rms-2dims", lambda: nn.RMSNorm([3, 6], eps=1e-6), (2, 3, 6), 4 * 2 * 3 * 6),
]

ALL = LAYER_GROUP + BATCH + INSTANCE + RMS


@pytest.mark.parametrize("name, make, shape, flops", ALL, ids=[c[0] for c in ALL])
def test_norm_modules(name, make, shape, flops):
    assert measure_cpu_meta(make(), torch.randn(shape)) == (0, flops)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("affine, per", [(False, 4), (True, 5)])
def test_instance_norm_with_running_stats_in_training(affine, per, device):
    """Batch statistics (4/5 per element) plus the running-stat updates, counted by their families."""
    norm = nn.InstanceNorm2d(4, affine=affine, track_running_stats=True).train()
    counted = ops_on(device, norm, torch.randn(2, 4, 6, 6))
    assert counted["aten.native_batch_norm"] == (1, 0, per * 2 * 4 * 6 * 6)
    assert "aten.mean" in counted  # averaging the per-instance stats into the running ones


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_batch_norm_training_dispatch(device):
    """Training BatchNorm: the kernel, plus an integer ``num_batches_tracked += 1`` that is free."""
    counted = ops_on(device, nn.BatchNorm2d(4).train(), torch.randn(2, 4, 6, 6))
    assert counted["aten.native_batch_norm"] == (1, 0, 5 * 2 * 4 * 6 * 6)
    assert counted["aten.add_"] == (1, 0, 0)


@pytest.mark.parametrize(
    "call, shape, flops",
    [
        (lambda x: F.layer_norm(x, [16]), (2, 8, 16), 4 * 2 * 8 * 16),
        (lambda x: F.layer_norm(x, [16], weight=torch.ones(16, device=x.device)), (2, 8, 16), 5 * 2 * 8 * 16),
        (lambda x: F.group_norm(x, 2), (2, 4, 6, 6), 4 * 2 * 4 * 6 * 6),
        (lambda x: F.batch_norm(x, None, None, training=True), (2, 4, 6, 6), 4 * 2 * 4 * 6 * 6),
        (lambda x: F.instance_norm(x), (2, 4, 6, 6), 4 * 2 * 4 * 6 * 6),
    ],
)
def test_functional_calls(call, shape, flops):
    assert measure_cpu_meta(call, torch.randn(shape)) == (0, flops)


# -- RMS norm: one unit, whatever runs underneath ----------------------------------------
@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize(
    "call, flops",
    [
        (lambda x, w: F.rms_norm(x, [6]), 3 * 2 * 3 * 6),
        (lambda x, w: F.rms_norm(x, [6], w), 4 * 2 * 3 * 6),
        (lambda x, w: F.rms_norm(x, [6], weight=w, eps=1e-6), 4 * 2 * 3 * 6),
        (lambda x, w: F.rms_norm(input=x, normalized_shape=[6], weight=w), 4 * 2 * 3 * 6),
        (lambda x, w: torch.rms_norm(x, [6]), 3 * 2 * 3 * 6),
        (lambda x, w: torch.rms_norm(x, [6], w, 1e-6), 4 * 2 * 3 * 6),
        (lambda x, w: torch.rms_norm(x, normalized_shape=[6], weight=w), 4 * 2 * 3 * 6),
    ],
)
def test_rms_norm_functions_are_one_unit(call, flops, device):
    counted = ops_on(device, call, torch.randn(2, 3, 6), torch.randn(6))
    assert counted == {"rms_norm": (1, 0, flops)}  # pow/mean/add/rsqrt/mul are not counted again


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("affine, per", [(True, 4), (False, 3)])
def test_rms_norm_module_is_one_unit(affine, per, device):
    counted = ops_on(device, nn.RMSNorm(6, elementwise_affine=affine), torch.randn(2, 3, 6))
    assert counted == {"rms_norm": (1, 0, per * 2 * 3 * 6)}


def test_rms_norm_in_low_precision_does_not_count_its_casts():
    norm = nn.RMSNorm(6).to(torch.bfloat16)
    assert ops_on("cpu", norm, torch.randn(2, 3, 6, dtype=torch.bfloat16)) == {"rms_norm": (1, 0, 4 * 2 * 3 * 6)}


def test_rms_norm_unit_is_attributed_to_its_module():
    model = nn.Sequential(nn.Linear(6, 6), nn.RMSNorm(6))
    result = flopsight.profile(model, torch.randn(2, 3, 6))
    assert result.module("1").forward.flops == 4 * 2 * 3 * 6
    assert result.module("1").forward.macs == 0


# -- LocalResponseNorm: composite; its avg_pool is counted here ---------------------------
@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize(
    "shape, op, pooled",
    [
        # (N, C, H, W) -> view (N, 1, C, H, W), pad C by size//2 and (size-1)//2 -> C + 2
        ((2, 4, 6, 6), "aten.avg_pool3d", 2 * 1 * (4 + 2) * 6 * 6),
        # (N, C, L) -> (N, 1, C, L), padded to C + 2
        ((2, 4, 6), "aten.avg_pool2d", 2 * 1 * (4 + 2) * 6),
    ],
)
def test_local_response_norm(shape, op, pooled, device):
    x = torch.randn(shape)
    counted = ops_on(device, nn.LocalResponseNorm(3), x)
    assert counted[op] == (1, 0, pooled)
    assert measure_on(device, nn.LocalResponseNorm(3), x) == measure_on("cpu", nn.LocalResponseNorm(3), x)


# -- weight norm -------------------------------------------------------------------------
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_weight_norm(device):
    """v (3, 4), g (3, 1): 3 per element of v (norm: square+add, scale) + 2 per row (sqrt, divide)."""
    counted = ops_on(device, weight_norm(nn.Linear(4, 3)), torch.randn(2, 4))
    assert counted["aten._weight_norm_interface"] == (1, 0, 3 * 3 * 4 + 2 * 3)


# -- the batch-norm kernel family, called directly where the CPU runs it -----------------
x6 = torch.randn(1, 3, 6, 6)
N6 = 1 * 3 * 6 * 6
w3, b3, rm, rv = torch.ones(3), torch.zeros(3), torch.zeros(3), torch.ones(3)

KERNELS = [
    ("legit-train", lambda: aten._native_batch_norm_legit(x6, None, None, rm.clone(), rv.clone(), True, 0.1, 1e-5),
     4 * N6),
    ("legit-eval-affine", lambda: aten._native_batch_norm_legit(x6, w3, b3, rm, rv, False, 0.1, 1e-5), 2 * N6),
    ("legit-no_stats", lambda: aten._native_batch_norm_legit(x6, w3, b3, True, 0.1, 1e-5), 5 * N6),
    ("legit_no_training", lambda: aten._native_batch_norm_legit_no_training(x6, w3, b3, rm, rv, 0.1, 1e-5), 2 * N6),
    ("legit_functional", lambda: aten._native_batch_norm_legit_functional(x6, None, None, rm, rv, True, 0.1, 1e-5),
     4 * N6),
    ("with_update", lambda: aten._batch_norm_with_update(x6, w3, b3, rm.clone(), rv.clone(), 0.1, 1e-5), 5 * N6),
    ("with_update_functional", lambda: aten._batch_norm_with_update_functional(x6, w3, None, rm, rv, 0.1, 1e-5),
     5 * N6),
    ("no_update", lambda: aten._batch_norm_no_update(x6, None, None, rm, rv, 0.1, 1e-5), 1 * N6),
    ("no_update-affine", lambda: aten._batch_norm_no_update(x6, w3, b3, rm, rv, 0.1, 1e-5), 2 * N6),
    ("batch_norm_update_stats", lambda: torch.batch_norm_update_stats(x6, rm.clone(), rv.clone(), 0.1), 3 * N6),
]  # fmt: skip


@pytest.mark.parametrize("name, call, flops", KERNELS, ids=[k[0] for k in KERNELS])
def test_batch_norm_kernels(name, call, flops):
    assert measure_on("cpu", call) == (0, flops)


# GPU-only kernels and composite front doors: formulas called with meta tensors in schema order.
M = "meta"
X = torch.empty(2, 3, 4, 4, device=M)
N = 2 * 3 * 4 * 4
W, B, RM, RV = (torch.empty(3, device=M) for _ in range(4))
STATS = torch.empty(2, 3, device=M)  # two replicas' per-channel statistics

SCHEMA_CALLS = [
    ("cudnn_batch_norm-train", aten.cudnn_batch_norm, (X, W, B, RM, RV, True, 0.1, 1e-5), 5 * N),
    ("cudnn_batch_norm-eval", aten.cudnn_batch_norm, (X, W, B, RM, RV, False, 0.1, 1e-5), 2 * N),
    ("cudnn_batch_norm-no-stats", aten.cudnn_batch_norm, (X, W, B, None, None, False, 0.1, 1e-5), 5 * N),
    ("miopen_batch_norm-train", aten.miopen_batch_norm, (X, W, None, RM, RV, True, 0.1, 1e-5), 5 * N),
    ("miopen_batch_norm-eval", aten.miopen_batch_norm, (X, W, None, RM, RV, False, 0.1, 1e-5), 2 * N),
    # .no_stats overload: (input, weight, bias, training, momentum, eps), eps 0 must not read as training
    ("_native_batch_norm_legit.no_stats", aten._native_batch_norm_legit, (X, W, B, True, 0.1, 0.0), 5 * N),
    ("native_batch_norm-kw", aten.native_batch_norm, (X, None, None, RM, RV), 4 * N),  # + training=True below
    ("batch_norm_stats", aten.batch_norm_stats, (X, 1e-5), 3 * N),
    ("batch_norm_elemt", aten.batch_norm_elemt, (X, W, B, RM, RV, 1e-5), 2 * N),
    ("batch_norm_elemt-noaffine", aten.batch_norm_elemt, (X, None, None, RM, RV, 1e-5), 1 * N),
    # combines (world=2, C=3) means and invstds: 1 FLOP per gathered value
    ("batch_norm_gather_stats_with_counts", aten.batch_norm_gather_stats_with_counts,
     (X, STATS, STATS, RM, RV, 0.1, 1e-5, torch.empty(2, device=M)), 2 * 2 * 3),
    ("batch_norm_gather_stats", aten.batch_norm_gather_stats, (X, STATS, STATS, RM, RV, 0.1, 1e-5, 2), 2 * 2 * 3),
    ("batch_norm", aten.batch_norm, (X, W, B, RM, RV, True, 0.1, 1e-5, True), 5 * N),
    ("_batch_norm_impl_index", aten._batch_norm_impl_index, (X, W, B, RM, RV, False, 0.1, 1e-5, True), 2 * N),
    ("instance_norm", aten.instance_norm, (X, W, B, None, None, True, 0.1, 1e-5, True), 5 * N),
    ("layer_norm", aten.layer_norm, (X, [4], W[:1].expand(4), None), 5 * N),
    ("group_norm", aten.group_norm, (X, 3, W, B), 5 * N),
    ("group_norm-noaffine", aten.group_norm, (X, 3), 4 * N),
    ("native_group_norm", aten.native_group_norm, (X, None, None, 2, 3, 16, 3, 1e-5), 4 * N),
    ("_fused_rms_norm", aten._fused_rms_norm, (X, [4], W[:1].expand(4), 1e-5), 4 * N),
    ("_fused_rms_norm-noweight", aten._fused_rms_norm, (X, [4], None, None), 3 * N),
    ("aten.rms_norm", aten.rms_norm, (X, [4]), 3 * N),
]  # fmt: skip


@pytest.mark.parametrize("name, op, call, flops", SCHEMA_CALLS, ids=[c[0] for c in SCHEMA_CALLS])
def test_kernel_formulas_follow_their_schema(name, op, call, flops):
    kwargs = {"training": True} if name == "native_batch_norm-kw" else {}
    assert schema_cost(op, None, *call, **kwargs) == Cost(0, flops)


def test_sync_batch_norm_split_adds_up_to_batch_norm():
    """SyncBatchNorm on CUDA = batch_norm_stats + batch_norm_elemt: the training constant 5/4."""
    for weight, total in ((W, 5 * N), (None, 4 * N)):
        stats = schema_cost(aten.batch_norm_stats, None, X, 1e-5)
        elemt = schema_cost(aten.batch_norm_elemt, None, X, weight, None, RM, RV, 1e-5)
        whole = schema_cost(aten.native_batch_norm, None, X, weight, None, RM, RV, True, 0.1, 1e-5)
        assert stats.flops + elemt.flops == total == whole.flops


def test_rms_norm_is_registered_as_unit_for_both_entry_points():
    fn, builtin = REGISTRY.unit(F.rms_norm), REGISTRY.unit(torch.rms_norm)
    assert fn.name == builtin.name == "rms_norm"
    assert fn.backward is builtin.backward is not None
