"""Activation functions and softmax.

Convention (see ``docs/conventions/elementwise.md``, section "Activations"):

* **1 FLOP per output element** for every activation *kernel* (relu, relu6/hardtanh,
  leaky_relu, elu/selu, celu, gelu in both ``approximate`` modes, silu, mish, softplus,
  sigmoid, hardsigmoid, hardswish, hard/softshrink, threshold, prelu, rrelu, glu,
  logsigmoid). That is DeepSpeed's constant for relu/gelu/silu/elu/leaky_relu/prelu/relu6,
  applied to every fused kernel alike: a kernel is one elementwise function, counted like
  ``exp`` or ``tanh``, whatever arithmetic it does inside.
* **softmax / log_softmax: 1 FLOP per input element** (DeepSpeed's constant), also for
  ``_safe_softmax``, the variant the SDPA math path runs.
* ``glu`` halves its input: it costs 1 per *output* element (one gate per result).
* Activations written in Python are counted through the ops they dispatch, so they cost
  what they run: ``F.softsign`` = abs + add + div = 3, ``F.tanhshrink`` = tanh + sub = 2,
  ``nn.Softmin`` = neg + softmax = 2, HF's ``NewGELUActivation`` = 8 ops per element
  (``GELUActivation`` binds ``F.gelu``: 1). ``tanh`` is counted in :mod:`.elementwise`.
* Integer/bool inputs cost 0 (only ``relu``/``threshold``... accept them).

Every kernel here dispatches as the same aten op on CPU, CUDA and meta (there is no
device-dependent decomposition), so no unit functions are needed.

>>> import torch
>>> from flopsight.formulas.activation import activation, softmax
>>> x = torch.ones(8, 16)
>>> activation(torch.relu(x), x)
Cost(macs=0, flops=128)
>>> activation(torch.nn.functional.glu(x), x)  # (8, 8) gated outputs
Cost(macs=0, flops=64)
>>> softmax(x.softmax(-1), x, -1, False)
Cost(macs=0, flops=128)
"""

from __future__ import annotations

import torch

from .registry import REGISTRY, Cost
from .shapes import float_arithmetic, numel, result_numel

aten = torch.ops.aten

__all__ = ["activation", "softmax", "activation_flops", "softmax_flops", "ACTIVATION_OPS", "SOFTMAX_OPS"]


def activation_flops(n: int) -> int:
    """FLOPs of an activation kernel producing ``n`` elements: 1 per element (DeepSpeed's)."""
    return n


def softmax_flops(n: int) -> int:
    """FLOPs of a softmax (or log-softmax) over ``n`` elements: 1 per element (DeepSpeed's)."""
    return n


#: Fused activation kernels as they arrive at dispatch (with their in-place twins).
#: ``F.relu6`` and ``nn.Hardtanh`` arrive as ``hardtanh``, ``F.selu`` as ``elu``,
#: ``F.prelu`` as ``_prelu_kernel``, ``F.rrelu`` as ``rrelu_with_noise``,
#: ``F.logsigmoid`` as ``log_sigmoid_forward`` (which also returns a buffer).
ACTIVATION_OPS = (
    aten.relu, aten.relu_,
    aten.hardtanh, aten.hardtanh_,
    aten.leaky_relu, aten.leaky_relu_,
    aten.elu, aten.elu_,
    aten.celu, aten.celu_,
    aten.gelu, aten.gelu_,
    aten.silu, aten.silu_,
    aten.mish, aten.mish_,
    aten.softplus,
    aten.sigmoid, aten.sigmoid_,
    aten.hardsigmoid, aten.hardsigmoid_,
    aten.hardswish, aten.hardswish_,
    aten.hardshrink,
    aten.softshrink,
    aten.threshold, aten.threshold_,
    aten._prelu_kernel,
    aten.rrelu_with_noise, aten.rrelu_with_noise_,
    aten.glu,
    aten.log_sigmoid_forward,
)  # fmt: skip

#: Softmax kernels. ``softmax``/``log_softmax`` themselves decompose into ``_softmax``/
#: ``_log_softmax`` (only their ``out=`` overloads dispatch whole).
SOFTMAX_OPS = (aten._softmax, aten._log_softmax, aten._safe_softmax, aten.softmax, aten.log_softmax)


@REGISTRY.register(*ACTIVATION_OPS)
def activation(out, *args, **kwargs) -> Cost:
    """1 FLOP per element of the (first) result: ``log_sigmoid_forward`` returns
    ``(output, buffer)`` and the buffer is empty on CUDA, so only the output counts."""
    if not float_arithmetic(out, args, kwargs):
        return Cost()
    return Cost.of_flops(activation_flops(result_numel(out, args)))


@REGISTRY.register(*SOFTMAX_OPS)
def softmax(out, input, *args, **kwargs) -> Cost:
    """1 FLOP per input element (DeepSpeed's constant; a real softmax does ~5: max, sub,
    exp, sum, div -- kept at 1 so totals match DeepSpeed's)."""
    if not float_arithmetic(out, (input,)):
        return Cost()
    return Cost.of_flops(softmax_flops(numel(input)))
