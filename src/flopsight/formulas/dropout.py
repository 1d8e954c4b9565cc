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

Backward: **1 FLOP per element** in training with ``p > 0`` (every kind), 0 otherwise.
The gradient is ``grad * mask * scale`` -- one multiply per element by the saved scaled
mask, as in the forward (``aten.native_dropout_backward``; a ``mul`` on CPU and meta).
Alpha dropout's backward is the same single multiply (``grad * a``: its ``+ b`` has no
gradient). Each unit has this backward formula, charged once when its autograd node runs;
in eval (or with ``p == 0``) dropout returns its input and creates no autograd node.

Why units: on CPU and meta, dropout decomposes into ``bernoulli_ + div_ + mul`` (the feature
variants on a broadcast ``(N, C, 1, ...)`` mask), on CUDA into the fused
``aten.native_dropout``. Counting the Python-level call as one unit makes every device agree;
``aten.native_dropout`` is also registered at dispatch with the same formula, for the places
where the function mode cannot see the call (inside another unit it is not counted at all).

>>> import torch
>>> from flopsight.formulas.dropout import dropout, dropout_flops
>>> x = torch.ones(4, 8)
>>> dropout(x, x, p=0.1, training=True)
Stats(macs=0, flops=32)
>>> dropout(x, x, p=0.1, training=False)
Stats(macs=0, flops=0)
>>> dropout_flops(x, p=0.5, training=True, kind="alpha")
64
>>> from flopsight.formulas.dropout import dropout_backward
>>> _ = x.requires_grad_()
>>> dropout_backward(None, x, p=0.1, training=True)  # grad * mask * scale: 1 per element
Stats(macs=0, flops=32)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .registry import REGISTRY, Cost, OpNames, forward_names
from .shapes import is_float, numel

__all__ = [
    "FLOPS_PER_ELEMENT",
    "BACKWARD_FLOPS_PER_ELEMENT",
    "dropout_flops",
    "dropout",
    "feature_dropout",
    "alpha_dropout",
    "feature_alpha_dropout",
    "native_dropout",
    "dropout_backward_flops",
    "dropout_backward",
    "alpha_dropout_backward",
    "torch_dropout_backward",
    "native_dropout_backward",
]

aten = OpNames("aten")  # names: an op this torch lacks is skipped (registry.builtins_loading)

#: FLOPs per input element of each dropout kind, in training with ``p > 0``.
FLOPS_PER_ELEMENT = {"dropout": 1, "alpha": 2}
#: FLOPs per element of the backward of every kind: the multiply by the saved scaled mask
#: (alpha dropout: by ``a``; its ``+ b`` has no gradient).
BACKWARD_FLOPS_PER_ELEMENT = 1


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


def dropout_backward_flops(x, p=0.5, training=True) -> int:
    """FLOPs of one dropout's backward over tensor (or element count) ``x``: 1 per element
    in training with ``p > 0``, whatever the kind (shared with the attention formulas)."""
    if not training or p is None or p <= 0:
        return 0
    if isinstance(x, torch.Tensor):
        return BACKWARD_FLOPS_PER_ELEMENT * numel(x) if is_float(x) else 0
    return BACKWARD_FLOPS_PER_ELEMENT * int(x)


def _backward(input, p, training) -> Cost:
    # An input that does not require grad gets no gradient (and the unit made no autograd
    # node, so this is never charged then; checked for direct calls).
    if not (isinstance(input, torch.Tensor) and input.requires_grad):
        return Cost()
    return Cost.of_flops(dropout_backward_flops(input, p, training))


# Unit backward formulas, one per signature: the functionals (Python functions, bound by their
# signature) name their flag ``training`` (F.alpha_dropout and F.feature_alpha_dropout default
# it to False, the others to True); the torch-level builtins are bound by the schema of the
# aten op of the same name: ``aten::dropout(Tensor input, float p, bool train)``, and the
# in-place ``aten::dropout_(Tensor(a!) self, float p, bool train)`` names its tensor ``self``.
def dropout_backward(out, input, p=0.5, training=True, inplace=False, **_) -> Cost:
    """Backward of ``F.dropout`` / ``F.dropout1d/2d/3d``: ``grad * mask * scale``."""
    return _backward(input, p, training)


def alpha_dropout_backward(out, input, p=0.5, training=False, inplace=False, **_) -> Cost:
    """Backward of ``F.alpha_dropout`` / ``F.feature_alpha_dropout``: ``grad * a``."""
    return _backward(input, p, training)


def torch_dropout_backward(out, *, p, train, input=None, self=None, **_) -> Cost:
    """Backward of ``torch.dropout(input, p, train)``, ``torch.dropout_(self, p, train)``,
    ``torch.feature_dropout``, ``torch.alpha_dropout``... ."""
    return _backward(_tensor(input, self), p, train)


def _tensor(input, self):
    """The dropped-out tensor: ``input`` (out-of-place builtins) or ``self`` (in-place)."""
    return input if input is not None else self


# -- the torch.nn.functional level (F.dropout, nn.Dropout, ...) -----------------------------
@REGISTRY.register_unit(F.dropout, name="dropout", backward=dropout_backward, reaches=torch.dropout)
def dropout(out, input, p=0.5, training=True, inplace=False, **_) -> Cost:
    return Cost.of_flops(dropout_flops(input, p, training))


def _has_feature_dropout(modules) -> bool:
    """Whether ``F.dropout1d/2d/3d`` may run among ``modules``: ``nn.Dropout1d/2d/3d`` call
    them, and so may a module whose ``forward`` names one."""
    named = {"dropout1d", "dropout2d", "dropout3d"}
    return any(isinstance(m, (torch.nn.Dropout1d, torch.nn.Dropout2d, torch.nn.Dropout3d))
               or not named.isdisjoint(forward_names(m))
               for m in modules)


# not ``reaches=torch.feature_dropout``: an unbatched input is unsqueezed around it
@REGISTRY.register_unit(F.dropout1d, F.dropout2d, F.dropout3d, name="feature_dropout", backward=dropout_backward,
                        may_run=_has_feature_dropout)
def feature_dropout(out, input, p=0.5, training=True, inplace=False, **_) -> Cost:
    # The mask is (N, C, 1, ...) and broadcast: still one multiply per input element.
    return Cost.of_flops(dropout_flops(input, p, training))


@REGISTRY.register_unit(F.alpha_dropout, name="alpha_dropout", backward=alpha_dropout_backward,
                        reaches=torch.alpha_dropout)
def alpha_dropout(out, input, p=0.5, training=False, inplace=False, **_) -> Cost:
    return Cost.of_flops(dropout_flops(input, p, training, kind="alpha"))


@REGISTRY.register_unit(F.feature_alpha_dropout, name="feature_alpha_dropout", backward=alpha_dropout_backward,
                        reaches=torch.feature_alpha_dropout)
def feature_alpha_dropout(out, input, p=0.5, training=False, inplace=False, **_) -> Cost:
    return Cost.of_flops(dropout_flops(input, p, training, kind="alpha"))


# -- the torch-level builtins the functionals call (also public: torch.dropout(x, p, train)) --
# Bound by the aten schemas: ``train`` has no default; the tensor is ``input``, or ``self`` for
# the in-place ``torch.dropout_`` & co.
@REGISTRY.register_unit(torch.dropout, torch.dropout_, name="dropout", backward=torch_dropout_backward)
def torch_dropout(out, *, p, train, input=None, self=None, **_) -> Cost:
    return Cost.of_flops(dropout_flops(_tensor(input, self), p, train))


@REGISTRY.register_unit(torch.feature_dropout, torch.feature_dropout_, name="feature_dropout",
                        backward=torch_dropout_backward)
def torch_feature_dropout(out, *, p, train, input=None, self=None, **_) -> Cost:
    return Cost.of_flops(dropout_flops(_tensor(input, self), p, train))


@REGISTRY.register_unit(torch.alpha_dropout, torch.alpha_dropout_, name="alpha_dropout",
                        backward=torch_dropout_backward)
def torch_alpha_dropout(out, *, p, train, input=None, self=None, **_) -> Cost:
    return Cost.of_flops(dropout_flops(_tensor(input, self), p, train, kind="alpha"))


@REGISTRY.register_unit(torch.feature_alpha_dropout, torch.feature_alpha_dropout_, name="feature_alpha_dropout",
                        backward=torch_dropout_backward)
def torch_feature_alpha_dropout(out, *, p, train, input=None, self=None, **_) -> Cost:
    return Cost.of_flops(dropout_flops(_tensor(input, self), p, train, kind="alpha"))


# -- dispatch level --------------------------------------------------------------------------
@REGISTRY.register(aten.native_dropout)
def native_dropout(out, input, p, train, **_) -> Cost:
    """The fused CUDA (and XPU, lazy...) kernel behind dropout in training.

    ``train=None`` means training (the schema's ``bool? train``); ``p == 0`` is free, as for
    the unit, although the kernel still runs then.
    """
    return Cost.of_flops(dropout_flops(input, p, train is not False))


@REGISTRY.register(aten.native_dropout_backward)
def native_dropout_backward(out, grad_output, mask, scale, **_) -> Cost:
    """``grad_output * mask * scale``: 1 FLOP per element (the kernel runs only in training;
    ``scale`` is ``1/(1-p)``, folded into the one multiply as in the forward)."""
    return Cost.of_flops(dropout_backward_flops(grad_output))
