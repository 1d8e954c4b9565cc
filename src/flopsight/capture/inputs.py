"""Describing a model's inputs and the device it runs on (for the result metadata)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..formulas.shapes import first_tensor

__all__ = ["describe_inputs", "model_device", "model_dtype", "batch_size"]


def _describe(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).replace('torch.', '')}{list(value.shape)}"
    if isinstance(value, (list, tuple)):
        return [_describe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _describe(v) for k, v in value.items()}
    if isinstance(value, (int, float, bool, str)) or value is None:
        return value
    return type(value).__name__


def describe_inputs(args: tuple, kwargs: dict) -> dict[str, Any]:
    """JSON-ready shapes and dtypes of the inputs.

    >>> describe_inputs((torch.ones(2, 3),), {"mask": None})
    {'args': ['float32[2, 3]'], 'kwargs': {'mask': None}}
    """
    return {"args": _describe(list(args)), "kwargs": _describe(dict(kwargs))}


def model_device(model: nn.Module, args: tuple = (), kwargs: dict | None = None) -> torch.device:
    """The device of the model's first parameter or buffer, else of the first input tensor."""
    for t in model.parameters():
        return t.device
    for t in model.buffers():
        return t.device
    t = first_tensor([args, kwargs or {}])
    return t.device if t is not None else torch.device("cpu")


def model_dtype(model: nn.Module, args: tuple = (), kwargs: dict | None = None) -> torch.dtype:
    """The dtype of the first floating-point parameter, else of the first input tensor."""
    for t in model.parameters():
        if t.is_floating_point():
            return t.dtype
    t = first_tensor([args, kwargs or {}])
    return t.dtype if t is not None else torch.get_default_dtype()


def batch_size(args: tuple, kwargs: dict | None = None) -> int | None:
    """The first dimension of the first input tensor (None without one)."""
    t = first_tensor([args, kwargs or {}])
    return int(t.shape[0]) if t is not None and t.dim() else None
