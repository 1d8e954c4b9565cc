"""Dropout: free in eval, one FLOP per element in training (two for alpha dropout).

Convention
----------
* **Eval** (``training=False``) and ``p == 0``: 0 FLOPs. Dropout is then the identity and
  torch runs no arithmetic at all (``aten::dropout`` returns its input untouched).
  DeepSpeed counts every dropout as 0; we agree in eval.
* **Training**, ``p > 0``: 1 FLOP per element of the input for ``dropout`` and the feature
  dropouts (``dropout1d/2d/3d``): the multiply of the input by the scaled keep-mask. Drawing
  the mask (``bernoulli_``) is random-number generation, not arithmetic, and scaling the mask
  by ``1/(1-p)`` is mask bookkeeping that the fused CUDA kernel folds into the same multiply,
  so neither is counted. ``p == 1`` still multiplies (by zero): 1 FLOP per element.
* **Alpha dropout** (``alpha_dropout``, ``feature_alpha_dropout``) in training: 2 FLOPs per
  element, the affine ``input * a + b`` that keeps the SELU statistics (a multiply and an
  add per element; torch runs exactly these two ops on the input).
* Integer/bool inputs cost nothing (no floating-point arithmetic).

Why units: on CPU and meta, dropout decomposes into ``bernoulli_ + div_ + mul`` (the feature
variants on a broadcast ``(N, C, 1, ...)`` mask), on CUDA into the fused
``aten.native_dropout``. Counting the Python-level call as one unit makes every device agree;
``aten.native_dropout`` is also registered at dispatch with the same formula, for the places
where the function mode cannot see the call (inside another unit it is not counted at all).

>>> import torch
>>> from flopsight.formulas.dropout import dropout, dropout_flops
>>> x = torch.ones(4, 8)
>>> dropout(x, x, p=0.1, training=True)
Cost(macs=0, flops=32)
>>> dropout(x, x, p=0.1, training=False)
Cost(macs=0, flops=0)
>>> dropout_flops(x, p=0.5, training=True, kind="alpha")
64
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .registry import REGISTRY, Cost
from .shapes import is_float, numel

__all__ = [
    "FLOPS_PER_ELEMENT",
    "dropout_flops",
    "dropout",
    "feature_dropout",
    "alpha_dropout",
    "feature_alpha_dropout",
    "native_dropout",
]

aten = torch.ops.aten

#: FLOPs per input element of each dropout kind, in training with ``p > 0``.
FLOPS_PER_ELEMENT = {"dropout": 1, "alpha": 2}


def dropout_flops(x, p=0.5, training=True, kind: str = "dropout") -> int:
    """FLOPs of one dropout over tensor ``x`` (shared with the attention and RNN formulas).

    ``x`` may also be an element count (an int), for callers that know only a shape.
    """
    if not training or p is None or p <= 0:
        return 0
    if isinstance(x, torch.Tensor):
        if not is_float(x):
            return 0
        n = numel(x)
    else:
        n = int(x)
    return FLOPS_PER_ELEMENT[kind] * n


# -- the torch.nn.functional level (F.dropout, nn.Dropout, ...) -----------------------------
# F.alpha_dropout and F.feature_alpha_dropout default to training=False, the others to True.
@REGISTRY.register_unit(F.dropout, name="dropout")
def dropout(out, input, p=0.5, training=True, inplace=False, **kwargs) -> Cost:
    return Cost.of_flops(dropout_flops(input, p, training))


@REGISTRY.register_unit(F.dropout1d, F.dropout2d, F.dropout3d, name="feature_dropout")
def feature_dropout(out, input, p=0.5, training=True, inplace=False, **kwargs) -> Cost:
    # The mask is (N, C, 1, ...) and broadcast: still one multiply per input element.
    return Cost.of_flops(dropout_flops(input, p, training))


@REGISTRY.register_unit(F.alpha_dropout, name="alpha_dropout")
def alpha_dropout(out, input, p=0.5, training=False, inplace=False, **kwargs) -> Cost:
    return Cost.of_flops(dropout_flops(input, p, training, kind="alpha"))


@REGISTRY.register_unit(F.feature_alpha_dropout, name="feature_alpha_dropout")
def feature_alpha_dropout(out, input, p=0.5, training=False, inplace=False, **kwargs) -> Cost:
    return Cost.of_flops(dropout_flops(input, p, training, kind="alpha"))


# -- the torch-level builtins the functionals call (also public: torch.dropout(x, p, train)) --
# Their third argument is named ``train`` and has no default.
@REGISTRY.register_unit(torch.dropout, torch.dropout_, name="dropout")
def torch_dropout(out, input, p, train, **kwargs) -> Cost:
    return Cost.of_flops(dropout_flops(input, p, train))


@REGISTRY.register_unit(torch.feature_dropout, torch.feature_dropout_, name="feature_dropout")
def torch_feature_dropout(out, input, p, train, **kwargs) -> Cost:
    return Cost.of_flops(dropout_flops(input, p, train))


@REGISTRY.register_unit(torch.alpha_dropout, torch.alpha_dropout_, name="alpha_dropout")
def torch_alpha_dropout(out, input, p, train, **kwargs) -> Cost:
    return Cost.of_flops(dropout_flops(input, p, train, kind="alpha"))


@REGISTRY.register_unit(torch.feature_alpha_dropout, torch.feature_alpha_dropout_, name="feature_alpha_dropout")
def torch_feature_alpha_dropout(out, input, p, train, **kwargs) -> Cost:
    return Cost.of_flops(dropout_flops(input, p, train, kind="alpha"))


# -- dispatch level --------------------------------------------------------------------------
@REGISTRY.register(aten.native_dropout)
def native_dropout(out, input, p, train=None, **kwargs) -> Cost:
    """The fused CUDA (and XPU, lazy...) kernel behind dropout in training.

    ``train=None`` means training (the schema's ``bool? train``); ``p == 0`` is free, as for
    the unit, although the kernel still runs then.
    """
    return Cost.of_flops(dropout_flops(input, p, train is not False))
