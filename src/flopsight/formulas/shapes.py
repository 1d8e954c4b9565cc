"""Small shape helpers shared by the formula families (pure functions of shapes)."""

from __future__ import annotations

import math
from typing import Any, Iterable

import torch

__all__ = ["prod", "numel", "is_float", "any_float", "tensors", "first_tensor"]


def prod(dims: Iterable[int]) -> int:
    """Product of dimensions (1 for an empty shape).

    >>> prod((2, 3, 4))
    24
    """
    return math.prod(int(d) for d in dims)


def numel(x: Any) -> int:
    """Number of elements of a tensor (0 for anything else)."""
    return x.numel() if isinstance(x, torch.Tensor) else 0


def is_float(x: Any) -> bool:
    """True for floating-point or complex tensors: the only ones whose arithmetic is FLOPs."""
    return isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex())


def tensors(values: Iterable[Any]) -> list[torch.Tensor]:
    """The tensors among ``values``, looking one level into lists and tuples."""
    found = []
    for v in values:
        if isinstance(v, torch.Tensor):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            found.extend(t for t in v if isinstance(t, torch.Tensor))
    return found


def any_float(values: Iterable[Any]) -> bool:
    """True if any tensor among ``values`` is floating point or complex."""
    return any(is_float(t) for t in tensors(values))


def first_tensor(value: Any) -> torch.Tensor | None:
    """``value`` if it is a tensor, else the first tensor inside a list/tuple."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (list, tuple)):
        for v in value:
            t = first_tensor(v)
            if t is not None:
                return t
    return None
