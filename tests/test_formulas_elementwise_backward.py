"""Elementwise ops in backward, and optimizer steps.

Backward: autograd differentiates elementwise ops into elementwise ops (``a * b`` into two
``mul``, ``exp`` into a ``mul``...), counted by the forward formulas; only ``tanh`` and
``logit`` have backward kernels (2 per element). Each derivation below follows the op's
formula in PyTorch's ``derivatives.yaml``; CPU and meta count the same.

Optimizer steps: the single-tensor, foreach and fused implementations of an optimizer cost
the same per parameter element; AdamW's is derived by hand from the ops torch runs.
"""

from __future__ import annotations

import pytest
import torch
from helpers import formula_of, layer_backward, meta
from torch import nn

import flopsight
from flopsight.formulas import Cost
from flopsight.formulas.elementwise import ADAMW_FLOPS_PER_ELEMENT

aten = torch.ops.aten

SHAPE = (4, 6, 5)
N = 4 * 6 * 5


def X():
    return torch.randn(SHAPE, requires_grad=True)


def C():  # a constant operand: needs no gradient
    return torch.randn(SHAPE)


CASES = [
    # (id, function, inputs, backward FLOPs)
    # y * y: g * y for each operand (2) and the two gradients of y added (1)
    ("mul self", lambda y: y * y, lambda: (X(),), 3 * N),
    ("mul const", lambda y, c: y * c, lambda: (X(), C()), N),  # g * c
    ("div const", lambda y, c: y / c, lambda: (X(), C()), N),  # g / c
    ("add self", lambda y: y + y, lambda: (X(),), N),  # add passes g through; y's two gradients added
    ("add broadcast const", lambda y, c: y + c, lambda: (X(), torch.randn(5)), 0),  # g passes through
    # sub(y, y, alpha=2): g for self, -g * 2 for other (neg, mul), the two added
    ("sub alpha self", lambda y: torch.sub(y, y, alpha=2), lambda: (X(),), 3 * N),
    ("where", lambda y: torch.where(y > 0, y, 0.0), lambda: (X(),), 0),  # where(mask, g, 0): selection
    ("masked_fill", lambda y, c: y.masked_fill(c > 0, 0.0), lambda: (X(), C()), 0),
    # pow(y, 3): g * (3 * y.pow(2)): pow, mul, mul
    ("pow", lambda y: y.pow(3), lambda: (X(),), 3 * N),
    ("exp", lambda y: y.exp(), lambda: (X(),), N),  # g * result
    ("abs", lambda y: y.abs(), lambda: (X(),), 2 * N),  # g * sgn(y)
    # sqrt(|y|): g / (2 * result) (mul, div) and abs's g * sgn(y) (2)
    ("sqrt abs", lambda y: y.abs().sqrt(), lambda: (X(),), 4 * N),
    # rsqrt(|y| + 1): -0.5 * g * result^3 (pow, mul, mul); the + 1 passes g; abs (2)
    ("rsqrt", lambda y: (y.abs() + 1).rsqrt(), lambda: (X(),), 5 * N),
    # clamp(y, -1, 1): where((y >= -1) & (y <= 1), g, 0): two compares, bool and, selection
    ("clamp", lambda y: y.clamp(-1, 1), lambda: (X(),), 2 * N),
    ("lerp", lambda y, c: y.lerp(c, 0.3), lambda: (X(), C()), N),  # g * (1 - 0.3)
    # c + y * y (addcmul): g * y * 1 for each tensor operand (2 + 2), the two gradients added
    ("addcmul", lambda y, c: c.addcmul(y, y), lambda: (X(), C()), 5 * N),
    ("tanh", lambda y: y.tanh(), lambda: (X(),), 2 * N),  # tanh_backward kernel
    ("logit", lambda y: y.sigmoid().logit(), lambda: (X(),), 2 * N + 2 * N),  # logit_backward + sigmoid_backward
    ("view + transpose", lambda y: y.view(4, 30).t().contiguous(), lambda: (X(),), 0),
]


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("name, fn, inputs, flops", CASES, ids=[c[0] for c in CASES])
def test_elementwise_backward(device, name, fn, inputs, flops):
    total, ops = layer_backward(device, fn, *inputs())
    assert total == (0, flops)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_tanh_backward_kernel(device):
    _, ops = layer_backward(device, nn.Tanh(), X())
    assert ops["aten.tanh_backward"] == (1, 0, 2 * N)


def test_math_backward_formulas():
    g = meta(3, 4)
    assert formula_of(aten.tanh_backward)(meta(3, 4), grad_output=g, output=meta(3, 4)) == Cost(0, 24)
    assert formula_of(aten.logit_backward)(meta(3, 4), grad_output=g, self=meta(3, 4), eps=1e-6) == Cost(0, 24)
    i = g.long()
    assert formula_of(aten.tanh_backward)(meta(3, 4, dtype=torch.int64), grad_output=i, output=i) == Cost(0, 0)


# -- optimizer steps ------------------------------------------------------------------------------
def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))


P = (4 * 3 + 3) + (3 * 2 + 2)  # parameter elements: 23
T = 4  # parameter tensors (2 weights, 2 biases)


def _train_step(make_optimizer, device="cpu", steps=2):
    """Run ``steps`` training steps; profile the last one. Returns the result."""
    model = _model().to(device)
    opt = make_optimizer(model.parameters())
    for _ in range(steps):
        with flopsight.Profiler(model, optimizer=opt) as prof:
            model(torch.randn(2, 4, device=device)).sum().backward()
            opt.step()
        opt.zero_grad()
    return prof.result


def _step_ops(result):
    """The step's ops that do floating-point work: name -> (calls, FLOPs)."""
    return {name: (o.calls, o.flops) for name, o in result.ops("step").items() if o.flops}


# AdamW (lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01), per parameter element,
# derived from the ops torch's implementation runs (each counted by its elementwise formula):
#   param.mul_(1 - lr * weight_decay)                    1   (decoupled weight decay)
#   exp_avg.lerp_(grad, 1 - beta1)                       3   (lerp = sub, mul, add)
#   exp_avg_sq.mul_(beta2)                               1
#   exp_avg_sq.addcmul_(grad, grad, value=1 - beta2)     3   (product, scale, add)
#   denom = exp_avg_sq.sqrt()                            1
#   denom = denom / bias_correction2_sqrt                1   (a Python float)
#   denom.add_(eps)                                      1
#   param.addcdiv_(exp_avg, denom, value=-step_size)     3   (quotient, scale, add)
#                                                       --
#                                                       14
# plus, per parameter tensor, the step counter (a one-element float tensor) += 1: 1.
# The bias corrections 1 - beta^step are Python floats (capturable=False): no tensor op.
ADAMW_PER_ELEMENT = 1 + 3 + 1 + 3 + 1 + 1 + 1 + 3


def test_adamw_constant_is_derived_by_hand():
    assert ADAMW_PER_ELEMENT == ADAMW_FLOPS_PER_ELEMENT == 14


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_adamw_single_tensor_step(device):
    result = _train_step(lambda p: torch.optim.AdamW(p, lr=1e-3, foreach=False), device)
    assert result.step.flops == ADAMW_PER_ELEMENT * P + T
    assert _step_ops(result) == {
        "aten.mul_": (2 * T, 2 * P),  # weight decay, beta2
        "aten.lerp_": (T, 3 * P),
        "aten.addcmul_": (T, 3 * P),
        "aten.sqrt": (T, P),
        "aten.div": (T, P),
        "aten.add_": (2 * T, P + T),  # + eps (per element), step += 1 (per tensor)
        "aten.addcdiv_": (T, 3 * P),
    }


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_adamw_foreach_step(device):
    result = _train_step(lambda p: torch.optim.AdamW(p, lr=1e-3, foreach=True), device)
    assert result.step.flops == ADAMW_PER_ELEMENT * P + T
    assert _step_ops(result) == {
        "aten._foreach_mul_": (2, 2 * P),
        "aten._foreach_lerp_": (1, 3 * P),
        "aten._foreach_addcmul_": (1, 3 * P),
        "aten._foreach_sqrt": (1, P),
        "aten._foreach_div_": (1, P),
        "aten._foreach_add_": (2, P + T),
        "aten._foreach_addcdiv_": (1, 3 * P),
    }


def test_adamw_fused_step():
    """The fused kernel (CPU and CUDA only) costs what the foreach ops cost; the step
    counters are incremented outside it."""
    result = _train_step(lambda p: torch.optim.AdamW(p, lr=1e-3, fused=True))
    assert _step_ops(result) == {"aten._fused_adamw_": (1, ADAMW_PER_ELEMENT * P), "aten._foreach_add_": (1, T)}


# (id, optimizer, FLOPs per parameter element of a step after the first, of the first)
OPTIMIZERS = [
    # Adam: AdamW's 14 without the decoupled decay (13); L2 decay grad + wd * p adds 2
    ("adam", lambda **kw: torch.optim.Adam(lr=1e-3, **kw), 13, 13, True),
    ("adam-l2", lambda **kw: torch.optim.Adam(lr=1e-3, weight_decay=0.1, **kw), 15, 15, True),
    # amsgrad: maximum_(max_exp_avg_sq, exp_avg_sq) 1; maximize: grad = -grad 1
    ("adamw-amsgrad", lambda **kw: torch.optim.AdamW(lr=1e-3, amsgrad=True, **kw), 15, 15, True),
    ("adamw-maximize", lambda **kw: torch.optim.AdamW(lr=1e-3, maximize=True, **kw), 15, 15, True),
    # SGD: p.add_(g, alpha=-lr) 2
    ("sgd", lambda **kw: torch.optim.SGD(lr=0.1, **kw), 2, 2, False),
    # momentum: buf.mul_(0.9).add_(g) 2, then the update 2; the first step copies g (0)
    ("sgd-momentum", lambda **kw: torch.optim.SGD(lr=0.1, momentum=0.9, **kw), 4, 2, False),
    # dampening != 0: add_(g, alpha=1 - d) is 2
    ("sgd-dampening", lambda **kw: torch.optim.SGD(lr=0.1, momentum=0.9, dampening=0.1, **kw), 5, 2, False),
    # maximize 1 + weight decay 2 + momentum 2 (first step 0) + nesterov g + 0.9 * buf 2 + update 2
    ("sgd-nesterov", lambda **kw: torch.optim.SGD(lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4,
                                                  maximize=True, **kw), 9, 7, False),
    # Adagrad: addcmul_(g, g) 2, sqrt 1, + eps 1, g * -clr 1, addcdiv_ 2
    ("adagrad", lambda **kw: torch.optim.Adagrad(**kw), 7, 7, True),
    ("adagrad-decay-maximize", lambda **kw: torch.optim.Adagrad(weight_decay=0.1, maximize=True, **kw), 10, 10, True),
]


@pytest.mark.parametrize("impl", ["single", "foreach", "fused"])
@pytest.mark.parametrize("name, make, per_element, first, counts_steps", OPTIMIZERS, ids=[o[0] for o in OPTIMIZERS])
def test_optimizer_implementations_cost_the_same(impl, name, make, per_element, first, counts_steps):
    kw = {"fused": True} if impl == "fused" else {"foreach": impl == "foreach"}
    steps = T if counts_steps else 0  # Adam and Adagrad count steps in a float tensor per parameter
    later = _train_step(lambda p: make(params=p, **kw), steps=2)
    assert later.step.flops == per_element * P + steps
    assert later.unsupported_ops == {}
    once = _train_step(lambda p: make(params=p, **kw), steps=1)
    assert once.step.flops == first * P + steps


@pytest.mark.parametrize("name, make, per_element", [o[:3] for o in OPTIMIZERS[:4]], ids=[o[0] for o in OPTIMIZERS[:4]])
def test_optimizer_step_on_meta(name, make, per_element):
    result = _train_step(lambda p: make(params=p, foreach=True), device="meta")
    assert result.step.flops == per_element * P + T


@pytest.mark.parametrize("foreach", [True, False])
def test_clip_grad_norm(foreach):
    """clip_grad_norm_(max_norm=1.0), p=2: each gradient's norm (square, add per element;
    sqrt per tensor: 2P + T), the norm of the T norms (2T + 1), clip_coef = max_norm /
    (total + 1e-6) (add, reciprocal, mul: 3), clamp (1), every gradient times it (P)."""
    model = _model()
    model(torch.randn(2, 4)).sum().backward()
    with flopsight.Profiler() as prof:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=foreach)
    assert prof.result.total.forward.flops == (2 * P + T) + (2 * T + 1) + 3 + 1 + P
    assert prof.result.unsupported_ops == {}


def test_grad_scaler_kernels():
    """GradScaler: unscale_ multiplies each gradient by 1/scale and checks it is finite
    (2 per element); update() tests found_inf and rescales the one-element scale (2)."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    with flopsight.Profiler(optimizer=opt) as prof:  # everything: the scaler's work is not the model's
        scaler.scale(model(torch.randn(2, 4)).sum()).backward()
        scaler.step(opt)
        scaler.update()
    ops = {name: (o.calls, o.flops) for name, o in prof.result.ops("forward").items()}
    assert ops["aten._amp_foreach_non_finite_check_and_unscale_"] == (1, 2 * P)
    assert ops["aten._amp_update_scale_"] == (1, 2)
    assert prof.result.step.flops == 2 * P  # SGD's update
    assert prof.result.unsupported_ops == {}


def test_zero_grad_without_set_to_none_is_free():
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), foreach=True)
    model(torch.randn(2, 4)).sum().backward()
    with flopsight.Profiler(model, optimizer=opt) as prof:
        opt.zero_grad(set_to_none=False)  # _foreach_zero_
    assert prof.result.total.forward.flops == 0 and prof.result.unsupported_ops == {}


def test_fused_formulas_called_directly():
    """The fused kernels with settings the tests above do not reach (grad_scale, tensors on
    meta as on a GPU)."""
    params = [meta(3, 4), meta(5)]
    adamw = formula_of(aten._fused_adamw_)
    assert adamw(None, self=params, grads=params, exp_avgs=params, exp_avg_sqs=params, max_exp_avg_sqs=[],
                 state_steps=[meta(1)] * 2, lr=1e-3, beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8,
                 amsgrad=False, maximize=False, grad_scale=meta(1), found_inf=meta(1)) == Cost(0, 14 * 17)
    sgd = formula_of(aten._fused_sgd_)
    assert sgd(None, self=params, grads=params, momentum_buffer_list=[], weight_decay=0.0, momentum=0.0, lr=0.1,
               dampening=0.0, nesterov=False, maximize=False, is_first_step=False) == Cost(0, 34)
    half = [meta(3, 4, dtype=torch.int64)]
    adagrad = formula_of(aten._fused_adagrad_)
    assert adagrad(None, self=half, grads=half, state_sums=half, state_steps=half, lr=0.1, lr_decay=0.0,
                   weight_decay=0.0, eps=1e-10, maximize=False) == Cost(0, 0)
