"""Elementwise ops: hand-derived FLOPs, the same on CPU and meta.

Every case runs on CPU and on meta and must give ``(0 MACs, expected FLOPs)`` on both.
The expected values are derived from the shapes: ``N`` is the number of elements of the
(2, 3, 4) result that most cases produce; the per-element constants are those of
``docs/conventions/elementwise.md`` (1 per op, ``alpha``/``value`` scaling +1, addcmul/
addcdiv 2, lerp 3, selection 0, integer/bool work 0).
"""

import operator

import pytest
import torch
from helpers import layer_backward, measure_cpu_meta, measure_on, ops_of

import flopsight
from flopsight.formulas import REGISTRY

N = 2 * 3 * 4  # elements of X() and of every result broadcast against it
M = 3 * 4  # elements of Y()


def X():
    return torch.randn(2, 3, 4)


def Y():  # broadcasts against X(): results have N elements
    return torch.randn(3, 4)


def I():  # noqa: E743  integer twin of X()
    return torch.randint(1, 5, (2, 3, 4))


def B():
    return torch.randn(2, 3, 4) > 0


def case(name, fn, inputs, flops):
    return pytest.param(fn, inputs, flops, id=name)


# -- Python operators --------------------------------------------------------------------------
OPERATORS = [
    # one dispatched op per expression, 1 FLOP per element of the (2, 3, 4) broadcast result
    case("a+b", lambda a, b: a + b, lambda: (X(), Y()), N),  # add.Tensor
    case("a+2", lambda a: a + 2, lambda: (X(),), N),
    case("2+a", lambda a: 2 + a, lambda: (X(),), N),  # add.Tensor(a, 2)
    case("a-b", lambda a, b: a - b, lambda: (X(), Y()), N),
    case("2-a", lambda a: 2 - a, lambda: (X(),), N),  # rsub.Scalar
    case("a*b", lambda a, b: a * b, lambda: (X(), Y()), N),
    case("a*2.5", lambda a: a * 2.5, lambda: (X(),), N),
    case("a/b", lambda a, b: a / b, lambda: (X(), Y()), N),
    case("a/2", lambda a: a / 2, lambda: (X(),), N),
    case("2/a", lambda a: 2 / a, lambda: (X(),), 2 * N),  # reciprocal + mul: 2 ops
    case("a//b", lambda a, b: a // b, lambda: (X(), Y()), N),  # floor_divide
    case("a%b", lambda a, b: a % b, lambda: (X(), Y()), N),  # remainder
    case("a%3", lambda a: a % 3, lambda: (X(),), N),
    case("a**2", lambda a: a**2, lambda: (X(),), N),  # pow.Tensor_Scalar
    case("a**0.5", lambda a: a**0.5, lambda: (X(),), N),
    case("a**b", lambda a, b: a**b, lambda: (X(), Y()), N),  # pow.Tensor_Tensor
    case("2**a", lambda a: 2**a, lambda: (X(),), N),  # pow.Scalar
    case("-a", lambda a: -a, lambda: (X(),), N),
    case("abs(a)", lambda a: abs(a), lambda: (X(),), N),
    case("+a", lambda a: +a, lambda: (X(),), 0),  # positive: returns a, dispatches nothing
    case("a<b", lambda a, b: a < b, lambda: (X(), Y()), N),
    case("a<=b", lambda a, b: a <= b, lambda: (X(), Y()), N),
    case("a>b", lambda a, b: a > b, lambda: (X(), Y()), N),
    case("a>=b", lambda a, b: a >= b, lambda: (X(), Y()), N),
    case("a==b", lambda a, b: a == b, lambda: (X(), Y()), N),
    case("a!=b", lambda a, b: a != b, lambda: (X(), Y()), N),
    case("a<0", lambda a: a < 0, lambda: (X(),), N),
    # in-place operators: the cost of the functional op
    case("a+=b", operator.iadd, lambda: (X(), Y()), N),
    case("a-=b", operator.isub, lambda: (X(), Y()), N),
    case("a*=b", operator.imul, lambda: (X(), Y()), N),
    case("a/=b", operator.itruediv, lambda: (X(), Y()), N),
    case("a//=b", operator.ifloordiv, lambda: (X(), Y()), N),
    case("a%=b", operator.imod, lambda: (X(), Y()), N),
    case("a**=2", lambda a: operator.ipow(a, 2), lambda: (X(),), N),
    # broadcasting: the result is larger than either operand
    case("(4,1)+(1,5)", lambda a, b: a + b, lambda: (torch.randn(4, 1), torch.randn(1, 5)), 4 * 5),
    case("(4,1)*(2,1,5)", lambda a, b: a * b, lambda: (torch.randn(4, 1), torch.randn(2, 1, 5)), 2 * 4 * 5),
    case("(4,1)<(1,5)", lambda a, b: a < b, lambda: (torch.randn(4, 1), torch.randn(1, 5)), 4 * 5),
    case("a+0-dim", lambda a, b: a + b, lambda: (X(), torch.tensor(2.0)), N),
    case("0-dim+0-dim", lambda a, b: a + b, lambda: (torch.tensor(1.0), torch.tensor(2.0)), 1),
    case("empty", lambda a, b: a * b, lambda: (torch.randn(0, 4), torch.randn(4)), 0),
    # integer and bool arithmetic is not FLOPs...
    case("int+int", lambda a, b: a + b, lambda: (I(), I()), 0),
    case("int*2", lambda a: a * 2, lambda: (I(),), 0),
    case("int//2", lambda a: a // 2, lambda: (I(),), 0),
    case("int%3", lambda a: a % 3, lambda: (I(),), 0),
    case("int**2", lambda a: a**2, lambda: (I(),), 0),
    case("-int", lambda a: -a, lambda: (I(),), 0),
    case("abs(int)", lambda a: abs(a), lambda: (I(),), 0),
    case("int<int", lambda a, b: a < b, lambda: (I(), I()), 0),
    case("int==0", lambda a: a == 0, lambda: (I(),), 0),
    case("int&int", lambda a, b: a & b, lambda: (I(), I()), 0),
    case("int|1", lambda a: a | 1, lambda: (I(),), 0),
    case("int^int", lambda a, b: a ^ b, lambda: (I(), I()), 0),
    case("~int", lambda a: ~a, lambda: (I(),), 0),
    case("int<<1", lambda a: a << 1, lambda: (I(),), 0),
    case("int>>1", lambda a: a >> 1, lambda: (I(),), 0),
    case("bool&bool", lambda a, b: a & b, lambda: (B(), B()), 0),
    case("~bool", lambda a: ~a, lambda: (B(),), 0),
    case("bool*bool", lambda a, b: a * b, lambda: (B(), B()), 0),
    # ...but float work that starts from integers is
    case("int/int", lambda a, b: a / b, lambda: (I(), I()), N),  # true division returns floats
    case("int*0.5", lambda a: a * 0.5, lambda: (I(),), N),  # promoted to a float result
    case("int+float", lambda a, b: a + b, lambda: (I(), X()), N),
    case("float*bool", lambda a, b: a * b, lambda: (X(), B()), N),  # masking by multiply
    # other float dtypes: 1 per element too (complex: per element, not per real component)
    case("half+half", lambda a: a + a, lambda: (X().half(),), N),
    case("bf16*bf16", lambda a: a * a, lambda: (X().bfloat16(),), N),
    case("f64/f64", lambda a: a / a, lambda: (X().double(),), N),
    case("complex*complex", lambda a: a * a, lambda: (torch.randn(2, 3, 4, dtype=torch.complex64),), N),
    case("abs(complex)", lambda a: abs(a), lambda: (torch.randn(2, 3, 4, dtype=torch.complex64),), N),
]


@pytest.mark.parametrize("fn, inputs, flops", OPERATORS)
def test_python_operators(fn, inputs, flops):
    assert measure_cpu_meta(fn, *inputs()) == (0, flops)


# -- torch functions ----------------------------------------------------------------------------
UNARY = (
    "abs neg sqrt rsqrt reciprocal exp exp2 expm1 log log1p log2 log10 sin cos tan tanh sinh cosh "
    "asin acos atan asinh acosh atanh erf erfc erfinv sign sgn floor ceil round trunc frac "
    "nan_to_num logit i0 lgamma digamma sinc deg2rad rad2deg angle square fix negative absolute "
    "arccos isnan isinf isposinf isneginf signbit logical_not"
).split()
SPECIAL_UNARY = (
    "entr erfcx i0e i1 i1e ndtri log_ndtr bessel_j0 bessel_j1 bessel_y0 bessel_y1 "
    "modified_bessel_i0 modified_bessel_i1 modified_bessel_k0 modified_bessel_k1 "
    "scaled_modified_bessel_k0 scaled_modified_bessel_k1 spherical_bessel_j0 airy_ai"
).split()
BINARY = (
    "mul div true_divide floor_divide remainder fmod pow maximum minimum fmax fmin max min atan2 "
    "hypot copysign nextafter heaviside ldexp xlogy logaddexp logaddexp2 igamma igammac "
    "eq ne lt le gt ge greater less not_equal logical_and logical_or logical_xor"
).split()
SPECIAL_BINARY = (
    "xlog1py zeta chebyshev_polynomial_t chebyshev_polynomial_u chebyshev_polynomial_v "
    "chebyshev_polynomial_w shifted_chebyshev_polynomial_t hermite_polynomial_h "
    "hermite_polynomial_he laguerre_polynomial_l legendre_polynomial_p"
).split()

FUNCTIONS = [
    # every unary math function, rounding and classification: 1 per element
    *(case(n, getattr(torch, n), lambda: (X(),), N) for n in UNARY),
    *(case(f"special.{n}", getattr(torch.special, n), lambda: (X(),), N) for n in SPECIAL_UNARY),
    # every binary function: 1 per element of the broadcast (2, 3, 4) result
    *(case(n, getattr(torch, n), lambda: (X(), Y()), N) for n in BINARY),
    *(case(f"special.{n}", getattr(torch.special, n), lambda: (X(), Y()), N) for n in SPECIAL_BINARY),
    case("frexp", torch.frexp, lambda: (X(),), N),  # (mantissa, exponent): one evaluation each element
    case("polygamma", lambda a: torch.polygamma(1, a), lambda: (X(),), N),
    case("mvlgamma", lambda a: torch.mvlgamma(a, 1), lambda: (torch.rand(2, 3, 4) + 1,), N),
    case("round(decimals)", lambda a: torch.round(a, decimals=2), lambda: (X(),), N),
    case("sigmoid", torch.sigmoid, lambda: (X(),), N),  # counted in activation.py
    case("special.expit", torch.special.expit, lambda: (X(),), N),  # = sigmoid
    case("gcd(int)", torch.gcd, lambda: (I(), I()), 0),
    case("lcm(int)", torch.lcm, lambda: (I(), I()), 0),
    case("bitwise_and(int)", torch.bitwise_and, lambda: (I(), I()), 0),
    case("bitwise_left_shift(int)", torch.bitwise_left_shift, lambda: (I(), I()), 0),
    case("logical_and(bool)", torch.logical_and, lambda: (B(), B()), 0),
    # division in every rounding mode: one quotient per element
    case("div floor", lambda a, b: torch.div(a, b, rounding_mode="floor"), lambda: (X(), Y()), N),
    case("div trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc"), lambda: (X(), Y()), N),
    case("div floor scalar", lambda a: torch.div(a, 2, rounding_mode="floor"), lambda: (X(),), N),
    case("div trunc int", lambda a, b: torch.div(a, b, rounding_mode="trunc"), lambda: (I(), I()), 0),
    case("remainder scalar", lambda a: torch.remainder(a, 2.0), lambda: (X(),), N),
    case("fmod scalar", lambda a: torch.fmod(a, 2.0), lambda: (X(),), N),
    case("pow scalar base", lambda a: torch.pow(2, a), lambda: (X(),), N),
    case("pow int base float exponent", lambda a: torch.pow(2.5, a), lambda: (I(),), N),  # float result
    # alpha != 1 is a multiply on top of the add: 2 per element
    case("add alpha=1", lambda a, b: torch.add(a, b, alpha=1), lambda: (X(), Y()), N),
    case("add alpha=2", lambda a, b: torch.add(a, b, alpha=2), lambda: (X(), Y()), 2 * N),
    case("add scalar alpha=3", lambda a: torch.add(a, 2, alpha=3), lambda: (X(),), 2 * N),
    case("sub alpha=0.5", lambda a, b: torch.sub(a, b, alpha=0.5), lambda: (X(), Y()), 2 * N),
    case("subtract", torch.subtract, lambda: (X(), Y()), N),
    case("rsub", torch.rsub, lambda: (X(), Y()), N),  # b - a
    case("rsub alpha=3", lambda a, b: torch.rsub(a, b, alpha=3), lambda: (X(), Y()), 2 * N),
    case("add int alpha=2", lambda a, b: torch.add(a, b, alpha=2), lambda: (I(), I()), 0),
    case("aten add.Scalar alpha", lambda a: torch.ops.aten.add.Scalar(a, 1.0, 2), lambda: (X(),), 2 * N),
    # fused arithmetic: each operation it fuses
    case("addcmul", torch.addcmul, lambda: (X(), Y(), Y()), 2 * N),  # a + t1*t2
    case("addcmul value", lambda a, b, c: torch.addcmul(a, b, c, value=0.5), lambda: (X(), Y(), Y()), 3 * N),
    case("addcdiv", torch.addcdiv, lambda: (X(), Y(), Y()), 2 * N),  # a + t1/t2
    case("addcdiv value", lambda a, b, c: torch.addcdiv(a, b, c, value=-1), lambda: (X(), Y(), Y()), 3 * N),
    case("addcmul broadcast", torch.addcmul, lambda: (Y(), Y(), X()), 2 * N),  # result is (2, 3, 4)
    case("lerp scalar", lambda a, b: torch.lerp(a, b, 0.3), lambda: (X(), Y()), 3 * N),  # a + w*(b-a)
    case("lerp tensor", torch.lerp, lambda: (X(), Y(), Y()), 3 * N),
    # clamps: one saturation per element, one bound or two
    case("clamp(0,1)", lambda a: a.clamp(0, 1), lambda: (X(),), N),
    case("clamp(min)", lambda a: a.clamp(min=0), lambda: (X(),), N),
    case("clamp(max)", lambda a: a.clamp(max=1), lambda: (X(),), N),
    case("clamp tensors", lambda a, lo, hi: a.clamp(lo, hi), lambda: (X(), Y(), Y()), N),
    case("clamp_min", lambda a: torch.clamp_min(a, 0), lambda: (X(),), N),
    case("clamp_max", lambda a: torch.clamp_max(a, 0), lambda: (X(),), N),
    case("clip", lambda a: torch.clip(a, -1, 1), lambda: (X(),), N),
    case("clamp int", lambda a: a.clamp(0, 3), lambda: (I(),), 0),
    # selection: no arithmetic
    case("where", torch.where, lambda: (B(), X(), Y()), 0),
    case("masked_fill", lambda a, m: a.masked_fill(m, 0.0), lambda: (X(), B()), 0),
    case("masked_fill tensor value", lambda a, m, v: a.masked_fill(m, v), lambda: (X(), B(), torch.tensor(1.0)), 0),
    case("masked_fill_", lambda a, m: a.masked_fill_(m, 0.0), lambda: (X(), B()), 0),
    # comparison-built mask then selection: only the comparison counts
    case("relu by hand", lambda a: torch.where(a > 0, a, a * 0.1), lambda: (X(),), 2 * N),  # gt + mul
    # the Python scalar becomes a tensor (scalar_tensor, free) before the selection
    case("where(mask, a, 0.)", lambda m, a: torch.where(m, a, 0.0), lambda: (B(), X()), 0),
    # composites: the sum of what they dispatch
    # float_power computes in float64: _to_copy (free) + pow
    case("float_power", lambda a: torch.float_power(a, 2), lambda: (X(),), N),
    # isclose(a, b) = eq(a, b) | (isfinite(|a-b|) & |a-b| <= atol + |rtol*b|):
    # eq, mul, abs, add, sub, abs, [isfinite: abs, ne(inf), eq, bool mul (0)], le,
    # bool and/or (0) -> 10 float ops on (2, 3, 4)
    case("isclose", torch.isclose, lambda: (X(), X()), 10 * N),
    case("isfinite", torch.isfinite, lambda: (X(),), 3 * N),  # abs, ne(inf), eq(a, a); bool mul 0
    # ndtr(x) = (1 + erf(x/sqrt 2)) / 2 as mul, erf, add, mul
    case("special.ndtr", torch.special.ndtr, lambda: (X(),), 4 * N),
]


@pytest.mark.parametrize("fn, inputs, flops", FUNCTIONS)
def test_functions(fn, inputs, flops):
    assert measure_cpu_meta(fn, *inputs()) == (0, flops)


# -- in-place and out= forms ---------------------------------------------------------------------
INPLACE_AND_OUT = [
    case("add_", lambda a, b: a.add_(b), lambda: (X(), Y()), N),
    case("add_ alpha", lambda a, b: a.add_(b, alpha=-0.1), lambda: (X(), Y()), 2 * N),  # SGD step
    case("sub_", lambda a, b: a.sub_(b), lambda: (X(), Y()), N),
    case("mul_ scalar", lambda a: a.mul_(0.9), lambda: (X(),), N),
    case("div_", lambda a, b: a.div_(b), lambda: (X(), Y()), N),
    case("div_ floor", lambda a, b: a.div_(b, rounding_mode="floor"), lambda: (X(), Y()), N),
    case("pow_", lambda a: a.pow_(2), lambda: (X(),), N),
    case("exp_", lambda a: a.exp_(), lambda: (X(),), N),
    case("sqrt_", lambda a: a.sqrt_(), lambda: (X(),), N),
    case("neg_", lambda a: a.neg_(), lambda: (X(),), N),
    case("abs_", lambda a: a.abs_(), lambda: (X(),), N),
    case("tanh_", lambda a: a.tanh_(), lambda: (X(),), N),
    case("clamp_", lambda a: a.clamp_(0, 1), lambda: (X(),), N),
    case("clamp_min_", lambda a: a.clamp_min_(0), lambda: (X(),), N),
    case("eq_", lambda a, b: a.eq_(b), lambda: (X(), Y()), N),
    case("addcmul_", lambda a, b: a.addcmul_(b, b, value=0.001), lambda: (X(), Y()), 3 * N),  # Adam v
    case("addcdiv_", lambda a, b, c: a.addcdiv_(b, c, value=-0.01), lambda: (X(), X(), X()), 3 * N),
    case("lerp_", lambda a, b: a.lerp_(b, 0.1), lambda: (X(), X()), 3 * N),  # Adam m
    case("add_ int", lambda a: a.add_(1), lambda: (I(),), 0),
    case("add out=", lambda a, b, o: torch.add(a, b, out=o), lambda: (X(), Y(), torch.empty(2, 3, 4)), N),
    case("add out= alpha", lambda a, b, o: torch.add(a, b, alpha=2, out=o), lambda: (X(), Y(), torch.empty(2, 3, 4)),
         2 * N),
    case("mul out=", lambda a, b, o: torch.mul(a, b, out=o), lambda: (X(), Y(), torch.empty(2, 3, 4)), N),
    case("exp out=", lambda a, o: torch.exp(a, out=o), lambda: (X(), torch.empty(2, 3, 4)), N),
    case("lerp out=", lambda a, b, o: torch.lerp(a, b, 0.5, out=o), lambda: (X(), Y(), torch.empty(2, 3, 4)), 3 * N),
    case("eq out=", lambda a, b, o: torch.eq(a, b, out=o), lambda: (X(), Y(), torch.empty(2, 3, 4, dtype=torch.bool)),
         N),
    case("clamp out=", lambda a, o: torch.clamp(a, 0, 1, out=o), lambda: (X(), torch.empty(2, 3, 4)), N),
    # the ldexp unit's other entry points (see test_ldexp_is_one_unit)
    case("ldexp method", lambda a, b: a.ldexp(b), lambda: (X(), Y()), N),
    case("ldexp_", lambda a, b: a.ldexp_(b), lambda: (X(), Y()), N),
    case("torch.ldexp_", torch.ldexp_, lambda: (X(), Y()), N),
    case("ldexp out=", lambda a, b, o: torch.ldexp(a, b, out=o), lambda: (X(), Y(), torch.empty(2, 3, 4)), N),
]


@pytest.mark.parametrize("fn, inputs, flops", INPLACE_AND_OUT)
def test_inplace_and_out_forms(fn, inputs, flops):
    assert measure_cpu_meta(fn, *inputs()) == (0, flops)


# -- ldexp: a unit, because torch 2.9 decomposes it ------------------------------------------------
def test_ldexp_is_one_unit():
    """2.9 runs ``self * 2.0 ** other`` (pow on Y's M elements + mul on N: M + N), later
    torches one ldexp kernel (N): counted whole, it is N everywhere."""
    assert ops_of(torch.ldexp, X(), Y()) == {"ldexp": (1, 0, N)}


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("grads, flops", [
    ((True, False), M + N),  # self: g * 2**other, a pow on other's M elements and a mul on N
    ((False, True), 3 * N),  # other: g * result * ln 2 (2N), summed down to its (3, 4) shape (N)
    ((True, True), M + 4 * N),
])
def test_ldexp_backward(device, grads, flops):
    """What the later kernel's derivative runs (2.9 reuses its forward's 2**other instead)."""
    x, e = X().requires_grad_(grads[0]), Y().requires_grad_(grads[1])
    (macs, backward_flops), ops = layer_backward(device, torch.ldexp, x, e)
    assert (macs, backward_flops) == (0, flops)
    assert ops == {"ldexp.backward": (1, 0, flops)}


# -- _foreach_* (multi-tensor optimizer ops): the per-tensor costs, summed -------------------------
def L():
    return [torch.randn(3, 4), torch.randn(5)]


K = 3 * 4 + 5  # elements over the list

FOREACH = [
    case("_foreach_add", torch._foreach_add, lambda: (L(), L()), K),
    case("_foreach_add_ alpha", lambda a, b: torch._foreach_add_(a, b, alpha=2), lambda: (L(), L()), 2 * K),
    case("_foreach_add scalar", lambda a: torch._foreach_add(a, 1.0), lambda: (L(),), K),
    case("_foreach_mul_ scalar", lambda a: torch._foreach_mul_(a, 0.9), lambda: (L(),), K),
    case("_foreach_mul_ scalars", lambda a: torch._foreach_mul_(a, [0.9, 0.8]), lambda: (L(),), K),
    case("_foreach_sqrt", torch._foreach_sqrt, lambda: (L(),), K),
    case("_foreach_sqrt_", torch._foreach_sqrt_, lambda: (L(),), K),
    case("_foreach_pow scalar base", lambda a: torch._foreach_pow(2.0, a), lambda: (L(),), K),
    case("_foreach_maximum_", torch._foreach_maximum_, lambda: (L(), L()), K),
    case("_foreach_lerp_", lambda a, b: torch._foreach_lerp_(a, b, 0.1), lambda: (L(), L()), 3 * K),
    case("_foreach_addcmul_ value", lambda a, b: torch._foreach_addcmul_(a, b, b, value=0.1), lambda: (L(), L()),
         3 * K),
    # per-tensor scalars: value 1 for the (3, 4) tensor (2 per element), 0.5 for the (5,) one (3)
    case("_foreach_addcdiv_ scalars", lambda a, b: torch._foreach_addcdiv_(a, b, b, [1.0, 0.5]), lambda: (L(), L()),
         2 * 12 + 3 * 5),
    case("_foreach_sigmoid", torch._foreach_sigmoid, lambda: (L(),), K),
]


@pytest.mark.parametrize("fn, inputs, flops", FOREACH)
def test_foreach(fn, inputs, flops):
    assert measure_cpu_meta(fn, *inputs()) == (0, flops)


# -- what is dispatched, and what is not counted ---------------------------------------------------
def test_two_over_a_is_two_ops():
    """``2 / a`` is not one division: Python's reflected ``__rtruediv__`` runs reciprocal then mul."""
    assert ops_of(lambda a: 2 / a, X()) == {"aten.reciprocal": (1, 0, N), "aten.mul": (1, 0, N)}


def test_equal_compares_every_element_on_cpu():
    # torch.equal has no meta kernel, so this one is CPU only; different shapes compare nothing
    assert measure_on("cpu", torch.equal, X(), X()) == (0, N)
    assert measure_on("cpu", torch.equal, X(), Y()) == (0, 0)
    assert measure_on("cpu", torch.equal, I(), I()) == (0, 0)


def test_allclose_costs_its_isclose_on_cpu():
    """allclose is one kernel on CPU (and has no meta kernel: it ends in .item()). It costs
    the isclose it runs: eq on the broadcast (2, 3, 4); atol + |rtol*b| on b's elements
    (mul, abs, add); sub, abs, isfinite (abs, ne, eq), le on the broadcast."""
    assert measure_on("cpu", torch.allclose, X(), Y()) == (0, 7 * N + 3 * M)
    # equal_nan adds isnan(a) and isnan(b)
    assert measure_on("cpu", lambda a, b: torch.allclose(a, b, equal_nan=True), X(), Y()) == (0, 7 * N + 3 * M + N + M)
    # no tolerance: eq only
    assert measure_on("cpu", lambda a, b: torch.allclose(a, b, rtol=0, atol=0), X(), Y()) == (0, N)
    # integers: eq is free; the tolerance part is computed on float copies
    assert measure_on("cpu", torch.allclose, I(), I()) == (0, 3 * N + 6 * N)


def test_allclose_matches_the_isclose_it_runs():
    """Cross-check of the allclose formula against isclose counted op by op (same shapes)."""
    assert measure_on("cpu", torch.allclose, X(), Y()) == measure_on("meta", torch.isclose, X(), Y())


def test_unknown_elementwise_op_is_reported_not_zero():
    """The tests can fail: drop one formula and the op is reported unsupported."""
    registry = REGISTRY.copy()
    registry.unregister("aten::hypot")
    with pytest.warns(flopsight.UnsupportedOpWarning, match="hypot"):
        with flopsight.Profiler(registry=registry) as prof:
            torch.hypot(X(), Y())
    assert prof.result.total.forward.flops == 0
    assert "aten.hypot" in prof.result.unsupported_ops
