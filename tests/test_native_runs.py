"""The native recorder hands its records over in runs (recorder.cpp's drain_runs): ops repeated
under one state as one row with their count and summed time, the blocks of memory of a stretch
as the figures the memory source needs. Charged, a run gives what charging each op and each
block in turn gives: the counts, calls, unsupported ops and memory figures of every op."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import flopsight
from flopsight.capture.backends.native.recorder import RECORDER
from flopsight.formulas import REGISTRY

needs_native = pytest.mark.skipif(RECORDER.load(quiet=True) is None, reason="the native backend cannot be built here")

PRODUCTS = 5


class Repeats(nn.Module):
    """Five 4x4 matrix products in a row: one operator, one signature, one module call."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(4, 4))

    def forward(self, x):
        for _ in range(PRODUCTS):
            x = x @ self.w
        return x


def forward(backend: str, **options):
    model = Repeats()
    with torch.no_grad(), flopsight.Profiler(model, memory=True, backend=backend, **options) as prof:
        model(torch.ones(4, 4))
    assert prof.result.metadata.backend == backend
    return prof.result


@needs_native
def test_repeated_ops_count_as_many_calls_each_with_its_cost_and_time():
    result = forward("native", clock=flopsight.FakeClock())
    mm = result.ops()["aten.mm"]
    # a 4x4 by 4x4 product: 4 * 4 * 4 = 64 MACs, 128 FLOPs; on the fake clock each op is
    # stamped as it is charged, one tick (1 ms) from its start to its end
    assert (mm.macs, mm.flops, mm.calls) == (PRODUCTS * 64, PRODUCTS * 128, PRODUCTS)
    assert mm.latency == pytest.approx(PRODUCTS * 1e-3)


class TakingTurns(nn.Module):
    """Three rounds of a product then a scaling: two operators taking turns, one module call
    (an optimizer's step runs its ops the same way, once per parameter)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(4, 4))

    def forward(self, x):
        for _ in range(3):
            x = (x @ self.w) * 0.5
        return x


@needs_native
def test_ops_taking_turns_outside_the_nodes_merge_into_one_run_each(monkeypatch):
    from flopsight.capture.backends.native import ops

    rows = []
    charge = ops.NativeCountingSource._charge

    def kept(self, batch, counting, overhead):
        batch = list(batch)
        rows.extend(row for row in batch if row[0] >= 0)  # the op runs
        return charge(self, iter(batch), counting, overhead)

    monkeypatch.setattr(ops.NativeCountingSource, "_charge", kept)
    results = {}
    for backend in ("native", "python"):
        model, x = TakingTurns(), torch.ones(4, 4)
        with torch.no_grad(), flopsight.Profiler(model, backend=backend) as prof:
            model(x)
        results[backend] = prof.result.ops()
    # two runs, of 3 calls each (row field 8: the count), however the ops alternate
    assert sorted(row[8] for row in rows) == [3, 3]
    # each product: 4 * 4 * 4 = 64 MACs; each scaling: 16 multiplications, 16 FLOPs
    for found in results.values():
        assert (found["aten.mm"].macs, found["aten.mm"].calls) == (3 * 64, 3)
        assert (found["aten.mul"].flops, found["aten.mul"].calls) == (3 * 16, 3)


@pytest.mark.parametrize("backend", ["python", pytest.param("native", marks=needs_native)])
def test_the_blocks_of_repeated_ops_give_the_peak_of_each_in_turn(backend):
    """Each product's output is 4 * 4 * 4 = 64 bytes and the one before it is released once
    the next exists: two alive at most, 128 bytes, above what was live before the call (the
    input). The largest block is one output, made by the product."""
    result = forward(backend)
    assert result.module("").memory.peak == 128
    # the span's peak also counts the weight live throughout: 4 * 4 floats, 64 bytes
    assert (result.memory.peak, result.memory.peak_allocated) == (64 + 128, 128)
    largest = result.memory.largest_buffer
    assert (largest.bytes, largest.op, largest.module, largest.phase) == (64, "aten.mm", "", "forward")


@pytest.mark.parametrize("backend", ["python", pytest.param("native", marks=needs_native)])
def test_a_repeated_op_without_a_formula_is_listed_once_per_call(backend):
    registry = REGISTRY.copy()
    registry.unregister(torch.ops.aten.mm)
    with pytest.warns(flopsight.UnsupportedOpWarning):
        result = forward(backend, registry=registry)
    assert result.unsupported_ops == {"aten.mm": PRODUCTS}
