"""Elementwise ops: arithmetic, math functions, comparisons, logic, clamps, selections.

Convention (see ``docs/conventions/elementwise.md`` for the table):

* Cost is counted per element of the **result**, i.e. of the broadcast output:
  ``(4, 1) + (1, 5)`` costs 20, more than either input has. In-place (``add_``) and
  ``out=`` forms cost what the functional form costs.
* **1 FLOP per element** for every arithmetic op, math function (``exp``, ``sin``,
  ``pow``, ``erf``...), rounding, comparison and clamp: one op, one elementary function
  evaluation per element, the constant DeepSpeed uses for ``add``/``mul`` and for its
  activations. Fused ops count the arithmetic a user would otherwise write as separate
  ops: ``add``/``sub``/``rsub`` with ``alpha != 1`` are 2 (a multiply and an add),
  ``addcmul``/``addcdiv`` are 2 (3 with ``value != 1``), ``lerp`` is 3 (sub, mul, add).
* **FLOPs only for floating-point work**: an op costs 0 unless a float/complex tensor is
  among its operands or is its result. Integer and bool arithmetic, bitwise ops and
  comparisons of integers are free. ``int / int`` (true division) and ``int * 0.5``
  return floats computed in floating point, so they count.
* **Selection is free**: ``where`` and ``masked_fill`` only pick elements, they do no
  arithmetic (the comparison that builds the mask is counted where it runs).
* Composite functions (``isclose``, ``float_power``, ``square``, ``softsign``, Python
  ``2 / a`` = ``reciprocal`` + ``mul``) are counted through the ops they dispatch.
* Complex tensors count 1 per element too (not per real component).

``sigmoid`` and the activation kernels live in :mod:`.activation`; ``tanh`` is here
with the other math functions (``nn.Tanh`` dispatches the same op).

Backward: the gradients of elementwise ops are elementwise ops themselves (``a * b``'s
backward is two ``mul``, ``exp``'s a ``mul``, ``where``'s a free ``where``): autograd
dispatches them as ordinary aten ops, counted by the formulas here. Only two math
functions have backward *kernels*: ``tanh_backward`` and ``logit_backward``, 2 per
element (:func:`flopsight.formulas.activation.activation_backward_flops`).

Optimizer steps: the foreach (``_foreach_*``) and single-tensor implementations dispatch
the per-tensor ops above, counted as such; the fused kernels (``_fused_adam_``,
``_fused_adamw_``, ``_fused_sgd_``, ``_fused_adagrad_``) are costed per parameter element
as the sum of the ops the foreach implementation runs for the same settings, so an
optimizer costs the same whichever implementation runs. AdamW (default settings) is
:data:`ADAMW_FLOPS_PER_ELEMENT` = 14 FLOPs per parameter element, plus 1 per parameter
tensor for its step count (see :func:`adam_flops_per_element`).

>>> import torch
>>> from flopsight.formulas.elementwise import pointwise, scaled_add, lerp
>>> x, y = torch.ones(4, 1), torch.ones(1, 5)
>>> pointwise(x * y, self=x, other=y)  # one FLOP per element of the broadcast (4, 5) result
Stats(macs=0, flops=20)
>>> scaled_add(x + 2 * y, self=x, other=y, alpha=2)  # x + 2*y: a multiply and an add per element
Stats(macs=0, flops=40)
>>> lerp(x.lerp(y, 0.5), self=x, end=y, weight=0.5)  # x + w*(y - x)
Stats(macs=0, flops=60)
>>> i = torch.ones(4, dtype=torch.int64)
>>> pointwise(i + i, self=i, other=i)  # integer arithmetic is not FLOPs
Stats(macs=0, flops=0)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from .activation import activation_backward_flops
from .registry import REGISTRY, Cost, OpNames
from .shapes import first_tensor, float_arithmetic, is_float, numel, result_numel, tensors

aten = OpNames("aten")  # names: an op this torch lacks is skipped (registry.builtins_loading)

__all__ = [
    "pointwise", "scaled_add", "addcmul", "lerp", "equal", "allclose", "foreach", "packets", "elementwise_flops",
    "math_backward", "adam_flops_per_element", "sgd_flops_per_element", "adagrad_flops_per_element",
    "fused_adam", "fused_adamw", "fused_sgd", "fused_adagrad", "amp_unscale", "amp_update_scale",
    "ADAMW_FLOPS_PER_ELEMENT",
]


def packets(*names: str) -> list:
    """``aten.<name>`` and its in-place twin ``aten.<name>_`` for each name, where they exist.

    >>> [str(p) for p in packets("add", "maximum")]
    ['aten.add', 'aten.add_', 'aten.maximum']
    """
    found = []
    for name in names:
        for n in (name, name + "_"):
            try:
                found.append(getattr(torch.ops.aten, n))
            except AttributeError:  # no in-place twin (maximum_), or not in this torch
                pass
    return found


def _is_one(x: Any) -> bool:
    """Is a scalar coefficient (alpha, value) 1, so that multiplying by it is no work?

    A tensor coefficient counts as not 1: formulas never read tensor values.
    """
    if isinstance(x, torch.Tensor):
        return False
    try:
        return bool(x == 1)
    except Exception:  # a symbolic or exotic scalar: assume it is a real multiply
        return False


def _is_zero(x: Any) -> bool:
    """Is a scalar tolerance 0? (A tensor is assumed not to be: values are never read.)"""
    if isinstance(x, torch.Tensor):
        return False
    try:
        return bool(x == 0)
    except Exception:
        return False


def elementwise_flops(n: int, ops: int = 1) -> int:
    """FLOPs of ``ops`` elementwise arithmetic operations (add, multiply, ...) on ``n``
    elements: 1 per operation per element. For formulas that know only element counts
    (a residual add or an attention mask inside a fused kernel).

    >>> elementwise_flops(20), elementwise_flops(20, ops=3)
    (20, 60)
    """
    return ops * n


def _flops(per_element: int, out: Any, operands: Iterable[Any]) -> Cost:
    """``per_element`` FLOPs per element of the result, if a float tensor is among ``out`` and
    ``operands`` (the op's argument values: tensors, scalars, lists)."""
    if isinstance(out, torch.Tensor) and (out.is_floating_point() or out.is_complex()):
        return Cost.of_flops(per_element * out.numel())  # the common case, without scanning operands
    operands = tuple(operands)
    if not float_arithmetic(out, operands):
        return Cost()
    return Cost.of_flops(elementwise_flops(result_numel(out, operands), per_element))


# -- 1 FLOP per output element --------------------------------------------------------------
#: Unary math functions: one function evaluation per element. Rounding (floor, round...)
#: and sign manipulation (abs, neg, sign) are floating-point instructions too.
UNARY = (
    "abs", "neg", "sqrt", "rsqrt", "reciprocal", "exp", "exp2", "expm1",
    "log", "log1p", "log2", "log10",
    "sin", "cos", "tan", "tanh", "sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh",
    "erf", "erfc", "erfinv", "sign", "sgn", "floor", "ceil", "round", "trunc", "frac",
    "nan_to_num", "logit", "i0", "lgamma", "digamma", "polygamma", "mvlgamma", "sinc",
    "deg2rad", "rad2deg", "angle", "conj_physical", "_conj_physical", "frexp",
    "special_entr", "special_erfcx", "special_i0e", "special_i1", "special_i1e",
    "special_ndtri", "special_log_ndtr", "special_bessel_j0", "special_bessel_j1",
    "special_bessel_y0", "special_bessel_y1", "special_modified_bessel_i0",
    "special_modified_bessel_i1", "special_modified_bessel_k0", "special_modified_bessel_k1",
    "special_scaled_modified_bessel_k0", "special_scaled_modified_bessel_k1",
    "special_spherical_bessel_j0", "special_airy_ai",
)  # fmt: skip

#: Binary arithmetic and math functions: one evaluation per output element, whatever its
#: internal cost (``pow``, ``atan2`` and ``hypot`` count 1 like ``exp``). ``div`` counts 1
#: in every rounding mode: the mode picks which quotient is computed, it adds no op.
BINARY = (
    "mul", "div", "floor_divide", "remainder", "fmod", "pow",
    "maximum", "minimum", "fmax", "fmin", "atan2", "hypot", "copysign", "nextafter",
    "heaviside", "ldexp", "xlogy", "special_xlog1py", "special_zeta", "logaddexp", "logaddexp2",
    "igamma", "igammac", "gcd", "lcm",
    "special_chebyshev_polynomial_t", "special_chebyshev_polynomial_u",
    "special_chebyshev_polynomial_v", "special_chebyshev_polynomial_w",
    "special_shifted_chebyshev_polynomial_t", "special_shifted_chebyshev_polynomial_u",
    "special_shifted_chebyshev_polynomial_v", "special_shifted_chebyshev_polynomial_w",
    "special_hermite_polynomial_h", "special_hermite_polynomial_he",
    "special_laguerre_polynomial_l", "special_legendre_polynomial_p",
)  # fmt: skip

#: Comparisons and classification: a float compare per element (0 on integers).
#: ``isfinite``/``isclose`` are composite and arrive as the ops below plus ``abs``/``sub``...
COMPARISON = ("eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "isposinf", "isneginf", "signbit")

#: Logic and bit ops: bool/int only, so 0 -- except ``logical_*`` on float tensors, which
#: compare each operand with zero in floating point.
LOGICAL = (
    "logical_and", "logical_or", "logical_xor", "logical_not",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
    "bitwise_left_shift", "bitwise_right_shift", "__lshift__", "__rshift__", "__ilshift__", "__irshift__",
)  # fmt: skip

#: Clamps: one saturation per element, with one bound or two (``F.relu6``/``hardtanh``,
#: the same clamp, is DeepSpeed's 1 per element). ``clip`` is an alias that arrives as clamp.
CLAMP = ("clamp", "clamp_min", "clamp_max")


@REGISTRY.register(*packets(*UNARY, *BINARY, *COMPARISON, *LOGICAL, *CLAMP))
def pointwise(out, /, **operands) -> Cost:
    """1 FLOP per element of the result, if the op works in floating point.

    One formula for ops of every argument naming (``exp(self)``, ``pow(self, exponent)``,
    ``clamp(self, min, max)``, ``polygamma(n, self)``...): it reads the result and which of
    the arguments are float tensors, never their names.
    """
    return _flops(1, out, operands.values())


# -- ldexp: a unit, because torch 2.9 decomposes it ---------------------------------------------
# torch 2.9's aten::ldexp is a composite, ``self * 2.0 ** other`` (a pow per element of
# ``other``, then a mul), where later torches run one ldexp kernel: counted as a unit, it
# costs the kernel's 1 per element, and its backward what the later kernel's derivative runs,
# on every torch. Bound by the schemas of aten::ldexp / ldexp_ (``self``, ``other``; the
# ``ldexp(x, i)`` overload of Python numbers is never called with tensors: 0).
_LDEXP_FUNCTIONS = (torch.ldexp, torch.ldexp_, torch.Tensor.ldexp, torch.Tensor.ldexp_)


def ldexp_backward(out, self=None, other=None, **_) -> Cost:
    """The backward of ``ldexp(self, other) = self * 2**other`` over the ``N`` elements of
    the result: for ``self``, ``grad * 2**other`` (a pow per element of a float ``other``,
    then N); for ``other``, ``grad * result * ln 2`` (2N); each gradient summed down to its
    operand's shape where that was broadcast (N)."""
    n = result_numel(out, (self, other))
    flops = 0
    if getattr(self, "requires_grad", False):
        flops += (numel(other) if is_float(other) else 0) + n + (n if numel(self) != n else 0)
    if getattr(other, "requires_grad", False):
        flops += 2 * n + (n if numel(other) != n else 0)
    return Cost.of_flops(flops)


# the Tensor methods dispatch to the same aten ops as the builtins
@REGISTRY.register_unit(*_LDEXP_FUNCTIONS, name="ldexp", backward=ldexp_backward,
                        reaches=(None, None, torch.ldexp, torch.ldexp_))
def ldexp(out, self=None, other=None, **_) -> Cost:
    """``torch.ldexp(self, other)`` (also in place): 1 per element of the result, as the kernel."""
    return pointwise(out, self=self, other=other)


# -- fused arithmetic: count each operation they fuse ------------------------------------------
@REGISTRY.register(*packets("add", "sub", "rsub"))
def scaled_add(out, /, alpha=1, **operands) -> Cost:
    """``self ± alpha*other`` (``rsub``: ``other - alpha*self``): 1 per element, 2 when
    ``alpha != 1``.

    Also counts ``_foreach_add``/``_foreach_sub`` per tensor (``self``, and ``other``,
    ``scalar`` or ``scalars``: see :func:`foreach`), and the packets' Python-number
    overloads (``add.int(a, b)``, never dispatched with tensors: 0). SGD's
    ``p.add_(grad, alpha=-lr)`` is a multiply and an add per parameter.
    """
    return _flops(1 if _is_one(alpha) else 2, out, operands.values())


@REGISTRY.register(*packets("addcmul", "addcdiv"))
def addcmul(out, self, tensor1, tensor2, value=1, scalars=1, **_) -> Cost:
    """``self + value * tensor1 (*|/) tensor2``: 2 per element, 3 when ``value != 1``.

    ``scalars`` is the per-tensor coefficient of ``_foreach_addcmul.ScalarList`` (a tensor
    of coefficients, ``.Tensor``, counts as not 1: values are never read).
    """
    per_element = 2 if _is_one(value) and _is_one(scalars) else 3
    return _flops(per_element, out, (self, tensor1, tensor2, value, scalars))


@REGISTRY.register(*packets("lerp"))
def lerp(out, /, **operands) -> Cost:
    """``self + weight * (end - self)``: a sub, a mul and an add per element (also
    ``_foreach_lerp``'s ``(self, tensors1, weight(s))`` per tensor)."""
    return _flops(3, out, operands.values())


@REGISTRY.register(aten.equal)
def equal(out, self, other, **_) -> Cost:
    """``torch.equal`` returns a Python bool: one compare per element when the shapes match
    (different shapes are unequal without comparing anything)."""
    if self.shape != other.shape or not float_arithmetic(None, (self, other)):
        return Cost()
    return Cost.of_flops(self.numel())


@REGISTRY.register(aten.allclose)
def allclose(out, self, other, rtol=1e-05, atol=1e-08, equal_nan=False, **_) -> Cost:
    """``allclose`` runs as one kernel on CPU/CUDA; it costs what the composite ``isclose``
    it runs inside dispatches (counted op by op when called directly), the final ``all``
    of a bool tensor being free:

    ``eq(a, b)`` [+ ``isnan(a)``, ``isnan(b)`` with ``equal_nan``]; unless
    ``rtol == atol == 0``: ``atol + |rtol * b|`` (3 ops on b's elements), then
    ``|a - b|`` (sub, abs), ``isfinite`` of it (abs, ne, eq) and ``<=``: 6 ops on the
    broadcast elements. Integer inputs are compared exactly (free) and cast to float for
    the tolerance part.
    """
    floats = float_arithmetic(None, (self, other))
    both = result_numel(None, (self, other))
    flops = both if floats else 0
    if equal_nan and floats:
        flops += self.numel() + other.numel()
    if not (_is_zero(rtol) and _is_zero(atol)):
        flops += 3 * other.numel() + 6 * both
    return Cost.of_flops(flops)


# -- selection: no arithmetic ------------------------------------------------------------------
REGISTRY.zero_cost(*packets("where", "masked_fill"))


# -- _foreach_* (optimizers' multi-tensor ops): the per-tensor formula, summed ----------------
def foreach(per_tensor: Callable[..., Cost]) -> Callable[..., Cost]:
    """A formula for ``_foreach_<op>`` from the formula of ``<op>``: the sum over the list.

    The per-tensor formula is called once per tensor with the foreach op's arguments by
    their own names (``_foreach_add.List(self, other, *, alpha)``,
    ``_foreach_add.ScalarList(self, scalars)``, ``_foreach_pow.ScalarAndTensor(self,
    exponent)``...), list arguments indexed per tensor (``Tensor[]`` and ``Scalar[]``
    alike), the others (a shared scalar or tensor) passed to every call: ``per_tensor`` must
    accept those names. In-place forms return nothing: each result is then the tensor
    updated, ``self[i]``.

    >>> xs = [torch.ones(3), torch.ones(2, 2)]
    >>> foreach(scaled_add)(None, self=xs, other=xs, alpha=0.5)  # (3 + 4) elements * 2
    Stats(macs=0, flops=14)
    """

    def formula(out, /, **arguments) -> Cost:
        lists = [v for v in arguments.values() if isinstance(v, (list, tuple))]
        n = len(lists[0]) if lists else 0
        outs = out if isinstance(out, (list, tuple)) and len(out) == n else None
        total = Cost()
        for i in range(n):
            arguments_i = {k: v[i] if isinstance(v, (list, tuple)) else v for k, v in arguments.items()}
            out_i = outs[i] if outs is not None else first_tensor([arguments_i.get("self"), *arguments_i.values()])
            total = total + per_tensor(out_i, **arguments_i)
        return total

    formula.__name__ = f"foreach_{getattr(per_tensor, '__name__', 'op')}"
    return formula


def _register_foreach() -> None:
    by_name = {name: pointwise for name in UNARY + BINARY + CLAMP + ("sigmoid",)}
    by_name.update(add=scaled_add, sub=scaled_add, addcmul=addcmul, addcdiv=addcmul, lerp=lerp)
    for name, per_tensor in by_name.items():
        ops = packets("_foreach_" + name)
        if ops:
            REGISTRY.register(*ops)(foreach(per_tensor))


_register_foreach()


# -- backward kernels of math functions ------------------------------------------------------
@REGISTRY.register("aten::tanh_backward", "aten::logit_backward", missing_ok=True)
def math_backward(out, grad_output, **_) -> Cost:
    """``tanh_backward(grad_output, output)``: ``grad * (1 - y^2)``;
    ``logit_backward(grad_output, self, eps)``: ``grad / (x (1 - x))``. Counted as every
    elementwise function's backward: 2 per element (the derivative, 1; the chain-rule
    multiply, 1)."""
    if not float_arithmetic(out, (grad_output,)):
        return Cost()
    return Cost.of_flops(activation_backward_flops(result_numel(out, (grad_output,))))


# -- fused optimizer kernels ------------------------------------------------------------------
# Each fused kernel costs, per parameter element, what torch's foreach implementation of the
# same optimizer dispatches for the same settings (and the single-tensor implementation
# dispatches the same per element), counted by the formulas above. The step counters
# (``state_steps``) are incremented outside the fused kernels, by a ``_foreach_add_``
# (1 FLOP per parameter tensor), as in the other implementations.


def adam_flops_per_element(
    *, decoupled: bool, weight_decay=0.0, amsgrad=False, maximize=False, grad_scale=False
) -> int:
    """FLOPs per parameter element of one Adam (``decoupled=False``) or AdamW step.

    The foreach implementation (``capturable=False``) runs, per element::

        exp_avg.lerp_(grad, 1 - beta1)                         3  (lerp: sub, mul, add)
        exp_avg_sq.mul_(beta2)                                 1
        exp_avg_sq.addcmul_(grad, grad, value=1 - beta2)       3  (value != 1)
        denom = exp_avg_sq.sqrt()                              1
        denom.div_(bias_correction2_sqrt)                      1
        denom.add_(eps)                                        1
        param.addcdiv_(exp_avg, denom, value=-step_size)       3
                                                              13

    plus ``param.mul_(1 - lr * wd)`` (1, AdamW) or ``grad = grad + wd * param`` (2, Adam)
    when ``weight_decay != 0``; ``maximum_(max_exp_avg_sq, exp_avg_sq)`` (1) with
    ``amsgrad``; ``grad = -grad`` (1) with ``maximize``; and, in the fused kernel, the
    division by ``grad_scale`` (1) under a ``GradScaler``. The bias corrections are Python
    scalars (``capturable=False``): no tensor op.

    >>> adam_flops_per_element(decoupled=True, weight_decay=0.01)   # AdamW's defaults
    14
    >>> adam_flops_per_element(decoupled=False)                     # Adam's defaults
    13
    """
    flops = 13
    if not _is_zero(weight_decay):
        flops += 1 if decoupled else 2
    return flops + bool(amsgrad) + bool(maximize) + bool(grad_scale)


#: FLOPs per parameter element of an AdamW step with torch's defaults (weight_decay=0.01).
ADAMW_FLOPS_PER_ELEMENT = adam_flops_per_element(decoupled=True, weight_decay=0.01)


def sgd_flops_per_element(
    *, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0, maximize=False, first_step=False,
    grad_scale=False,
) -> int:
    """FLOPs per parameter element of one SGD step::

        grad = -grad                                  1  (maximize)
        grad = grad + wd * param                      2  (weight_decay != 0)
        buf.mul_(momentum).add_(grad, alpha=1 - d)    2, 3 if dampening != 0  (momentum, after
                                                         the first step, which copies grad: 0)
        grad = grad + momentum * buf                  2  (nesterov)
        param.add_(grad, alpha=-lr)                   2

    >>> sgd_flops_per_element(momentum=0.9)
    4
    >>> sgd_flops_per_element()   # plain SGD: p -= lr * g
    2
    """
    flops = 2 + bool(maximize) + bool(grad_scale)
    if not _is_zero(weight_decay):
        flops += 2
    if not _is_zero(momentum):
        if not first_step:
            flops += 1 + (1 if _is_zero(dampening) else 2)
        if nesterov:
            flops += 2
    return flops


def adagrad_flops_per_element(*, weight_decay=0.0, maximize=False, grad_scale=False) -> int:
    """FLOPs per parameter element of one Adagrad step::

        state_sum.addcmul_(grad, grad, value=1)       2
        std = state_sum.sqrt()                        1
        std.add_(eps)                                 1
        numerator = grad * (-clr)                     1
        param.addcdiv_(numerator, std)                2
                                                      7

    plus 1 with ``maximize``, 2 with ``weight_decay`` (``grad + wd * param``).

    >>> adagrad_flops_per_element()
    7
    """
    return 7 + bool(maximize) + (0 if _is_zero(weight_decay) else 2) + bool(grad_scale)


def _param_elements(params) -> int:
    return sum(t.numel() for t in tensors((params,)) if is_float(t))


@REGISTRY.register("aten::_fused_adam_", "aten::_fused_adam", missing_ok=True)
def fused_adam(out, self, *, weight_decay, amsgrad, maximize, grad_scale=None, **_) -> Cost:
    """Adam's fused step over the parameters ``self``: :func:`adam_flops_per_element` per
    parameter element."""
    per = adam_flops_per_element(decoupled=False, weight_decay=weight_decay, amsgrad=amsgrad,
                                 maximize=maximize, grad_scale=grad_scale is not None)
    return Cost.of_flops(per * _param_elements(self))


@REGISTRY.register("aten::_fused_adamw_", "aten::_fused_adamw", missing_ok=True)
def fused_adamw(out, self, *, weight_decay, amsgrad, maximize, grad_scale=None, **_) -> Cost:
    """As :func:`fused_adam`, with decoupled weight decay."""
    per = adam_flops_per_element(decoupled=True, weight_decay=weight_decay, amsgrad=amsgrad,
                                 maximize=maximize, grad_scale=grad_scale is not None)
    return Cost.of_flops(per * _param_elements(self))


@REGISTRY.register("aten::_fused_sgd_", "aten::_fused_sgd", missing_ok=True)
def fused_sgd(out, self, *, weight_decay, momentum, dampening, nesterov, maximize, is_first_step,
              grad_scale=None, **_) -> Cost:
    """SGD's fused step over the parameters ``self``: :func:`sgd_flops_per_element` per
    parameter element."""
    per = sgd_flops_per_element(momentum=momentum, dampening=dampening, nesterov=nesterov,
                                weight_decay=weight_decay, maximize=maximize, first_step=is_first_step,
                                grad_scale=grad_scale is not None)
    return Cost.of_flops(per * _param_elements(self))


@REGISTRY.register("aten::_fused_adagrad_", "aten::_fused_adagrad", missing_ok=True)
def fused_adagrad(out, self, *, weight_decay, maximize, grad_scale=None, **_) -> Cost:
    """Adagrad's fused step over the parameters ``self``: :func:`adagrad_flops_per_element`
    per parameter element."""
    per = adagrad_flops_per_element(weight_decay=weight_decay, maximize=maximize,
                                    grad_scale=grad_scale is not None)
    return Cost.of_flops(per * _param_elements(self))


# -- mixed precision: GradScaler's kernels ------------------------------------------------------
@REGISTRY.register("aten::_amp_foreach_non_finite_check_and_unscale_",
                   "aten::_amp_foreach_non_finite_check_and_unscale", missing_ok=True)
def amp_unscale(out, self, **_) -> Cost:
    """``GradScaler.unscale_`` of the gradients ``self``: per gradient element a multiply by
    ``inv_scale`` and a finiteness check: 2."""
    return Cost.of_flops(2 * _param_elements(self))


@REGISTRY.register("aten::_amp_update_scale_", "aten::_amp_update_scale", missing_ok=True)
def amp_update_scale(out, self, **_) -> Cost:
    """``GradScaler.update`` of the scale ``self``: a test of ``found_inf`` and a multiply of
    the (one-element) scale by the growth or backoff factor: 2 per scale element (the growth
    tracker is an integer counter: free)."""
    return Cost.of_flops(2 * numel(self) if is_float(self) else 0)
