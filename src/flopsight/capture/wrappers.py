"""What training wrappers hold: the torch optimizer inside a DeepSpeed engine or ZeRO
optimizer, and the gradient buffers ZeRO keeps in place of ``param.grad``.

Read by attribute, so DeepSpeed need not be importable; an object without them yields none.

>>> import torch
>>> opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
>>> class Engine:
...     optimizer = opt
>>> inner_torch_optimizer(Engine()) is opt, wrapper_gradients(Engine())
(True, [])
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["inner_torch_optimizer", "wrapper_gradients"]


def inner_torch_optimizer(optimizer: Any):
    """``optimizer`` if it is a torch optimizer, else the one a wrapper holds (an engine
    holds its ZeRO optimizer, which holds the torch one), or None."""
    for _ in range(4):
        if optimizer is None or isinstance(optimizer, torch.optim.Optimizer):
            return optimizer
        optimizer = getattr(optimizer, "optimizer", None)
    return None


def wrapper_gradients(optimizer: Any) -> list:
    """The gradient tensors ZeRO holds outside ``param.grad``: stages 1 and 2 their reduced
    partitions (``averaged_gradients``), stage 3 its flat partition buffer."""
    found = []
    for _ in range(4):
        if optimizer is None or isinstance(optimizer, torch.optim.Optimizer):
            break
        averaged = getattr(optimizer, "averaged_gradients", None)
        if isinstance(averaged, dict):
            for value in averaged.values():
                found += [t for t in (value if isinstance(value, (list, tuple)) else [value])
                          if isinstance(t, torch.Tensor)]
        flat = getattr(optimizer, "grad_partitions_flat_buffer", None)
        if isinstance(flat, torch.Tensor):
            found.append(flat)
        optimizer = getattr(optimizer, "optimizer", None)
    return found
