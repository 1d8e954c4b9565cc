"""Describing a model's inputs and the device it runs on (for the result metadata)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ...formulas.shapes import first_tensor, nested_tensors
from .modules import walk

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


def model_device(model: nn.Module, args: tuple = (), kwargs: dict | None = None, *,
                 everything: bool = False) -> torch.device:
    """Where the model computes: the first accelerator (CUDA...) device among its parameters,
    buffers and input tensors (a model whose first parameters stay on the CPU, CPU offload or
    FSDP's, still runs on the GPU its inputs or other parameters are on); else the device of
    its first parameter or buffer, else of its first input. ``everything``: the span profiled
    is whatever runs (no model): the current CUDA device once this process has used CUDA.

    >>> model = torch.nn.Linear(2, 2)
    >>> model_device(model), model_device(torch.nn.Module(), (torch.ones(1, device="meta"),))
    (device(type='cpu'), device(type='meta'))
    """
    first = None
    for t in _model_tensors(model):
        if _accelerator(t.device):
            return t.device
        first = first or t.device
    inputs = list(nested_tensors([args, kwargs or {}]))
    for t in inputs:
        if _accelerator(t.device):
            return t.device
    if first is not None:
        return first
    if inputs:
        return inputs[0].device
    if everything and torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _accelerator(device: torch.device) -> bool:
    return device.type not in ("cpu", "meta")


def _model_tensors(model: nn.Module):
    """Every parameter and buffer, read off each module's own dicts (``parameters()`` costs
    several times more on a model of tens of thousands of modules); a shared one may repeat."""
    for module in walk(model):
        for t in module._parameters.values():
            if t is not None:
                yield t
        for b in module._buffers.values():
            if b is not None:
                yield b


def model_dtype(model: nn.Module, args: tuple = (), kwargs: dict | None = None) -> torch.dtype:
    """The dtype of the first floating-point parameter, else of the first input tensor."""
    for p in model.parameters():
        if p.is_floating_point():
            return p.dtype
    t = first_tensor([args, kwargs or {}])
    return t.dtype if t is not None else torch.get_default_dtype()


def batch_size(args: tuple, kwargs: dict | None = None) -> int | None:
    """The first dimension of the first input tensor (None without one)."""
    t = first_tensor([args, kwargs or {}])
    return int(t.shape[0]) if t is not None and t.dim() else None
