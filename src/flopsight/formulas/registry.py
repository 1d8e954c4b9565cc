"""The formula registry: which cost function counts which operator.

Two kinds of entries:

* **ops** -- aten (or any ``torch.library``) operators, keyed by their
  ``OpOverloadPacket`` (``torch.ops.aten.mm``), so one formula covers every overload
  (``mm.default``, ``mm.out``). They are seen by the counting dispatch mode.
* **units** -- a few Python-level torch functions (``F.scaled_dot_product_attention``,
  ``torch.lstm``, ...) whose aten decomposition depends on the device or kernel picked.
  They are counted once, as a whole, from their arguments, and the aten ops they run
  underneath are not counted again. That is what makes counts device-independent.

A formula is a pure function of shapes: ``fn(out, *args, **kwargs) -> Cost`` where
``args``/``kwargs`` are the operator's own arguments and ``out`` its result.

>>> import torch
>>> from flopsight.formulas.registry import Registry, Cost
>>> reg = Registry()
>>> @reg.register(torch.ops.aten.mm)
... def mm(out, a, b):
...     return Cost.of_product(a.shape[0] * a.shape[1] * b.shape[1])
>>> reg.lookup(torch.ops.aten.mm.default)[1](None, torch.ones(2, 3), torch.ones(3, 4))
Cost(macs=24, flops=48)
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Union

import torch

from .._compat import OpOverload, OpOverloadPacket

__all__ = ["Cost", "Registry", "REGISTRY", "ZERO", "op_key"]

OpLike = Union[OpOverload, OpOverloadPacket, str]


class Cost(NamedTuple):
    """MACs and FLOPs of one operator call."""

    macs: int = 0
    flops: int = 0

    @classmethod
    def of_product(cls, macs: int, extra_flops: int = 0) -> "Cost":
        """A matrix-like product: 2 FLOPs per MAC, plus ``extra_flops`` (bias adds...)."""
        return cls(int(macs), 2 * int(macs) + int(extra_flops))

    @classmethod
    def of_flops(cls, flops: int) -> "Cost":
        return cls(0, int(flops))

    def plus(self, other: "Cost") -> "Cost":
        return Cost(self.macs + other.macs, self.flops + other.flops)

    def times(self, k: int) -> "Cost":
        return Cost(self.macs * k, self.flops * k)


def _zero_formula(out, *args, **kwargs) -> Cost:
    return Cost()


#: The formula of every zero-cost op (views, copies, indexing, creation...).
ZERO = _zero_formula


class _NoSuchOp(ValueError):
    """A well-formed op name that the installed torch does not define."""


def op_key(op: OpLike) -> OpOverloadPacket:
    """Normalise an op to the registry key: its ``OpOverloadPacket``.

    The one place this normalisation happens. Accepts ``torch.ops.aten.mm``,
    ``torch.ops.aten.mm.default`` or a qualified name (``"aten::mm"``, ``"mylib.my_op"``).

    >>> op_key("aten::mm") is torch.ops.aten.mm
    True
    """
    if isinstance(op, OpOverload):
        return op.overloadpacket
    if isinstance(op, OpOverloadPacket):
        return op
    if isinstance(op, str):
        ns, sep, name = op.replace("::", ".").partition(".")
        if not sep or not name:
            raise ValueError(f"op: expected a qualified op name like 'aten::mm', got {op!r}")
        name = name.split(".")[0]  # drop an overload suffix: 'aten::add.Tensor'
        try:
            return getattr(getattr(torch.ops, ns), name)
        except (AttributeError, RuntimeError) as e:
            raise _NoSuchOp(f"op: no operator named {op!r} is registered with torch") from e
    raise TypeError(
        f"op: expected a torch.ops OpOverload/OpOverloadPacket or a qualified name, got {type(op).__name__}"
    )


def _as_cost(value: Any, name: str) -> Cost:
    if isinstance(value, Cost):
        return value
    if isinstance(value, tuple) and len(value) == 2:
        return Cost(int(value[0]), int(value[1]))
    raise TypeError(f"formula for {name} returned {value!r}; expected flopsight.Cost(macs, flops)")


class Registry:
    """Maps operators and unit functions to formulas."""

    def __init__(self) -> None:
        self._ops: dict[OpOverloadPacket, Callable[..., Cost]] = {}
        self._units: dict[Any, tuple[str, Callable[..., Cost]]] = {}
        self._missing: list[str] = []

    # -- registration ---------------------------------------------------------------
    def _keys(self, ops: tuple[OpLike, ...], missing_ok: bool) -> list[OpOverloadPacket]:
        if not ops:
            raise ValueError("register: pass at least one op")
        keys = []
        for op in ops:
            try:
                keys.append(op_key(op))
            except _NoSuchOp:
                # Only a well-formed *name* can be missing (a malformed one still raises).
                if not missing_ok:
                    raise
                if op not in self._missing:
                    self._missing.append(op)
        return keys

    def register(
        self, *ops: OpLike, missing_ok: bool = False
    ) -> Callable[[Callable[..., Cost]], Callable[..., Cost]]:
        """Decorator: ``fn`` counts every op in ``ops`` (replacing any earlier formula).

        With ``missing_ok=True``, ops given by name (``"aten::_mps_convolution"``) that the
        installed torch does not define are skipped instead of raising: flopsight supports
        torch >= 2.2, and private kernels come and go between releases and builds. The
        names skipped are listed by :meth:`missing`.

        >>> reg = Registry()
        >>> @reg.register("aten::mm", "aten::no_such_kernel", missing_ok=True)
        ... def mm(out, a, b):
        ...     return Cost.of_product(a.shape[0] * a.shape[1] * b.shape[1])
        >>> reg.is_registered("aten::mm"), reg.missing()
        (True, ('aten::no_such_kernel',))
        >>> try:  # without missing_ok, an unknown name is an error
        ...     reg.register("aten::no_such_kernel")(mm)
        ... except ValueError as e:
        ...     print(e)
        op: no operator named 'aten::no_such_kernel' is registered with torch
        """
        keys = self._keys(ops, missing_ok)

        def deco(fn: Callable[..., Cost]) -> Callable[..., Cost]:
            if not callable(fn):
                raise TypeError(f"register: formula must be callable, got {type(fn).__name__}")
            for key in keys:
                self._ops[key] = fn
            return fn

        return deco

    def zero_cost(self, *ops: OpLike, missing_ok: bool = False) -> None:
        """Mark ops as costing nothing (so they are not reported as unsupported).

        ``missing_ok`` as in :meth:`register`: names this torch lacks are skipped.

        >>> reg = Registry()
        >>> reg.zero_cost("aten::view", "aten::no_such_view", missing_ok=True)
        >>> reg.lookup("aten::view")[1] is ZERO, reg.missing()
        (True, ('aten::no_such_view',))
        """
        self.register(*ops, missing_ok=missing_ok)(ZERO)

    def missing(self) -> tuple[str, ...]:
        """Op names passed with ``missing_ok=True`` that the installed torch does not define.

        Useful to catch typos: on the torch a project is tested with, it should be empty.
        """
        return tuple(self._missing)

    def register_unit(
        self, *functions: Callable, name: str, backward: Callable[..., Cost] | None = None
    ) -> Callable[[Callable[..., Cost]], Callable[..., Cost]]:
        """Decorator: count calls of the torch-level ``functions`` as one unit named ``name``.

        ``backward``, if given, is a formula with the same arguments that costs the unit's
        whole backward pass; it is evaluated at forward time (so it can read which inputs
        require grad) and charged once, as ``<name>.backward``, when the backward pass runs
        the unit's autograd nodes, whichever kernels the device runs there. Without it the
        backward kernels are counted op by op.
        """

        def deco(fn: Callable[..., Cost]) -> Callable[..., Cost]:
            for f in functions:
                self._units[f] = (name, fn, backward)
            return fn

        return deco

    def set_unit_backward(self, name: str, backward: Callable[..., Cost]) -> None:
        """Give the unit(s) named ``name`` a backward formula (see :meth:`register_unit`)."""
        found = [f for f, (n, _, _) in self._units.items() if n == name]
        if not found:
            raise ValueError(f"name: no unit named {name!r} is registered")
        for f in found:
            n, fn, _ = self._units[f]
            self._units[f] = (n, fn, backward)

    def unregister(self, op: OpLike) -> None:
        """Forget the formula of ``op`` (it becomes unsupported again)."""
        self._ops.pop(op_key(op), None)

    def copy(self, *, units: bool = True) -> "Registry":
        """An independent registry with the same entries (without the units if ``units`` is
        False: unit functions then run their aten ops, which are counted op by op)."""
        new = Registry()
        new._ops = dict(self._ops)
        new._units = dict(self._units) if units else {}
        new._missing = list(self._missing)
        return new

    # -- lookup -----------------------------------------------------------------------
    def lookup(self, op: OpLike) -> tuple[str, Callable[..., Cost] | None]:
        """(display name, formula or None if unsupported) for an op."""
        key = op_key(op)
        return str(key), self._ops.get(key)

    def unit(self, function: Any) -> tuple[str, Callable[..., Cost], Callable[..., Cost] | None] | None:
        """(name, formula, backward formula or None) if ``function`` is counted as a unit."""
        try:
            return self._units.get(function)
        except TypeError:  # unhashable callables are never units
            return None

    def units(self) -> dict:
        """function -> (name, formula, backward formula) of every unit (read-only use)."""
        return self._units

    def is_registered(self, op: OpLike) -> bool:
        return op_key(op) in self._ops

    def cost(self, fn: Callable[..., Cost], name: str, out: Any, args: tuple, kwargs: dict) -> Cost:
        """Run a formula and validate what it returns."""
        return _as_cost(fn(out, *args, **kwargs), name)


#: The process-wide default registry, filled by the formula modules of this package.
REGISTRY = Registry()
