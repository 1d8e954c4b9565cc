"""Dropout: 0 FLOPs in eval or with p == 0; in training 1 FLOP per input element (the
multiply by the scaled keep-mask), 2 for alpha dropout (the affine ``x * a + b``).
Identical on CPU (bernoulli_ + div_ + mul), meta, and the fused ``native_dropout`` kernel.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import measure_cpu_meta, ops_of
from torch import nn

from flopsight.formulas import REGISTRY, Cost

aten = torch.ops.aten

X_SHAPE = (2, 3, 4, 5)  # N, C, H, W: 120 elements
N_ELEM = 2 * 3 * 4 * 5


@pytest.mark.parametrize(
    "module, train_flops",
    [
        (nn.Dropout(0.3), N_ELEM),  # 1 multiply per element
        (nn.Dropout(0.3, inplace=True), N_ELEM),
        (nn.Dropout(1.0), N_ELEM),  # still multiplies (by zero)
        (nn.Dropout(0.0), 0),  # identity: torch runs nothing
        (nn.Dropout1d(0.3), N_ELEM // 5),  # takes (N, C, L): run on x[..., 0] (24 elements)
        (nn.Dropout2d(0.3), N_ELEM),  # the (N, C, 1, 1) mask broadcasts: 1 per input element
        (nn.Dropout3d(0.3), N_ELEM),  # (C, D, H, W) unbatched input
        (nn.AlphaDropout(0.3), 2 * N_ELEM),  # x * a + b
        (nn.FeatureAlphaDropout(0.3), 2 * N_ELEM),
    ],
    ids=lambda v: repr(v) if isinstance(v, nn.Module) else str(v),
)
@pytest.mark.parametrize("train", [True, False])
def test_dropout_modules(module, train_flops, train):
    x = torch.randn(X_SHAPE)
    if isinstance(module, nn.Dropout1d):
        x = x[..., 0]
    module.train(train)
    expected = (0, train_flops if train else 0)
    assert measure_cpu_meta(module, x.clone()) == expected


FUNCTIONAL_CASES = {
    # name: (call, expected FLOPs)
    "dropout": (lambda x: F.dropout(x, 0.5), N_ELEM),  # training=True by default
    "dropout_eval": (lambda x: F.dropout(x, 0.5, training=False), 0),
    "dropout_p0": (lambda x: F.dropout(x, p=0.0, training=True), 0),
    "dropout_inplace": (lambda x: F.dropout(x, 0.5, True, True), N_ELEM),
    "dropout1d": (lambda x: F.dropout1d(x[0], 0.5), N_ELEM // 2),  # (C, H*W)-like: 3*4*5 = 60
    "dropout2d": (lambda x: F.dropout2d(x, 0.5), N_ELEM),
    "dropout3d": (lambda x: F.dropout3d(x[None], 0.5, training=True), N_ELEM),
    "dropout3d_eval": (lambda x: F.dropout3d(x, 0.5, training=False), 0),
    "alpha_default_eval": (lambda x: F.alpha_dropout(x, 0.5), 0),  # training=False by default
    "alpha_train": (lambda x: F.alpha_dropout(x, 0.5, training=True), 2 * N_ELEM),
    "feature_alpha_train": (lambda x: F.feature_alpha_dropout(x, 0.5, True), 2 * N_ELEM),
    "feature_alpha_default_eval": (lambda x: F.feature_alpha_dropout(x, 0.5), 0),
    # the torch-level builtins the functionals call, also public API
    "torch.dropout": (lambda x: torch.dropout(x, 0.5, True), N_ELEM),
    "torch.dropout_eval": (lambda x: torch.dropout(x, 0.5, train=False), 0),
    "torch.dropout_": (lambda x: torch.dropout_(x, 0.5, True), N_ELEM),
    "torch.feature_dropout": (lambda x: torch.feature_dropout(x, 0.5, True), N_ELEM),
    "torch.feature_dropout_": (lambda x: torch.feature_dropout_(x, 0.5, True), N_ELEM),
    "torch.alpha_dropout": (lambda x: torch.alpha_dropout(x, 0.5, True), 2 * N_ELEM),
    "torch.alpha_dropout_": (lambda x: torch.alpha_dropout_(x, 0.5, True), 2 * N_ELEM),
    "torch.feature_alpha_dropout": (lambda x: torch.feature_alpha_dropout(x, 0.5, True), 2 * N_ELEM),
    "torch.feature_alpha_dropout_": (lambda x: torch.feature_alpha_dropout_(x, 0.5, True), 2 * N_ELEM),
}


@pytest.mark.parametrize("name", list(FUNCTIONAL_CASES))
def test_dropout_functions(name):
    fn, flops = FUNCTIONAL_CASES[name]
    x = torch.randn(X_SHAPE)
    assert measure_cpu_meta(fn, x.clone()) == (0, flops)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_dropout_is_one_unit(device):
    """bernoulli_, div_ and mul (mask drawing and scaling) are not counted again."""
    x = torch.randn(X_SHAPE, device=device)
    assert ops_of(nn.Dropout(0.5).train(), x) == {"dropout": (1, 0, N_ELEM)}
    assert ops_of(F.dropout2d, x, 0.5) == {"feature_dropout": (1, 0, N_ELEM)}
    assert ops_of(F.alpha_dropout, x, 0.5, True) == {"alpha_dropout": (1, 0, 2 * N_ELEM)}


@pytest.mark.parametrize("train, flops", [(True, N_ELEM), (None, N_ELEM), (False, 0)])
def test_native_dropout_at_dispatch(train, flops):
    """The fused kernel (CUDA's choice; it has a CPU kernel too): same formula, train=None
    meaning training, as in its schema."""
    x = torch.randn(X_SHAPE)
    assert measure_cpu_meta(aten.native_dropout, x, 0.5, train) == (0, flops)
    assert ops_of(aten.native_dropout, x, 0.5, train) == {"aten.native_dropout": (1, 0, flops)}


def test_native_dropout_with_p_zero_is_free_like_the_unit():
    _, formula = REGISTRY.lookup(aten.native_dropout)
    assert formula(None, input=torch.empty(X_SHAPE, device="meta"), p=0.0, train=True) == Cost(0, 0)


def test_dropout_inside_a_model():
    """nn.Dropout in an MLP: train counts it, eval does not; attributed to the dropout module."""
    import flopsight

    model = nn.Sequential(nn.Linear(5, 7), nn.Dropout(0.2), nn.Linear(7, 3))
    x = torch.randn(4, 5)
    train = flopsight.profile(model.train(), x)
    evaluation = flopsight.profile(model.eval(), x)
    assert train.module("1").forward.flops == 4 * 7  # batch 4 x 7 features
    assert evaluation.module("1").forward.flops == 0
    # the linears are unaffected: 4*5*7 and 4*7*3 MACs
    assert train.total.forward.macs == evaluation.total.forward.macs == 4 * 5 * 7 + 4 * 7 * 3
    assert train.total.forward.flops - evaluation.total.forward.flops == 4 * 7
