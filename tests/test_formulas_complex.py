"""``polar`` (4 FLOPs per output element: cos, sin, two multiplies) and the zero-cost
bookkeeping ops of formulas/zero_cost.py, CPU == meta."""

from __future__ import annotations

import torch
from helpers import ops_on

from flopsight.formulas import REGISTRY, ZERO, Cost
from flopsight.formulas.zero_cost import _BOOKKEEPING_NAMES as _NAMES
from flopsight.formulas.zero_cost import BOOKKEEPING_OPS, ZERO_COST_OPS

aten = torch.ops.aten


def test_polar():
    # abs (2, 8) and angle (8,) broadcast to 16 complex outputs: abs*cos + i*abs*sin, 4 each
    for device in ("cpu", "meta"):
        ops = ops_on(device, torch.polar, torch.rand(2, 8), torch.rand(8))
        assert ops["aten.polar"] == (1, 0, 64)


def test_polar_of_python_numbers():
    # one complex number: 4 FLOPs
    assert REGISTRY.resolve(aten.polar.float).cost(None, (2.0, 0.5), {}) == Cost(0, 4)


def test_complex_and_checks_are_free():
    def f(re, im):
        z = torch.complex(re, im)
        torch._assert_async((re >= -10).all())
        return z

    for device in ("cpu", "meta"):
        ops = ops_on(device, f, torch.rand(4), torch.rand(4))
        assert ops["aten.complex"] == (1, 0, 0)


def test_backend_queries_are_free():
    # DeepSpeed and autocast ask whether oneDNN supports bf16/fp16: seen at dispatch, free
    ops = ops_on("cpu", lambda: torch.ops.mkldnn._is_mkldnn_bf16_supported())
    assert ops == {"mkldnn._is_mkldnn_bf16_supported": (1, 0, 0)}


def test_bookkeeping_ops_are_registered_free_and_not_already_in_zero():
    assert BOOKKEEPING_OPS and all(REGISTRY.lookup(op)[1] is ZERO for op in BOOKKEEPING_OPS)
    assert not set(BOOKKEEPING_OPS) & set(ZERO_COST_OPS)
    assert not set(REGISTRY.missing()) & set(_NAMES)  # no typo among the names
