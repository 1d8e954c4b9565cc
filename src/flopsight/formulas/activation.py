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

Every forward kernel here dispatches as the same aten op on CPU, CUDA and meta.

Backward (see ``docs/conventions/elementwise.md``, section "Backward"):

* every activation's backward kernel (``threshold_backward`` for relu, ``gelu_backward``,
  ``silu_backward``, ``sigmoid_backward``, ``elu_backward``, ``hardtanh_backward``...)
  costs :func:`activation_backward_flops` = **2 per element of each gradient it returns**:
  the derivative (1, by the forward convention) and the chain-rule multiply (1).
  ``glu_backward`` returns the gradient of the whole (doubled) input;
  ``_prelu_kernel_backward`` always returns two input-sized gradients (input and weight,
  whether or not they are needed), so it costs ``4n``; the reduction of the weight's
  gradient to the weight's shape is a ``sum`` that autograd runs (counted as a sum).
* ``_softmax_backward_data`` / ``_log_softmax_backward_data`` / ``_masked_softmax_backward``:
  :func:`softmax_backward_flops` = 4 per element.
* ``F.mish`` is a **unit**: its backward kernel (``mish_backward``) has no meta kernel, and
  on meta autograd runs its 9-op decomposition instead. Counted whole (forward 1, backward
  2 per element) it costs the same on every device; ``mish_backward`` reached at dispatch
  without the unit costs the same 2 per element.

>>> import torch
>>> from flopsight.formulas.activation import activation, softmax, activation_backward, softmax_backward
>>> x = torch.ones(8, 16)
>>> activation(torch.relu(x), x)
Stats(macs=0, flops=128)
>>> activation(torch.nn.functional.glu(x), x, dim=-1)  # (8, 8) gated outputs
Stats(macs=0, flops=64)
>>> softmax(x.softmax(-1), x, dim=-1, half_to_float=False)
Stats(macs=0, flops=128)
>>> g = torch.ones(8, 16)
>>> activation_backward(g, grad_output=g, self=torch.relu(x), threshold=0)   # threshold_backward: 2 per element
Stats(macs=0, flops=256)
>>> softmax_backward(g, g, x.softmax(-1), dim=-1, input_dtype=torch.float32)   # 4 per element
Stats(macs=0, flops=512)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .registry import REGISTRY, Cost, OpNames
from .shapes import float_arithmetic, numel, result_numel, tensors

aten = OpNames("aten")  # names: an op this torch lacks is skipped (registry.builtins_loading)

__all__ = [
    "activation", "softmax", "activation_flops", "softmax_flops", "activation_backward_flops",
    "softmax_backward_flops", "activation_backward", "softmax_backward", "mish_unit", "mish_unit_backward",
    "mish_builtin_backward",
    "ACTIVATION_OPS", "SOFTMAX_OPS", "ACTIVATION_BACKWARD_OPS", "SOFTMAX_BACKWARD_OPS",
]  # fmt: skip


def activation_flops(n: int) -> int:
    """FLOPs of an activation kernel producing ``n`` elements: 1 per element (DeepSpeed's)."""
    return n


def softmax_flops(n: int) -> int:
    """FLOPs of a softmax (or log-softmax) over ``n`` elements: 1 per element (DeepSpeed's)."""
    return n


def activation_backward_flops(n: int) -> int:
    """FLOPs of an elementwise function's backward over ``n`` elements: 2 per element, the
    derivative (1, by the forward convention) and the chain-rule multiply by the incoming
    gradient (1)."""
    return 2 * n


def softmax_backward_flops(n: int) -> int:
    """FLOPs of a softmax (or log-softmax) backward over ``n`` elements: 4 per element.
    Softmax: ``y * (g - sum(g * y))`` is a multiply, an accumulate, a subtract and a
    multiply; log-softmax: ``g - exp(y) * sum(g)`` an exp, an accumulate, a multiply and a
    subtract."""
    return 4 * n


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
#: ``_log_softmax`` (only their ``out=`` overloads dispatch whole). ``_masked_softmax`` is
#: the kernel of the native (fast-path) attention and transformer layers.
SOFTMAX_OPS = (aten._softmax, aten._log_softmax, aten._safe_softmax, aten.softmax, aten.log_softmax,
               aten._masked_softmax)

#: The backward kernels of the activations above (``sigmoid_backward`` included; ``tanh``'s
#: and ``logit``'s are with their forward in :mod:`.elementwise`). ``nn.SELU``/``nn.CELU``
#: arrive as ``elu_backward``, ``nn.ReLU6`` as ``hardtanh_backward``, ``nn.ReLU`` and
#: ``nn.Threshold`` as ``threshold_backward``. ``infinitely_differentiable_gelu_backward`` is
#: composite (never dispatched on CPU/CUDA/meta); it is named for modes that see composites.
ACTIVATION_BACKWARD_OPS = (
    "aten::threshold_backward", "aten::hardtanh_backward", "aten::leaky_relu_backward",
    "aten::elu_backward", "aten::gelu_backward", "aten::infinitely_differentiable_gelu_backward",
    "aten::silu_backward", "aten::mish_backward", "aten::softplus_backward", "aten::sigmoid_backward",
    "aten::hardsigmoid_backward", "aten::hardswish_backward", "aten::hardshrink_backward",
    "aten::softshrink_backward", "aten::_prelu_kernel_backward", "aten::rrelu_with_noise_backward",
    "aten::glu_backward", "aten::log_sigmoid_backward",
)  # fmt: skip

#: Softmax backward kernels (``F.softmax``, ``F.log_softmax``, ``F.cross_entropy``'s first
#: half, the attention math path, the native attention fast path).
SOFTMAX_BACKWARD_OPS = (
    "aten::_softmax_backward_data", "aten::_log_softmax_backward_data", "aten::_masked_softmax_backward",
)


@REGISTRY.register(*ACTIVATION_OPS)
def activation(out, self, **_) -> Cost:
    """1 FLOP per element of the (first) result: ``log_sigmoid_forward`` returns
    ``(output, buffer)`` and the buffer is empty on CUDA, so only the output counts.
    (The parameters -- ``_prelu_kernel``'s ``weight``, ``rrelu``'s ``noise`` -- are read
    per element, not counted.)"""
    if not float_arithmetic(out, (self,)):
        return Cost()
    return Cost.of_flops(activation_flops(result_numel(out, (self,))))


@REGISTRY.register(*SOFTMAX_OPS)
def softmax(out, self, **_) -> Cost:
    """1 FLOP per input element (DeepSpeed's constant; a real softmax does ~5: max, sub,
    exp, sum, div -- kept at 1 so totals match DeepSpeed's)."""
    if not float_arithmetic(out, (self,)):
        return Cost()
    return Cost.of_flops(softmax_flops(numel(self)))


# -- backward ------------------------------------------------------------------------------
@REGISTRY.register(*ACTIVATION_BACKWARD_OPS, missing_ok=True)
def activation_backward(out, /, **arguments) -> Cost:
    """2 FLOPs per element of each gradient the kernel returns (derivative + chain rule).

    Most return one gradient, the size of the forward input; ``_prelu_kernel_backward``
    returns two input-sized ones (input's and weight's, the latter broadcast: autograd then
    sums it down to the weight's shape, counted as a ``sum``); ``glu_backward`` returns the
    gradient of the whole input, twice the size of the incoming gradient.

    The kernels name their arguments differently (``grad_output``, ``grad_out``,
    ``grad``; ``self``, ``output``, ``self_or_result``): the count reads only the result
    and whether a float tensor is among the arguments.
    """
    if not float_arithmetic(out, arguments.values()):
        return Cost()
    grads = tensors(out if isinstance(out, (list, tuple)) else (out,))
    return Cost.of_flops(sum(activation_backward_flops(g.numel()) for g in grads))


@REGISTRY.register(*SOFTMAX_BACKWARD_OPS, missing_ok=True)
def softmax_backward(out, grad_output, output, **_) -> Cost:
    """4 FLOPs per element of ``output`` (:func:`softmax_backward_flops`)."""
    if not float_arithmetic(out, (grad_output, output)):
        return Cost()
    return Cost.of_flops(softmax_backward_flops(numel(output)))


# -- mish: a unit, because its backward decomposes on meta --------------------------------------
# ``mish_backward`` has CPU and CUDA kernels but only a composite (9 ops: softplus, tanh,
# sigmoid, 3 multiplies, 1 - t^2, add, multiply) for every other device, meta included. Counted
# as a unit, the function costs 1 per element forward and 2 per element backward everywhere.
# ``F.mish(input, inplace=False)`` is bound by its Python signature; the builtins it calls,
# ``torch._C._nn.mish(self)`` / ``mish_(self)``, by the schemas of ``aten::mish`` / ``mish_``.
_MISH_BUILTINS = tuple(f for f in (getattr(torch._C._nn, "mish", None), getattr(torch._C._nn, "mish_", None))
                       if f is not None)


def mish_unit_backward(out, input, **_) -> Cost:
    """The backward of ``F.mish(input)``: 2 per element (only charged if ``input`` needed a
    gradient: otherwise autograd made no node and no backward runs)."""
    if not float_arithmetic(out, (input,)):
        return Cost()
    return Cost.of_flops(activation_backward_flops(numel(input)))


def mish_builtin_backward(out, self, **_) -> Cost:
    """The backward of ``torch._C._nn.mish(self)``: as :func:`mish_unit_backward`."""
    return mish_unit_backward(out, self)


@REGISTRY.register_unit(F.mish, name="mish", backward=mish_unit_backward,
                        reaches=_MISH_BUILTINS[0] if _MISH_BUILTINS else None)
def mish_unit(out, input, **_) -> Cost:
    """``F.mish(input, inplace=False)``: 1 per element, as the ``mish`` kernel."""
    return activation(out, input)


if _MISH_BUILTINS:
    @REGISTRY.register_unit(*_MISH_BUILTINS, name="mish", backward=mish_builtin_backward)
    def mish_builtin(out, self, **_) -> Cost:
        """``torch._C._nn.mish(self)`` / ``mish_(self)``: as :func:`mish_unit`."""
        return activation(out, self)
