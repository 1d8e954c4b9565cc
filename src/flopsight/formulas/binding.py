"""Bind an op's arguments to its schema's names, so formulas read them by name.

A formula is written like the math, with the op's own argument names::

    def convolution(out, input, weight, bias=None, *, transposed, **_): ...

``out`` is the op's result (positional-only where the schema itself has an argument named
``out``: ``def f(out, /, grad_out, query, ..., out, ...)``). :class:`Binder` turns the
``(args, kwargs)`` the dispatcher hands over into one dict of every schema argument
(defaults filled in, ``out=`` buffers of ``.out`` overloads dropped: the result is the
buffer). It is built once per overload and cached next to the resolved formula.

:func:`check_signature` compares a formula's parameters with a schema when the two are first
put together: a formula that needs an argument the schema lacks (a renamed or removed
argument in a new torch) raises :class:`FormulaSignatureError` instead of reading the wrong
value.

>>> import torch
>>> b = Binder.of_op(torch.ops.aten.addmm.default)
>>> sorted(b.bind((torch.ones(2), torch.ones(2, 3), torch.ones(3, 2)), {"beta": 0}))
['alpha', 'beta', 'mat1', 'mat2', 'self']
>>> def addmm(out, self, mat1, mat2, *, beta, **_): ...
>>> check_signature(addmm, b, "aten.addmm.default")
>>> def wrong(out, input, weight, **_): ...
>>> try:
...     check_signature(wrong, b, "aten.addmm.default")
... except FormulaSignatureError as e:
...     print(*str(e).split("; "), sep="\\n")
formula wrong for aten.addmm.default needs argument(s) 'input', 'weight' that the schema does not have
schema arguments: self, mat1, mat2, beta, alpha
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from .._torch_private import op_schema

__all__ = ["Binder", "FormulaSignatureError", "check_signature"]

_EMPTY: dict = {}


class FormulaSignatureError(TypeError):
    """A formula's parameters do not match the schema of the op it was registered for."""


class Binder:
    """Maps positional and keyword arguments to a dict keyed by argument name."""

    __slots__ = ("names", "defaults", "drop", "accepts")

    def __init__(self, names: tuple[str, ...], defaults: dict[str, Any], drop: frozenset = frozenset(),
                 accepts: Callable[[tuple, dict], bool] | None = None):
        self.names = names  # every argument, in schema order (positional ones first)
        self.defaults = defaults
        self.drop = drop  # out= buffers: present in the schema, not passed to the formula
        self.accepts = accepts  # for units bound through one of several schemas

    @classmethod
    def of_op(cls, op: torch._ops.OpOverload) -> Binder:
        """The binder of one op overload, from its schema."""
        return cls.of_schema(op_schema(op))

    @classmethod
    def of_schema(cls, schema) -> Binder:
        names, defaults, drop = [], {}, set()
        arguments = schema.arguments
        for a in arguments:
            names.append(a.name)
            if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write:
                drop.add(a.name)  # the out= buffer of an .out overload
            elif a.has_default_value():
                defaults[a.name] = a.default_value
        n_positional = sum(not a.kwarg_only for a in arguments)
        return cls(tuple(names), defaults, frozenset(drop), _type_check(arguments, n_positional))

    @classmethod
    def of_function(cls, fn: Callable) -> Binder | None:
        """The binder of a Python function, from its signature (None for builtins)."""
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            return None
        names, defaults = [], {}
        for p in sig.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            names.append(p.name)
            if p.default is not p.empty:
                defaults[p.name] = p.default
        return cls(tuple(names), defaults)

    @property
    def arguments(self) -> tuple[str, ...]:
        """The names a formula receives."""
        return tuple(n for n in self.names if n not in self.drop)

    def bind(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        bound = dict(self.defaults)
        bound.update(zip(self.names, args))
        if kwargs:
            bound.update(kwargs)
            for name in self.drop:
                bound.pop(name, None)
        return bound


def _type_check(arguments, n_positional: int) -> Callable[[tuple, dict], bool]:
    """Whether a call's arguments fit a schema: counts, names, and tensor-vs-list positions
    (``torch.lstm(input, hx, ...)`` and ``torch.lstm(data, batch_sizes, ...)`` differ only there)."""
    names = {a.name for a in arguments}
    # what each positional argument must be: a tensor, a list, or anything
    kinds = [torch.Tensor if isinstance(a.type, torch.TensorType) else (list, tuple)
             if isinstance(a.type, torch.ListType) else object for a in arguments[:n_positional]]

    def accepts(args: tuple, kwargs: dict) -> bool:
        if len(args) > n_positional or any(k not in names for k in kwargs):
            return False
        return all(isinstance(value, kind) for value, kind in zip(args, kinds))

    return accepts


def binder_for_builtin(fn: Callable) -> list[Binder]:
    """Binders for a torch builtin (``torch.lstm``, ``F.scaled_dot_product_attention``) from
    the schemas of the aten op of the same name, one per overload."""
    name = getattr(fn, "__name__", None)
    packet = getattr(torch.ops.aten, name, None) if name else None
    if packet is None:
        return []
    return [Binder.of_op(getattr(packet, overload)) for overload in packet.overloads()]


def reject_var_positional(formula: Callable, where: str) -> None:
    """Raise :class:`FormulaSignatureError` now, when ``formula`` is registered, if it takes
    ``*args``: formulas are called with the op's arguments by name, so it could never run.

    >>> try:
    ...     reject_var_positional(lambda out, *args: None, "aten.mm")
    ... except FormulaSignatureError as e:
    ...     print(*str(e).split("; "), sep="\\n")
    formula <lambda> for aten.mm takes *args
    formulas take arguments by name (out, then each argument of the op's schema, or **_)
    """
    try:
        params = inspect.signature(formula).parameters.values()
    except (TypeError, ValueError):
        return  # a builtin or C callable: nothing to read
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        fname = getattr(formula, "__name__", repr(formula))
        raise FormulaSignatureError(f"formula {fname} for {where} takes *args; formulas take arguments by name "
                                    "(out, then each argument of the op's schema, or **_)")


def check_signature(formula: Callable, binder: Binder, where: str) -> None:
    """Raise :class:`FormulaSignatureError` if ``formula`` cannot take ``binder``'s arguments.

    The formula's first parameter is the op's result. Every other parameter without a
    default must be an argument of the schema; without ``**kwargs``, every schema argument
    must be a parameter.
    """
    try:
        params = list(inspect.signature(formula).parameters.values())
    except (TypeError, ValueError):
        return  # a builtin or C callable: nothing to compare
    fname = getattr(formula, "__name__", repr(formula))
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        raise FormulaSignatureError(f"formula {fname} for {where} takes *args; formulas take arguments by name")
    named = params[1:]
    arguments = binder.arguments
    have = set(arguments)
    missing = [p.name for p in named if p.default is p.empty and p.kind is not p.VAR_KEYWORD and p.name not in have]
    if missing:
        raise FormulaSignatureError(
            f"formula {fname} for {where} needs argument(s) {', '.join(map(repr, missing))} that the schema "
            f"does not have; schema arguments: {', '.join(arguments)}"
        )
    if not any(p.kind is p.VAR_KEYWORD for p in named):
        taken = {p.name for p in named if p.kind is not p.POSITIONAL_ONLY}
        extra = [a for a in arguments if a not in taken]
        if extra:
            raise FormulaSignatureError(
                f"formula {fname} for {where} does not take schema argument(s) {', '.join(map(repr, extra))}; "
                "add them or a **_ catch-all"
            )
    if params and params[0].kind is not params[0].POSITIONAL_ONLY and params[0].name in have:
        raise FormulaSignatureError(
            f"formula {fname} for {where}: the schema has an argument named {params[0].name!r}; make the "
            f"result parameter positional-only ({params[0].name}, /, ...)"
        )
