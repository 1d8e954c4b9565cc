"""Random module graphs for the property tests, each with its analytic cost.

A graph is drawn as plain data (tuples, so Hypothesis shrinks and prints it), then
:func:`build` turns it into a module and the MACs, FLOPs and parameters it must count. The
expected numbers are written here from first principles, layer by layer, with the working in
comments; they use none of flopsight's formulas, only the conventions of docs/conventions.md
(2 FLOPs per MAC, 1 per bias element, the per-element constants of norms and activations).

The model: an optional convolution stem on ``(B, C, H, W)``, flattened to tokens
``(B, H*W, C)`` (free views), then a body of blocks on ``(B, L, D)``. Blocks include
residuals, loops and shape-dependent branches (control flow that runs on meta too), a
``Linear`` shared by two parents, and one bound under two names of the same parent.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from hypothesis import strategies as st
from torch import nn

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU, "sigmoid": nn.Sigmoid}


# -- the modules that carry control flow, sharing and attention --------------------------------------------
class Residual(nn.Module):
    """``x + inner(x)``: the add is this module's own cost."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return x + self.inner(x)


class Repeat(nn.Module):
    """Runs ``inner`` ``times`` times in a Python loop (one module, several calls)."""

    def __init__(self, inner: nn.Module, times: int):
        super().__init__()
        self.inner, self.times = inner, times

    def forward(self, x):
        for _ in range(self.times):
            x = self.inner(x)
        return x


class Branch(nn.Module):
    """``even(x)`` when the last dim is even, else ``odd(x)``: shape-dependent control flow."""

    def __init__(self, even: nn.Module, odd: nn.Module):
        super().__init__()
        self.even, self.odd = even, odd

    def forward(self, x):
        return self.even(x) if x.shape[-1] % 2 == 0 else self.odd(x)


class Use(nn.Module):
    """Calls a module that another parent also holds (the same object under two parents)."""

    def __init__(self, shared: nn.Module):
        super().__init__()
        self.shared = shared

    def forward(self, x):
        return self.shared(x)


class Aliased(nn.Module):
    """One Linear bound under two names of this module, called through each."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.first = linear
        self.second = linear

    def forward(self, x):
        return self.second(self.first(x))


class SelfAttention(nn.Module):
    """Q, K, V and output projections around ``F.scaled_dot_product_attention`` on ``heads`` heads."""

    def __init__(self, dim: int, heads: int, causal: bool):
        super().__init__()
        self.q, self.k, self.v, self.out = (nn.Linear(dim, dim) for _ in range(4))
        self.heads, self.causal = heads, causal

    def forward(self, x):
        b, n, d = x.shape

        def split(t):  # (B, L, D) -> (B, H, L, D/H): views
            return t.view(b, n, self.heads, d // self.heads).transpose(1, 2)

        y = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)),
                                           is_causal=self.causal)
        return self.out(y.transpose(1, 2).reshape(b, n, d))


class SelfMHA(nn.Module):
    """``nn.MultiheadAttention`` on its own input (batch first), its weights returned or not."""

    def __init__(self, dim: int, heads: int, bias: bool, need_weights: bool):
        super().__init__()
        self.mha = nn.MultiheadAttention(dim, heads, bias=bias, batch_first=True)
        self.need_weights = need_weights

    def forward(self, x):
        return self.mha(x, x, x, need_weights=self.need_weights)[0]


class Model(nn.Module):
    def __init__(self, stem: nn.Module | None, body: nn.Module):
        super().__init__()
        if stem is not None:
            self.stem = stem
        self.body = body

    def forward(self, x):
        if hasattr(self, "stem"):
            x = self.stem(x).flatten(2).transpose(1, 2)  # (B, C, H, W) -> (B, H*W, C): free views
        return self.body(x)


# -- the expected cost --------------------------------------------------------------------------------
@dataclasses.dataclass
class Cost:
    macs: int = 0
    flops: int = 0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.macs + other.macs, self.flops + other.flops)

    def __mul__(self, times: int) -> Cost:
        return Cost(self.macs * times, self.flops * times)


@dataclasses.dataclass
class Built:
    """What :func:`build` made: the model, its input, the expected forward cost of each top-level
    block (``stem.i`` / ``body.i``) and of the whole, and the parameter count."""

    model: nn.Module
    input_shape: tuple
    blocks: dict
    total: Cost
    params: int


class _Builder:
    def __init__(self, training: bool):
        self.training = training
        self.params = 0
        self.shared: dict[int, list[nn.Linear]] = {}  # width -> Linear(width, width) built so far

    def _new_params(self, *counts: int) -> None:
        self.params += sum(counts)  # a module built once: its parameters count once however often it runs

    # each layer: (module, output shape, cost); the shape is (B, L, D) or (B, C, H, W)
    def layer(self, spec: tuple, shape: tuple):
        kind, *a = spec
        n = 1
        for s in shape:
            n *= s  # elements of the input
        if kind == "linear":
            (out, bias), (*lead, d) = a, shape
            rows = n // d
            self._new_params(d * out, out if bias else 0)
            m = nn.Linear(d, out, bias=bias)
            if out == d:
                self.shared.setdefault(d, []).append(m)
            # each of the rows*out outputs is a dot product of length d: rows*d*out MACs, 2 FLOPs each,
            # plus one add per output element for the bias
            return m, (*lead, out), Cost(rows * d * out, 2 * rows * d * out + (rows * out if bias else 0))
        if kind == "act":
            return ACTIVATIONS[a[0]](), shape, Cost(0, n)  # 1 FLOP per element
        if kind == "dropout":
            # training with p > 0: one multiply per element by the scaled mask; eval or p == 0: the identity
            return nn.Dropout(a[0]), shape, Cost(0, n if self.training and a[0] > 0 else 0)
        if kind == "layernorm":
            affine, bias = a
            d = shape[-1]
            self._new_params(d if affine else 0, d if affine and bias else 0)
            # mean, subtract, variance, rsqrt-scale: 4 per element; the affine weight (and bias) 1 more
            return nn.LayerNorm(d, elementwise_affine=affine, bias=bias), shape, Cost(0, (5 if affine else 4) * n)
        if kind == "rmsnorm":
            (weight,), d = a, shape[-1]
            self._new_params(d if weight else 0)
            # square, mean, rsqrt-scale: 3 per element; the weight 1 more
            return nn.RMSNorm(d, elementwise_affine=weight), shape, Cost(0, (4 if weight else 3) * n)
        if kind == "sdpa":
            heads, causal = a
            b, seq, d = shape
            self._new_params(4 * (d * d + d))
            e = d // heads
            scores = b * heads * seq * seq  # one score per (batch, head, query, key); causal masks none out
            # 4 projections: b*seq*d*d MACs each, plus a bias add per output element;
            # QK^T: e MACs per score, PV: e MACs per score; scale and softmax 1 FLOP per score each
            macs = 4 * b * seq * d * d + scores * e + scores * e
            return SelfAttention(d, heads, causal), shape, Cost(macs, 2 * macs + 4 * b * seq * d + 2 * scores)
        if kind == "mha":
            heads, bias, need_weights = a
            b, seq, d = shape
            self._new_params(3 * d * d + d * d, 3 * d + d if bias else 0)
            hd, scores = d // heads, b * heads * seq * seq
            # in-projection of q, k, v (3*b*seq*d*d), QK^T and PV (hd MACs per score each), out-projection
            macs = 3 * b * seq * d * d + 2 * scores * hd + b * seq * d * d
            flops = 2 * macs + 2 * scores  # scale and softmax: 1 per score each
            if bias:
                flops += 3 * b * seq * d + b * seq * d  # a bias add per projected element
            if need_weights:
                # the weights averaged over heads: an add per weight (b*heads*seq*seq), a divide per mean (b*seq*seq)
                flops += scores + b * seq * seq
            return SelfMHA(d, heads, bias, need_weights), shape, Cost(macs, flops)
        if kind == "conv":
            out, k, stride, pad, groups, bias = a
            b, c, h, w = shape
            ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
            self._new_params(out * (c // groups) * k * k, out if bias else 0)
            outputs = b * out * ho * wo
            # each output element is a dot product over its group's c/groups channels and the k*k window
            macs = outputs * (c // groups) * k * k
            conv = nn.Conv2d(c, out, k, stride=stride, padding=pad, groups=groups, bias=bias)
            return conv, (b, out, ho, wo), Cost(macs, 2 * macs + (outputs if bias else 0))
        if kind == "batchnorm":
            (affine,), c = a, shape[1]
            self._new_params(2 * c if affine else 0)
            # batch statistics (training): mean, subtract, variance, scale = 4, +1 affine;
            # running statistics (eval): a precomputed scale (and shift) = 1, +1 affine
            per = (5 if affine else 4) if self.training else (2 if affine else 1)
            return nn.BatchNorm2d(c, affine=affine), shape, Cost(0, per * n)
        if kind == "groupnorm":
            groups, affine = a
            c = shape[1]
            self._new_params(2 * c if affine else 0)
            return nn.GroupNorm(groups, c, affine=affine), shape, Cost(0, (5 if affine else 4) * n)
        if kind == "maxpool":
            b, c, h, w = shape
            return nn.MaxPool2d(2), (b, c, h // 2, w // 2), Cost(0, n)  # one comparison per input element
        if kind == "residual":
            inner, out, cost, _ = self.sequence(a[0], shape)
            assert out == shape
            return Residual(inner), shape, cost + Cost(0, n)  # the add: 1 per element
        if kind == "repeat":
            times, inner_spec = a
            inner, _, cost, _ = self.sequence(inner_spec, shape)
            return Repeat(inner, times), shape, cost * times  # built once, run `times` times
        if kind == "branch":
            even, _, even_cost, _ = self.sequence(a[0], shape)
            odd, _, odd_cost, _ = self.sequence(a[1], shape)
            # only the branch taken runs; both hold parameters
            return Branch(even, odd), shape, even_cost if shape[-1] % 2 == 0 else odd_cost
        if kind == "shared":
            d = shape[-1]
            pool = self.shared.get(d)
            if not pool:  # nothing of this width to share yet: a new Linear(d, d) with bias
                return self.layer(("linear", d, True), shape)
            linear = pool[a[0] % len(pool)]
            rows = n // d
            # the Linear's parameters are already counted; the call costs what a Linear(d, d) costs
            bias = rows * d if linear.bias is not None else 0
            return Use(linear), shape, Cost(rows * d * d, 2 * rows * d * d + bias)
        if kind == "aliased":
            d = shape[-1]
            rows = n // d
            self._new_params(d * d + d)
            linear = nn.Linear(d, d)
            # two calls of one Linear(d, d) with bias
            return Aliased(linear), shape, Cost(rows * d * d, 2 * rows * d * d + rows * d) * 2
        raise ValueError(kind)

    def sequence(self, specs: tuple, shape: tuple):
        """An ``nn.Sequential`` of ``specs``, its output shape, its cost and each element's cost."""
        modules, costs = [], []
        for spec in specs:
            m, shape, c = self.layer(spec, shape)
            modules.append(m)
            costs.append(c)
        return nn.Sequential(*modules), shape, sum(costs, Cost()), costs


def build(graph: tuple) -> Built:
    """The model of a drawn ``graph`` (:func:`graphs`) and its expected counts, on the CPU."""
    training, input_shape, stem_specs, body_specs = graph
    torch.manual_seed(0)
    builder = _Builder(training)
    blocks: dict = {}
    shape, stem = input_shape, None
    if stem_specs:
        stem, (b, c, h, w), _, costs = builder.sequence(stem_specs, shape)
        blocks.update({f"stem.{i}": cost for i, cost in enumerate(costs)})
        shape = (b, h * w, c)
    body, _, _, costs = builder.sequence(body_specs, shape)
    blocks.update({f"body.{i}": cost for i, cost in enumerate(costs)})
    model = Model(stem, body).train(training)
    return Built(model, input_shape, blocks, sum(blocks.values(), Cost()), builder.params)


# -- the strategies ---------------------------------------------------------------------------------
def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def _token_layer(draw, shape: tuple, depth: int, top: bool) -> tuple:
    """One body layer for tokens of ``shape`` (B, L, D); below the top level, shape-preserving only."""
    d = shape[-1]
    kinds = ["act", "dropout", "layernorm", "rmsnorm", "sdpa", "mha", "shared", "aliased", "linear"]
    if depth < 2:
        kinds += ["residual", "repeat", "branch"]
    kind = draw(st.sampled_from(kinds))
    if kind == "linear":
        return ("linear", draw(st.integers(1, 12)) if top else d, draw(st.booleans()))
    if kind == "act":
        return ("act", draw(st.sampled_from(sorted(ACTIVATIONS))))
    if kind == "dropout":
        return ("dropout", draw(st.sampled_from([0.0, 0.25])))
    if kind == "layernorm":
        return ("layernorm", draw(st.booleans()), draw(st.booleans()))
    if kind == "rmsnorm":
        return ("rmsnorm", draw(st.booleans()))
    if kind == "sdpa":
        return ("sdpa", draw(st.sampled_from(_divisors(d))), draw(st.booleans()))
    if kind == "mha":
        return ("mha", draw(st.sampled_from(_divisors(d))), draw(st.booleans()), draw(st.booleans()))
    if kind == "shared":
        return ("shared", draw(st.integers(0, 3)))
    if kind == "aliased":
        return ("aliased",)
    inner = lambda: _tokens(draw, shape, depth + 1, top=False, most=2)  # noqa: E731
    if kind == "residual":
        return ("residual", inner())
    if kind == "repeat":
        return ("repeat", draw(st.integers(1, 3)), inner())
    return ("branch", inner(), inner())


def _tokens(draw, shape: tuple, depth: int, top: bool, most: int) -> tuple:
    specs = []
    for _ in range(draw(st.integers(1, most))):
        spec = _token_layer(draw, shape, depth, top)
        if spec[0] == "linear":
            shape = (*shape[:-1], spec[1])
        specs.append(spec)
    return tuple(specs)


def _conv_layer(draw, shape: tuple, training: bool) -> tuple:
    """One stem layer for images of ``shape`` (B, C, H, W), and its output shape."""
    b, c, h, w = shape
    kinds = ["conv", "act", "residual"]
    if h * w > 1:  # group norm's statistics need more than one value per channel
        kinds.append("groupnorm")
    if h >= 2 and w >= 2:
        kinds.append("maxpool")
    if not training or b * h * w > 1:  # batch statistics need more than one value per channel
        kinds.append("batchnorm")
    kind = draw(st.sampled_from(kinds))
    if kind == "conv":
        out, pad, stride = draw(st.integers(1, 6)), draw(st.integers(0, 1)), draw(st.integers(1, 2))
        k = draw(st.integers(1, min(3, h + 2 * pad, w + 2 * pad)))
        groups = draw(st.sampled_from(_divisors(_gcd(c, out))))
        spec = ("conv", out, k, stride, pad, groups, draw(st.booleans()))
        return spec, (b, out, (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1)
    if kind == "groupnorm":
        return ("groupnorm", draw(st.sampled_from(_divisors(c))), draw(st.booleans())), shape
    if kind == "act":
        return ("act", draw(st.sampled_from(sorted(ACTIVATIONS)))), shape
    if kind == "maxpool":
        return ("maxpool",), (b, c, h // 2, w // 2)
    if kind == "batchnorm":
        return ("batchnorm", draw(st.booleans())), shape
    k = draw(st.sampled_from([1, 3]))  # a same-size conv (padding k//2), then maybe an activation
    inner = (("conv", c, k, 1, k // 2, 1, draw(st.booleans())),)
    if draw(st.booleans()):
        inner += (("act", draw(st.sampled_from(sorted(ACTIVATIONS)))),)
    return ("residual", inner), shape


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


@st.composite
def graphs(draw) -> tuple:
    """``(training, input shape, stem layers, body layers)``: small (a few thousand MACs)."""
    training = draw(st.booleans())
    b = draw(st.integers(1, 2))
    stem: tuple = ()
    if draw(st.booleans()):
        shape = input_shape = (b, draw(st.integers(1, 4)), draw(st.integers(2, 6)), draw(st.integers(2, 6)))
        for _ in range(draw(st.integers(1, 3))):
            spec, shape = _conv_layer(draw, shape, training)
            stem += (spec,)
        tokens = (b, shape[2] * shape[3], shape[1])
    else:
        tokens = input_shape = (b, draw(st.integers(1, 5)), draw(st.integers(1, 8)))
    body = _tokens(draw, tokens, 0, top=True, most=4)
    return training, input_shape, stem, body
