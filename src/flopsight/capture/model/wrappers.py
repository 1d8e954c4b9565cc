"""What training wrappers hold: the torch optimizer inside a DeepSpeed engine or ZeRO
optimizer, the gradient buffers ZeRO keeps in place of ``param.grad``, and the part of a
parameter a rank holds (a ZeRO-3 partition, an FSDP2 shard).

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

from ..._torch_private import dtensor_local

__all__ = ["inner_torch_optimizer", "wrapper_gradients", "local_shard", "gradients", "optimizer_state_tensors"]


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


def local_shard(p):
    """What this rank holds of a parameter: a ZeRO-3 partition, an FSDP2 shard, or all of it."""
    local = dtensor_local(p)  # a DTensor (FSDP2, tensor parallelism)
    if local is not None:
        return local
    return getattr(p, "ds_tensor", None) if getattr(p, "ds_tensor", None) is not None else p


def gradients(params, optimizer) -> list:
    """The gradients held by the model's parameters, by a wrapper's own buffers (ZeRO's) and
    by the (inner) torch optimizer's parameters."""
    grads = [p.grad for p in params if p.grad is not None] + wrapper_gradients(optimizer)
    inner = inner_torch_optimizer(optimizer)
    if inner is not None:
        grads += [p.grad for group in inner.param_groups for p in group["params"] if p.grad is not None]
    return grads


def optimizer_state_tensors(optimizer) -> list:
    """The tensors of the (inner) torch optimizer's state: each rank's shard under ZeRO."""
    inner = inner_torch_optimizer(optimizer)
    if inner is None:
        return []
    return [v for state in inner.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
