"""Property tests: random module graphs (tests/property_models.py) against their analytic counts,
and the same counts on the CPU and on meta, on the Python and the native backend.

Each graph runs a forward and a backward in a Profiler span; the forward of every top-level
block must count what the generator derived by hand, the whole model its parameters once, and
every (module, phase, op) that costs must count the same on every device and backend.
Sizes: HYPOTHESIS_PROFILE (tests/conftest.py).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, note
from property_models import build, graphs

import flopsight
from flopsight.capture.backends.native.recorder import RECORDER

NATIVE = RECORDER.load(quiet=True) is not None


def run(graph: tuple, device: str, backend: str):
    """The built graph profiled on ``device`` over a forward and a backward, and the built graph."""
    built = build(graph)
    model = built.model.to(device)
    x = torch.randn(built.input_shape, device=device, requires_grad=True)
    with flopsight.Profiler(model, backend=backend) as prof:
        model(x).sum().backward()
    result = prof.result
    assert result.metadata.backend == backend
    return result, built


def costs(result, by_op: bool = True) -> dict:
    """(path, phase) -> (MACs, FLOPs), and with ``by_op`` (path, phase, op) -> (calls, MACs, FLOPs)
    of the ops that cost (free ops differ between backends: see tests/test_native.py)."""
    out = {}
    for path, m in result.modules.items():
        for phase, stats in m.phases.items():
            out[(path, phase)] = (stats.macs, stats.flops)
        for phase, ops in (m.ops.items() if by_op else ()):
            for op, stats in ops.items():
                if stats.macs or stats.flops:
                    # a plain run adds in place where a dispatch mode takes torch's tensor-subclass branch
                    # (docs/native.md): the engine's sum of two gradients, and a Linear's bias on a
                    # non-contiguous 3-D input (at::linear: matmul, then add_ or add); the same FLOPs
                    key = (path, phase, "aten.add" if op == "aten.add_" else op)
                    before = out.get(key, (0, 0, 0))
                    out[key] = (before[0] + stats.calls, before[1] + stats.macs, before[2] + stats.flops)
    return out


@given(graphs())
def test_graph_counts_match_the_analytic_counts(graph):
    note(f"graph: {graph}")
    result, built = run(graph, "cpu", "python")
    for path, expected in built.blocks.items():
        got = result.module(path)
        assert (got.forward.macs, got.forward.flops) == (expected.macs, expected.flops), path
        # the input requires grad, so every product (Linear, conv, attention's two) has both operands'
        # gradients to compute in backward: each is one product of the forward's size (docs/conventions.md,
        # "Backward"), so a block's backward MACs are twice its forward's; norms, activations and adds have none
        assert got.backward.macs == 2 * expected.macs, path
    assert (result.total.forward.macs, result.total.forward.flops) == (built.total.macs, built.total.flops)
    assert result.total.backward.macs == 2 * built.total.macs
    assert result.total.params == built.params
    assert result.unsupported_ops == {}


@given(graphs())
def test_graph_counts_the_same_on_meta(graph):
    cpu, _ = run(graph, "cpu", "python")
    meta, _ = run(graph, "meta", "python")
    # per module and phase, not per op: meta runs some ops through torch's Python decompositions
    # (addmm on a non-contiguous input is mm + add there), which cost the same in total
    assert costs(meta, by_op=False) == costs(cpu, by_op=False)


@pytest.mark.skipif(not NATIVE, reason="the native backend cannot be built here")
@given(graphs())
def test_graph_counts_the_same_on_the_native_backend(graph):
    python, _ = run(graph, "cpu", "python")
    native, _ = run(graph, "cpu", "native")
    assert costs(native) == costs(python)
