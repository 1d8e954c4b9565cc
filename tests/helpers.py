"""Test helpers: measure the cost of an arbitrary callable, on any device."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

import flopsight
from flopsight.result import PhaseStats, ProfileResult


def run_profiled(fn: Callable, *args: Any, **kwargs: Any) -> ProfileResult:
    """Profile ``fn(*args, **kwargs)`` with every op attributed to a bare root module."""
    with flopsight.Profiler(nn.Module()) as prof:
        fn(*args, **kwargs)
    return prof.result


def measure(fn: Callable, *args: Any, **kwargs: Any) -> PhaseStats:
    """MACs/FLOPs of ``fn(*args, **kwargs)``."""
    return run_profiled(fn, *args, **kwargs).total.forward


def ops_of(fn: Callable, *args: Any, **kwargs: Any) -> dict[str, tuple[int, int, int]]:
    """op name -> (calls, macs, flops) for ``fn(*args, **kwargs)``."""
    result = run_profiled(fn, *args, **kwargs)
    return {o.name: (o.calls, o.macs, o.flops) for o in result.ops()}


def to_device(value: Any, device: str) -> Any:
    """Tensors (also inside lists/tuples/dicts) and modules moved to ``device``."""
    if isinstance(value, (torch.Tensor, nn.Module)):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    return value


def measure_on(device: str, fn: Callable, *args: Any, **kwargs: Any) -> tuple[int, int]:
    """(macs, flops) of ``fn`` with every tensor/module argument moved to ``device``."""
    stats = measure(fn, *to_device(args, device), **to_device(kwargs, device))
    return stats.macs, stats.flops
