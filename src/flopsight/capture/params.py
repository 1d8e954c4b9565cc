"""Parameter counting: each unique tensor once, ZeRO-3 partitions by their full size."""

from __future__ import annotations

from torch import nn

__all__ = ["param_numel", "count_params"]


def param_numel(p) -> int:
    """Elements of a parameter; a ZeRO-3 partitioned one (local numel 0) by ``ds_numel``."""
    full = getattr(p, "ds_numel", None)
    return int(full) if full is not None else p.numel()


def count_params(module: nn.Module) -> tuple[int, int]:
    """(all, trainable) parameters of ``module`` and its submodules, tied tensors once.

    >>> import torch
    >>> lin = torch.nn.Linear(3, 2)
    >>> count_params(torch.nn.Sequential(lin, lin))
    (8, 8)
    """
    total = trainable = 0
    for p in module.parameters():  # parameters() already yields each tensor once
        n = param_numel(p)
        total += n
        if p.requires_grad:
            trainable += n
    return total, trainable
