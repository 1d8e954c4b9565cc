"""The operators' times come from a warm pass: the pass that times the modules, where the native
recorder stamps each op it would count (docs/conventions/timing.md, "operator times"). So an
operator's time never exceeds its module's, and the operators of a call never add up to more
than it took; no pass is added for them. Where the ops cannot be stamped there (the Python
backend, kernels=True, a compiled model), they are timed in the counting pass and the result
says so (``metadata.timing.ops``).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import flopsight

#: seconds two clocks' readings of one moment may differ by: the root's call is stamped on the
#: host clock, the ops on the recorder's (the same monotonic clock, offset once per session)
CLOCKS = 2e-6


class Convolutional(nn.Module):
    """Convolutions, an activation module, a functional op in the root's own forward."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.act = nn.GELU()
        self.head = nn.Linear(8 * 16 * 16, 10)

    def forward(self, x):
        x = F.max_pool2d(self.act(self.conv(x)), 2)  # the pooling is the root's own op
        return self.head(x.flatten(1))


def _gpt2():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=97, n_positions=64)
    return transformers.GPT2LMHeadModel(config).eval()


def _cases():
    torch.manual_seed(0)
    yield "convolutional", Convolutional(), {"args": torch.randn(2, 3, 32, 32)}
    yield "gpt2 forward", _gpt2, {"args": torch.randint(0, 97, (2, 12))}
    yield "gpt2 generate", _gpt2, {"kwargs": {"input_ids": torch.randint(0, 97, (1, 6)), "max_new_tokens": 3,
                                               "do_sample": False, "pad_token_id": 0}, "mode": "generate"}


CASES = list(_cases())


def _forward_ops(result):
    """(module path, its forward latency, its own ops' {name: latency}) of every module called."""
    for path, module in result.modules.items():
        if "forward" in module.phases:
            ops = module.ops.get("forward", {})
            yield path, module.phases["forward"].latency, {name: s.latency for name, s in ops.items()}


@pytest.mark.parametrize("name, model, call", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("repeat", [1, 3])
def test_an_operators_time_never_exceeds_its_modules(name, model, call, repeat):
    model = model() if callable(model) and not isinstance(model, nn.Module) else model
    with torch.no_grad():
        result = flopsight.profile(model, warm_up=1, repeat=repeat, **call)
    assert result.metadata.backend == "native" and result.metadata.timing.ops == "timed"
    timed_any = False
    for path, latency, ops in _forward_ops(result):
        for op, seconds in ops.items():
            assert seconds <= latency + CLOCKS, f"{path}: {op} took {seconds:.3g} s in a call of {latency:.3g} s"
            timed_any = timed_any or seconds > 0
    assert timed_any
    if repeat == 1:  # one pass: the ops of every module ran inside the model's call, one after another
        total = sum(sum(ops.values()) for _, _, ops in _forward_ops(result))
        assert total <= result.total.forward.latency + CLOCKS


def test_the_operators_are_timed_without_a_pass_of_their_own():
    calls = []
    model = Convolutional()
    model.register_forward_pre_hook(lambda module, args: calls.append(1))
    result = flopsight.profile(model, torch.randn(2, 3, 32, 32), warm_up=1, repeat=2)
    # the counting pass (the first warm-up too) and the two timed calls
    assert len(calls) == 3 and result.metadata.timing.ops == "timed"
    assert result.module("act").ops["forward"]["aten.gelu"].latency > 0


def test_the_counts_are_the_counting_pass_s():
    """Stamping the ops in the timed pass changes no count, on either backend."""
    x = torch.randn(2, 3, 32, 32)
    native = flopsight.profile(Convolutional(), x)
    python = flopsight.profile(Convolutional(), x, backend="python")
    assert native.metadata.timing.ops == "timed" and python.metadata.timing.ops == "counting"
    for path, module in native.modules.items():
        other = python.modules[path]
        assert {n: (s.macs, s.flops, s.calls) for n, s in module.ops.get("forward", {}).items()} == \
            {n: (s.macs, s.flops, s.calls) for n, s in other.ops.get("forward", {}).items()}


@pytest.mark.parametrize("options, ops", [
    ({"backend": "python"}, "counting"),  # no recorder to stamp the ops: the counting pass's
    ({"kernels": True}, "counting"),  # torch.profiler hears each module call in the timed pass
    ({"warm_up": 0}, "timed"),  # counted and timed in one pass
])
def test_where_the_operators_are_timed_is_said(options, ops):
    result = flopsight.profile(Convolutional(), torch.randn(2, 3, 32, 32), **options)
    assert result.metadata.timing.ops == ops
    again = flopsight.ProfileResult.from_dict(result.to_dict())
    assert again.metadata.timing.ops == ops


def test_a_profiled_span_times_its_operators_in_its_own_pass():
    model = Convolutional()
    with flopsight.Profiler(model) as prof:
        model(torch.randn(2, 3, 32, 32))
    assert prof.result.metadata.timing.ops == "timed"
    for path, latency, ops in _forward_ops(prof.result):
        assert all(seconds <= latency + CLOCKS for seconds in ops.values()), path


def test_a_file_from_before_reads_as_timed_in_the_counting_pass():
    result = flopsight.profile(nn.Linear(2, 2), torch.ones(1, 2))
    data = result.to_dict()
    del data["metadata"]["timing"]["ops"]
    assert flopsight.ProfileResult.from_dict(data).metadata.timing.ops == ""


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * x

    @staticmethod
    def backward(ctx, g):
        return g


class Fused(nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 2


class Custom(nn.Module):
    """A registered autograd.Function and a registered module, both counted whole."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 64)
        self.fused = Fused()

    def forward(self, x):
        return self.fused(Square.apply(self.fc(x)))


def test_a_call_counted_whole_gets_the_time_of_its_parts():
    registry = flopsight.REGISTRY.copy()
    flopsight.register_function(Square, registry=registry)(lambda out, x: flopsight.Cost.of_flops(x.numel()))
    flopsight.register_module(Fused, registry=registry)(lambda out, module, x: flopsight.Cost.of_flops(3 * x.numel()))
    result = flopsight.profile(Custom(), torch.randn(256, 64), registry=registry)
    assert result.metadata.timing.ops == "timed"
    root_ops = result.module("").ops["forward"]
    fused = result.module("fused")
    # Square.apply ran x * x in the root's forward: its time is the counted Square's
    assert root_ops["Square"].flops == 256 * 64 and root_ops["Square"].latency > 0
    assert sum(s.latency for s in fused.ops["forward"].values()) > 0
    for path, latency, ops in _forward_ops(result):
        assert all(seconds <= latency + CLOCKS for seconds in ops.values()), path
