"""Call an op's formula with the op's arguments in schema order, bound by name as counting
binds them (for kernels that run only on GPUs/MPS, or ops a mode sees at another level)."""

from __future__ import annotations

from typing import Any

from flopsight.formulas import REGISTRY, Cost, Registry
from flopsight.formulas.binding import Binder


def schema_cost(op: Any, out: Any, *positional: Any, registry: Registry | None = None, **keywords: Any) -> Cost:
    """The cost of ``op(*positional, **keywords)`` returning ``out``: the arguments bound to the
    names of the first overload of ``op`` (a packet, or one overload) whose schema fits the call."""
    registry = registry or REGISTRY
    overloads = [op] if hasattr(op, "_schema") else [getattr(op, name) for name in op.overloads()]
    for overload in overloads:
        if Binder.of_op(overload).accepts(positional, keywords):
            return registry.resolve(overload).cost(out, positional, keywords)
    raise TypeError(f"no overload of {op} fits {len(positional)} positional arguments and {sorted(keywords)}")
