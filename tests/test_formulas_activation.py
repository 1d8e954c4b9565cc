"""Activations and softmax: hand-derived FLOPs, the same on CPU and meta.

Every fused activation kernel costs 1 FLOP per output element (DeepSpeed's constant for
relu/gelu/silu/elu/leaky_relu/prelu/relu6, applied to every kernel), softmax and
log_softmax 1 per input element. Activations written in Python cost the ops they run.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import measure_cpu_meta, ops_of
from torch import nn

N = 2 * 3 * 4  # elements of X()


def X():
    return torch.randn(2, 3, 4)


def X4():  # (batch, channels, h, w) for PReLU / Softmax2d
    return torch.randn(2, 3, 4, 5)


N4 = 2 * 3 * 4 * 5


def case(name, fn, inputs, flops):
    return pytest.param(fn, inputs, flops, id=name)


def x():
    return (X(),)


KERNELS = [
    # nn modules: one kernel, 1 FLOP per element
    case("nn.ReLU", nn.ReLU(), x, N),
    case("nn.ReLU inplace", nn.ReLU(inplace=True), x, N),
    case("nn.ReLU6", nn.ReLU6(), x, N),  # hardtanh(0, 6)
    case("nn.Hardtanh", nn.Hardtanh(-2, 2), x, N),
    case("nn.LeakyReLU", nn.LeakyReLU(0.2), x, N),
    case("nn.ELU", nn.ELU(), x, N),
    case("nn.SELU", nn.SELU(), x, N),  # elu with scale
    case("nn.CELU", nn.CELU(2.0), x, N),
    case("nn.GELU", nn.GELU(), x, N),
    case("nn.GELU tanh", nn.GELU(approximate="tanh"), x, N),  # same kernel, same 1 (as DeepSpeed)
    case("nn.SiLU", nn.SiLU(), x, N),
    case("nn.Mish", nn.Mish(), x, N),
    case("nn.Softplus", nn.Softplus(beta=2, threshold=10), x, N),
    case("nn.Sigmoid", nn.Sigmoid(), x, N),
    case("nn.Tanh", nn.Tanh(), x, N),  # aten.tanh, counted with the math functions
    case("nn.Hardsigmoid", nn.Hardsigmoid(), x, N),
    case("nn.Hardswish", nn.Hardswish(), x, N),
    case("nn.Hardshrink", nn.Hardshrink(), x, N),
    case("nn.Softshrink", nn.Softshrink(), x, N),
    case("nn.Threshold", nn.Threshold(0.1, 20.0), x, N),
    case("nn.LogSigmoid", nn.LogSigmoid(), x, N),  # log_sigmoid_forward: the output, not the buffer
    case("nn.GLU", nn.GLU(dim=-1), x, 2 * 3 * 2),  # halves the last dim: (2, 3, 2) outputs
    case("nn.GLU dim=1", nn.GLU(dim=1), lambda: (torch.randn(2, 6, 5),), 2 * 3 * 5),
    # functional forms, in-place included
    case("F.relu", F.relu, x, N),
    case("torch.relu", torch.relu, x, N),
    case("F.relu inplace", lambda a: F.relu(a, inplace=True), x, N),
    case("relu_", torch.relu_, x, N),
    case("F.relu6 inplace", lambda a: F.relu6(a, inplace=True), x, N),
    case("F.hardtanh", lambda a: F.hardtanh(a, -1, 1), x, N),
    case("F.leaky_relu inplace", lambda a: F.leaky_relu(a, 0.2, inplace=True), x, N),
    case("F.elu inplace", lambda a: F.elu(a, inplace=True), x, N),
    case("F.selu inplace", lambda a: F.selu(a, inplace=True), x, N),
    case("F.celu inplace", lambda a: F.celu(a, inplace=True), x, N),
    case("F.gelu", F.gelu, x, N),
    case("F.gelu tanh", lambda a: F.gelu(a, approximate="tanh"), x, N),
    case("F.silu inplace", lambda a: F.silu(a, inplace=True), x, N),
    case("F.mish inplace", lambda a: F.mish(a, inplace=True), x, N),
    case("F.softplus", F.softplus, x, N),
    case("torch.sigmoid", torch.sigmoid, x, N),
    case("sigmoid_", lambda a: a.sigmoid_(), x, N),
    case("F.hardsigmoid inplace", lambda a: F.hardsigmoid(a, inplace=True), x, N),
    case("F.hardswish inplace", lambda a: F.hardswish(a, inplace=True), x, N),
    case("F.threshold inplace", lambda a: F.threshold(a, 0.1, 2.0, inplace=True), x, N),
    case("F.logsigmoid", F.logsigmoid, x, N),
    case("F.glu", F.glu, x, 2 * 3 * 2),
    # integer input: relu/threshold accept it, and it is not FLOPs
    case("relu int", torch.relu, lambda: (torch.randint(-3, 3, (2, 3, 4)),), 0),
    # softmax family: 1 per input element
    case("nn.Softmax", nn.Softmax(dim=-1), x, N),
    case("nn.Softmax dim=0", nn.Softmax(dim=0), x, N),
    case("nn.LogSoftmax", nn.LogSoftmax(dim=1), x, N),
    case("F.softmax", lambda a: F.softmax(a, -1), x, N),
    case("F.log_softmax", lambda a: F.log_softmax(a, -1), x, N),
    case("Tensor.softmax", lambda a: a.softmax(-1), x, N),
    case("torch.softmax", lambda a: torch.softmax(a, 1), x, N),
    case("nn.Softmax2d", nn.Softmax2d(), lambda: (X4(),), N4),  # softmax over channels
    case("_safe_softmax", lambda a: torch.ops.aten._safe_softmax(a, -1), x, N),  # SDPA math path
    case("F.softmax half", lambda a: F.softmax(a, -1), lambda: (X().half(),), N),
    # softmax in another dtype: _to_copy (free) + _softmax
    case("softmax dtype", lambda a: F.softmax(a, -1, dtype=torch.float64), x, N),
    # PReLU views its weight to (1, C, 1, 1) (free) and runs _prelu_kernel: 1 per element
    case("nn.PReLU(3)", nn.PReLU(3), lambda: (X4(),), N4),
    case("nn.PReLU()", nn.PReLU(), lambda: (X4(),), N4),
    case("F.prelu", lambda a, w: F.prelu(a, w), lambda: (X4(), torch.full((3,), 0.25)), N4),
    # RReLU allocates its noise buffer (empty_like, free) and runs rrelu_with_noise
    case("nn.RReLU eval", nn.RReLU().eval(), x, N),
    case("nn.RReLU train", nn.RReLU().train(), x, N),
    # Python-level compositions: the sum of the ops they run
    case("nn.Softsign", nn.Softsign(), x, 3 * N),  # x / (1 + |x|): abs, add, div
    case("nn.Tanhshrink", nn.Tanhshrink(), x, 2 * N),  # x - tanh(x): tanh, sub
    case("nn.Softmin", nn.Softmin(dim=-1), x, 2 * N),  # softmax(-x): neg, softmax
]


@pytest.mark.parametrize("fn, inputs, flops", KERNELS)
def test_activation(fn, inputs, flops):
    assert measure_cpu_meta(fn, *inputs()) == (0, flops)


# -- Hugging Face activations ---------------------------------------------------------------------
transformers_activations = pytest.importorskip("transformers.activations")
ACT2FN = transformers_activations.ACT2FN

HF = [
    # kernels (GELUActivation binds F.gelu at construction: invisible to patching, seen at dispatch)
    ("gelu", transformers_activations.GELUActivation, N),
    ("gelu_pytorch_tanh", transformers_activations.GELUTanh, N),
    ("silu", transformers_activations.SiLUActivation, N),
    ("mish", transformers_activations.MishActivation, N),
    ("relu", nn.ReLU, N),
    # 0.5*x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3))):
    # mul(0.5), pow, mul(0.044715), add, mul(sqrt(2/pi)), tanh, add(1), mul = 8 ops
    ("gelu_new", transformers_activations.NewGELUActivation, 8 * N),
    ("gelu_accurate", transformers_activations.AccurateGELUActivation, 8 * N),  # same formula
    # 0.5*x * (1 + tanh(x*0.7978845608 * (1 + 0.044715*x*x))):
    # mul(0.5), mul(0.798), mul(0.044715), mul(x), add(1), mul, tanh, add(1), mul = 9 ops
    ("gelu_fast", transformers_activations.FastGELUActivation, 9 * N),
    ("quick_gelu", transformers_activations.QuickGELUActivation, 3 * N),  # x * sigmoid(1.702*x)
    ("gelu_10", None, 2 * N),  # gelu kernel + clip
    ("gelu_python", None, 5 * N),  # x*0.5 * (1 + erf(x/sqrt 2)): mul, div, erf, add, mul
    ("relu2", None, 2 * N),  # relu, then square (pow)
    ("laplace", None, 5 * N),  # 0.5 * (1 + erf((x - mu) / (sigma*sqrt 2))): sub, div, erf, add, mul
    ("sqrtsoftplus", None, 2 * N),  # softplus, sqrt
]


@pytest.mark.parametrize("name, cls, flops", HF, ids=[h[0] for h in HF])
def test_hf_activation(name, cls, flops):
    act = ACT2FN[name]
    if cls is not None:
        assert type(act) is cls
    assert measure_cpu_meta(act, *x()) == (0, flops)


def test_hf_new_gelu_op_by_op():
    """The hand-derived cost of NewGELU, op by op, as dispatched (all on (2, 3, 4))."""
    ops = ops_of(transformers_activations.NewGELUActivation(), X())
    assert ops == {
        "aten.mul": (4, 0, 4 * N),  # 0.5*x, 0.044715*x^3, sqrt(2/pi)*(...), final product
        "aten.pow": (1, 0, N),  # x^3
        "aten.add": (2, 0, 2 * N),  # x + ..., 1 + tanh
        "aten.tanh": (1, 0, N),
    }
    assert math.isclose(math.sqrt(2.0 / math.pi), 0.7978845608, rel_tol=1e-9)


def test_hf_fast_gelu_op_by_op():
    ops = ops_of(transformers_activations.FastGELUActivation(), X())
    assert ops == {"aten.mul": (6, 0, 6 * N), "aten.add": (2, 0, 2 * N), "aten.tanh": (1, 0, N)}


def test_mlp_with_gelu_counts_linear_and_activation():
    """A transformer MLP: the activation adds 1 per hidden element to the two products."""
    def mlp():
        return nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 16))

    batch = 8
    macs = batch * 16 * 64 + batch * 64 * 16
    bias = batch * 64 + batch * 16
    gelu = batch * 64
    assert measure_cpu_meta(mlp(), torch.randn(batch, 16)) == (macs, 2 * macs + bias + gelu)
