"""Small helpers shared by the formula families (pure functions of shapes and arguments)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch

__all__ = [
    "requires_grad",
    "prod",
    "numel",
    "is_float",
    "any_float",
    "tensors",
    "first_tensor",
    "nested_tensors",
    "float_arithmetic",
    "result_numel",
]


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


def requires_grad(t: Any) -> bool:
    """Whether ``t`` is a tensor that requires grad (read when the forward runs: what its
    backward will compute)."""
    return isinstance(t, torch.Tensor) and t.requires_grad


def any_float(values: Iterable[Any]) -> bool:
    """True if any tensor among ``values`` is floating point or complex."""
    return any(is_float(t) for t in tensors(values))


def nested_tensors(value: Any) -> Iterator[torch.Tensor]:
    """Every tensor in ``value``: a tensor, or lists, tuples, dicts and dataclasses of them, in order.

    >>> [t.shape[0] for t in nested_tensors([torch.ones(1), {"a": (torch.ones(2), None)}])]
    [1, 2]
    """
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple, dict)):
        for v in value.values() if isinstance(value, dict) else value:
            yield from nested_tensors(v)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from nested_tensors(getattr(value, f.name, None))


def first_tensor(value: Any) -> torch.Tensor | None:
    """``value`` if it is a tensor, else the first tensor inside a list, tuple or dict.

    >>> first_tensor([None, {"ids": torch.ones(2)}]).shape
    torch.Size([2])
    """
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for v in value:
            t = first_tensor(v)
            if t is not None:
                return t
    return None


def float_arithmetic(out: Any, args: Iterable[Any] = (), kwargs: dict | None = None) -> bool:
    """True if an op computes in floating point: a float/complex tensor among its
    arguments (one level into lists) or in its result ``out``.

    The result matters where float work starts from integer tensors: ``int / int`` (true
    division) and ``int_tensor * 0.5`` both compute and return floats.

    >>> i = torch.ones(2, dtype=torch.int64)
    >>> float_arithmetic(i / i, [i, i])
    True
    >>> float_arithmetic(i + i, [i, i]), float_arithmetic(i > 0, [i, 0])
    (False, False)
    """
    return any_float(args) or any_float((kwargs or {}).values()) or any_float([out])


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...] | None:
    """The broadcast of ``shapes``, or None if they do not broadcast.

    Pure shape arithmetic: ``torch.broadcast_shapes`` costs ~100 us a call, too slow to run
    once per op.

    >>> broadcast_shape((4, 1), (1, 5)), broadcast_shape((2, 3, 4), (3, 4)), broadcast_shape((2,), (3,))
    ((4, 5), (2, 3, 4), None)
    """
    ndim = max((len(s) for s in shapes), default=0)
    result = [1] * ndim
    for shape in shapes:
        offset = ndim - len(shape)
        for i, d in enumerate(shape):
            cur = result[offset + i]
            if cur == 1:
                result[offset + i] = d
            elif d != 1 and d != cur:
                return None
    return tuple(result)


def broadcast_numel(*shapes: Sequence[int]) -> int:
    """Elements of the broadcast of ``shapes``; a ValueError if they do not broadcast (the op
    that took them would have refused them).

    >>> broadcast_numel((4, 1), (1, 5))
    20
    """
    shape = broadcast_shape(*shapes)
    if shape is None:
        raise ValueError(f"shapes {', '.join(str(tuple(s)) for s in shapes)} do not broadcast")
    return prod(shape)


def result_numel(out: Any, args: Iterable[Any] = ()) -> int:
    """Elements of an op's (first) result; if it returned no tensor (an in-place list op),
    the broadcast shape of the tensors among ``args``.

    >>> result_numel(torch.ones(4, 5))
    20
    >>> result_numel(None, [torch.ones(4, 1), torch.ones(1, 5)])
    20
    """
    t = first_tensor(out)
    if t is not None:
        return t.numel()
    shapes = [t.shape for t in tensors(args)]
    return broadcast_numel(*shapes) if shapes else 0
