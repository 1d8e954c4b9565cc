"""The registration functions of the public API (``flopsight.register_formula``...), loaded by
:mod:`flopsight` the first time one of them is used."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .formulas import REGISTRY

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from .formulas import Cost, Registry
    from .formulas.registry import OpLike

__all__ = ["register_formula", "mark_zero_cost", "register_module", "register_function"]


def register_formula(
    *ops: OpLike, registry: Registry | None = None, reads_values: bool = False
) -> Callable[[Callable[..., Cost]], Callable[..., Cost]]:
    """Decorator: count ``ops`` (aten or ``torch.library`` ops) with ``fn(out, **arguments) -> Cost``,
    the op's arguments by their schema names (``print(torch.ops.aten.mm.default._schema)``).
    ``reads_values=True``: it reads tensor values (a mask's kept entries): the native backend
    then costs each call on its values, in Python (``result.metadata.on_values`` lists them).

    >>> import torch, flopsight
    >>> registry = flopsight.REGISTRY.copy()  # or leave registry out to change the global one
    >>> @flopsight.register_formula("aten::mm", registry=registry)
    ... def my_mm(out, self, mat2):
    ...     return flopsight.Cost.of_product(self.shape[0] * self.shape[1] * mat2.shape[1])
    >>> flopsight.profile(torch.nn.Linear(3, 2, bias=False), torch.ones(4, 3), registry=registry).total.forward.macs
    24
    """
    return (registry or REGISTRY).register(*ops, reads_values=reads_values)


def mark_zero_cost(*ops: OpLike, registry: Registry | None = None) -> None:
    """Count ``ops`` as free (views, copies, bookkeeping) instead of reporting them unsupported."""
    (registry or REGISTRY).zero_cost(*ops)


def register_module(
    *classes: type[torch.nn.Module], name: str | None = None, backward: Callable[..., Cost] | None = None,
    registry: Registry | None = None,
) -> Callable[[Callable[..., Cost]], Callable[..., Cost]]:
    """Decorator: count a whole call of a module of ``classes`` with ``fn(out, module, **forward_arguments)``,
    replacing the count of everything its subtree runs (fused or custom modules).

    >>> import torch, flopsight
    >>> class Fused(torch.nn.Module):  # say its kernel is opaque to the profiler
    ...     def forward(self, x, scale=2.0):
    ...         return x * scale
    >>> registry = flopsight.REGISTRY.copy()
    >>> @flopsight.register_module(Fused, registry=registry)
    ... def fused(out, module, x, scale):
    ...     return flopsight.Cost.of_flops(3 * x.numel())
    >>> flopsight.profile(Fused(), torch.ones(4), registry=registry).total.forward.flops
    12
    """
    return (registry or REGISTRY).register_module(*classes, name=name, backward=backward)


def register_function(
    *functions: type[torch.autograd.Function], name: str | None = None,
    backward: Callable[..., Cost] | None = None, registry: Registry | None = None,
) -> Callable[[Callable[..., Cost]], Callable[..., Cost]]:
    """Decorator: count each ``apply`` of these ``torch.autograd.Function`` subclasses with
    ``fn(out, **forward_arguments)`` (``ctx`` left out) instead of the ops it runs.

    >>> import torch, flopsight
    >>> class Square(torch.autograd.Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         ctx.save_for_backward(x)
    ...         return x * x
    ...     @staticmethod
    ...     def backward(ctx, g):
    ...         (x,) = ctx.saved_tensors
    ...         return 2 * x * g
    >>> registry = flopsight.REGISTRY.copy()
    >>> @flopsight.register_function(Square, registry=registry,
    ...                              backward=lambda out, x: flopsight.Cost.of_flops(2 * x.numel()))
    ... def square(out, x):
    ...     return flopsight.Cost.of_flops(x.numel())
    >>> class M(torch.nn.Module):
    ...     def forward(self, x):
    ...         return Square.apply(x)
    >>> x = torch.ones(5, requires_grad=True)
    >>> with flopsight.Profiler(M(), registry=registry) as prof:
    ...     prof.model(x).sum().backward()
    >>> prof.result.total.forward.flops, prof.result.total.backward.flops
    (5, 10)
    """
    return (registry or REGISTRY).register_function(*functions, name=name, backward=backward)



