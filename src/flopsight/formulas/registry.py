"""The formula registry: which cost function counts which operator.

Two kinds of entries:

* **ops** -- aten (or any ``torch.library``) operators, keyed by their
  ``OpOverloadPacket`` (``torch.ops.aten.mm``), so one formula covers every overload
  (``mm.default``, ``mm.out``). They are seen by the counting dispatch mode.
* **units** -- a few Python-level torch functions (``F.scaled_dot_product_attention``,
  ``torch.lstm``, ...) whose aten decomposition depends on the device or kernel picked.
  They are counted once, as a whole, from their arguments, and the aten ops they run
  underneath are not counted again. That is what makes counts device-independent.

A formula is a pure function of shapes that reads the op's arguments by their schema names:
``fn(out, **arguments) -> Cost`` where ``out`` is the op's result (see :mod:`.binding`).
:meth:`Registry.resolve` pairs an overload with its formula and argument binder once.
Ops that exist only once some module defines them are registered once it has been imported
(:meth:`Registry.when_imported`).

>>> import torch
>>> from flopsight.formulas.registry import Registry, Cost
>>> reg = Registry()
>>> @reg.register(torch.ops.aten.mm)
... def mm(out, self, mat2, **_):
...     return Cost.of_product(self.shape[0] * self.shape[1] * mat2.shape[1])
>>> reg.resolve(torch.ops.aten.mm.default).cost(None, (torch.ones(2, 3), torch.ones(3, 4)), {})
Stats(macs=24, flops=48)
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import torch

from .._process import PROCESS
from .._torch_private import OpOverload, OpOverloadPacket
from ..result.stats import Stats
from .binding import Binder, FormulaSignatureError, binder_for_builtin, check_signature, reject_var_positional
from .bytes_moved import io_bytes_of

__all__ = ["Cost", "Registry", "REGISTRY", "ZERO", "OpNames", "op_key", "Resolved", "Unit", "FormulaSignatureError"]

OpLike = OpOverload | OpOverloadPacket | str


#: What a formula returns: the one stats record (latency and calls left at zero).
Cost = Stats


def _zero_formula(out, /, **_) -> Cost:
    return _FREE


_FREE = Cost()

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


class OpNames:
    """An op namespace whose attributes are qualified names: ``OpNames("aten").mm`` is
    ``"aten::mm"``. The formula modules name their ops this way, so that naming an op the
    running torch does not define (``aten::cholesky`` is gone from 2.15) is a name to skip at
    registration, not an ``AttributeError`` at import.

    >>> aten = OpNames("aten")
    >>> aten.mm, aten._softmax
    ('aten::mm', 'aten::_softmax')
    """

    __slots__ = ("_namespace",)

    def __init__(self, namespace: str):
        self._namespace = namespace

    def __getattr__(self, name: str) -> str:
        if name.startswith("__"):
            raise AttributeError(name)
        return f"{self._namespace}::{name}"


def _as_cost(value: Any, name: str) -> Cost:
    if isinstance(value, Stats):
        return value
    if isinstance(value, tuple) and len(value) == 2:
        return Cost(int(value[0]), int(value[1]))
    raise TypeError(f"formula for {name} returned {value!r}; expected flopsight.Cost(macs, flops)")


#: the attribute ``register(..., reads_values=True)`` sets on a formula
READS_VALUES = "_flopsight_reads_values"


class _ForwardNames:
    """Each class's ``forward`` names, read once per class and code (:data:`PROCESS`'s
    ``"forward names"``): every profile's start asks them of every module, and a static
    lookup costs microseconds. Weak: classes made and dropped are not kept."""

    def __init__(self) -> None:
        self.by_class: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def reset(self) -> None:
        self.by_class = weakref.WeakKeyDictionary()


_FORWARD_NAMES = PROCESS.own("forward names", _ForwardNames)


def forward_names(module) -> tuple[str, ...]:
    """The global and attribute names ``module``'s class's own ``forward`` code uses (what a
    unit's ``may_run`` reads: ``F.multi_head_attention_forward`` in it); () for a forward that
    is not Python code (a scripted module's).

    >>> import torch
    >>> "linear" in forward_names(torch.nn.Linear(2, 2))
    True
    """
    cls = type(module)
    # what the class holds now: a forward reassigned, or its code replaced, is read again
    seen = getattr(cls, "forward", None)
    seen_code = getattr(seen, "__code__", None)
    cached = _FORWARD_NAMES.by_class.get(cls)
    if cached is not None and cached[0] is seen and cached[1] is seen_code:
        return cached[2]
    forward = inspect.getattr_static(cls, "forward", None)
    code = getattr(forward, "__code__", None) if inspect.isfunction(forward) else None
    names = code.co_names if code is not None else ()
    with contextlib.suppress(TypeError):  # a class that cannot be weakly referenced
        _FORWARD_NAMES.by_class[cls] = (seen, seen_code, names)
    return names


class Resolved:
    """An op overload paired with its formula and argument binder (built once per overload).

    ``formula`` is None for an op without one, :data:`ZERO` for a free op. ``error`` is set
    when the formula's parameters do not fit the overload's schema: counting it reports the
    error instead of guessing.
    """

    __slots__ = ("name", "formula", "binder", "error", "io")

    def __init__(self, name: str, formula: Callable[..., Cost] | None, binder: Binder | None,
                 error: Exception | None = None, io: Callable | None = None):
        self.name, self.formula, self.binder, self.error = name, formula, binder, error
        #: ``io(out, args, kwargs) -> bytes`` it moves (see :mod:`.bytes_moved`); None: a view
        self.io = io

    def cost(self, out: Any, args: tuple, kwargs: dict) -> Cost:
        """The op call's cost (raises the signature error, or what the formula raised)."""
        if self.error is not None:
            raise self.error
        formula, binder = self.formula, self.binder
        if formula is None or binder is None:  # no formula, or ZERO's (a free op: no binder)
            if formula is None:
                raise TypeError(f"{self.name}: no formula counts this op")
            return _FREE
        value = formula(out, **binder.bind(args, kwargs))
        return value if type(value) is Stats else _as_cost(value, self.name)


class Unit:
    """A torch function counted as a whole: its forward formula and its backward formula.

    Arguments are bound by the function's Python signature, or, for a builtin such as
    ``torch.lstm``, by the schema of the aten op of the same name whose overload fits the call.
    """

    __slots__ = ("name", "formula", "backward", "backward_entry", "_binders", "reaches", "may_run")

    def __init__(self, name: str, formula: Callable[..., Cost], backward: Callable[..., Cost] | None,
                 binders: list[Binder], reaches: Callable | None = None,
                 may_run: Callable[[list], bool] | None = None):
        self.name, self.formula, self.backward = name, formula, backward
        self.backward_entry = _UnitBackward(self) if backward is not None else None
        self._binders = binders
        #: the builtin unit every call of this function reaches, at the same cost (``F.dropout``
        #: calls ``torch.dropout``): a backend that records builtin units whole needs no handler
        self.reaches = reaches
        #: ``may_run(modules)``: whether a call can happen while these modules are profiled
        #: (None: it always can); where no Python unit can run, no function mode is needed
        self.may_run = may_run

    @classmethod
    def of_function(cls, function: Callable, name: str, formula, backward, reaches=None, may_run=None) -> Unit:
        binder = Binder.of_function(function)
        binders = [binder] if binder is not None else binder_for_builtin(function)
        if not binders:
            raise TypeError(f"register_unit: cannot read the arguments of {function!r} (no signature, no aten schema)")
        return cls(name, formula, backward, binders, reaches, may_run)

    @classmethod
    def of_method(cls, method: Callable, name: str, formula, backward, skip: int = 1) -> Unit:
        """Bound by a method's signature without its first ``skip`` parameters (``self``, ``ctx``)."""
        binder = Binder.of_function(method)
        if binder is None:
            raise TypeError(f"cannot read the arguments of {method!r}")
        return cls(name, formula, backward, [Binder(binder.names[skip:], binder.defaults)])

    def bind(self, args: tuple, kwargs: dict) -> dict[str, Any] | None:
        """The call's arguments by name (None if no schema of the function fits them)."""
        for binder in self._binders:
            if binder.accepts is None or binder.accepts(args, kwargs):
                return binder.bind(args, kwargs)
        return None

    def cost(self, out: Any, bound: dict[str, Any] | None) -> Cost:
        """Forward cost of one call whose arguments :meth:`bind` returned."""
        return _call_bound(self.formula, self.name, out, bound)


def _call_bound(formula: Callable[..., Cost], name: str, out: Any, bound: dict[str, Any] | None) -> Cost:
    if bound is None:
        raise TypeError(f"{name}: no schema of this function fits the call's arguments")
    return _as_cost(formula(out, **bound), name)


class _UnitBackward:
    """A unit's backward formula as an entry of its own, named ``<unit>.backward``."""

    __slots__ = ("name", "formula")

    def __init__(self, unit: Unit):
        if unit.backward is None:
            raise ValueError(f"{unit.name}: a unit without a backward formula has no backward entry")
        self.name, self.formula = f"{unit.name}.backward", unit.backward

    def cost(self, out: Any, bound: dict[str, Any] | None) -> Cost:
        return _call_bound(self.formula, self.name, out, bound)


class Registry:
    """Maps operators and unit functions to formulas."""

    def __init__(self) -> None:
        self._ops: dict[OpOverloadPacket, Callable[..., Cost]] = {}
        self._units: dict[Any, Unit] = {}
        self._module_rules: dict[type, Unit] = {}
        self._functions: dict[type, Unit] = {}
        self._missing: list[str] = []
        self._resolved: dict[Any, Resolved] = {}
        self._tolerant = False  # while the built-in formula modules load (see builtins_loading)
        self._on_import: list[str] = []  # modules whose import registers formulas (when_imported)
        self._waiting: dict[str, Callable[[Registry], Any]] = {}  # of those, not imported yet
        #: grows with every change of an op's formula (what caches of costs are keyed by)
        self.version = 0

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
                if not (missing_ok or self._tolerant) or not isinstance(op, str):
                    raise
                if op not in self._missing:
                    self._missing.append(op)
        return keys

    def register(
        self, *ops: OpLike, missing_ok: bool = False, reads_values: bool = False
    ) -> Callable[[Callable[..., Cost]], Callable[..., Cost]]:
        """Decorator: ``fn`` counts every op in ``ops`` (replacing any earlier formula).

        ``fn(out, **arguments)`` reads the op's arguments by their schema names
        (``str(torch.ops.aten.mm.default._schema)`` shows them); a ``**_`` catch-all takes
        the ones it does not need.

        With ``missing_ok=True``, ops given by name (``"aten::_mps_convolution"``) that the
        installed torch does not define are skipped instead of raising: private kernels come
        and go between releases and builds (CUDA, ROCm, MPS, CPU-only). The
        names skipped are listed by :meth:`missing`.

        ``reads_values=True``: the formula reads tensor values (through
        :func:`~flopsight.formulas.attention.entries.read_values`), so the native backend keeps
        these ops' values and costs each call on them, in Python (a formula that calls
        ``read_values`` itself is known as one without it).

        >>> reg = Registry()
        >>> @reg.register("aten::mm", "aten::no_such_kernel", missing_ok=True)
        ... def mm(out, self, mat2, **_):
        ...     return Cost.of_product(self.shape[0] * self.shape[1] * mat2.shape[1])
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
            reject_var_positional(fn, ", ".join(map(str, keys)) or "no op")
            if reads_values:
                setattr(fn, READS_VALUES, True)
            for key in keys:
                self._ops[key] = fn
            self._resolved.clear()
            self.version += 1
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

    @contextlib.contextmanager
    def builtins_loading(self):
        """While flopsight's own formula modules register, an op name the running torch does
        not define is skipped as with ``missing_ok=True``: ops come and go between releases.
        Which names were skipped, and why that is expected, is checked against
        :data:`flopsight.formulas.availability.ABSENT_ON_PURPOSE` by the suite on every
        tested torch. A user's own registration stays strict unless it says ``missing_ok``."""
        self._tolerant = True
        try:
            yield self
        finally:
            self._tolerant = False

    def missing(self) -> tuple[str, ...]:
        """Op names passed with ``missing_ok=True`` that the installed torch does not define.

        Useful to catch typos: on the torch a project is tested with, it should be empty.
        """
        return tuple(self._missing)

    def when_imported(self, module: str, register: Callable[[Registry], Any]) -> None:
        """Run ``register(self)`` once ``module`` has been imported: at once if it already is,
        else when a capture session next starts after that import (:meth:`register_imported`).

        For ops that exist only once some module defines them, when importing that module with
        flopsight would cost too much (``torch.nn.attention.varlen``'s ``torch_attn`` ops:
        ~1 s). Nothing is hooked into the import system, so importing flopsight leaves the
        user's own imports exactly as they were. A copy of the registry waits on the same
        modules on its own.

        >>> reg = Registry()
        >>> reg.when_imported("sys", lambda r: r.zero_cost("aten::view"))  # imported: at once
        >>> reg.is_registered("aten::view")
        True
        """
        self._on_import.append(module)
        self._waiting[module] = register
        self.register_imported()

    def register_imported(self) -> None:
        """Run the registrations of :meth:`when_imported` whose module has been imported since
        (each capture session calls this as it starts: a dict lookup per waiting module). One
        that fails is warned about, and its ops stay unsupported."""
        for module in [m for m in self._waiting if m in sys.modules]:
            register = self._waiting.pop(module)
            try:
                register(self)
            except Exception as e:
                warnings.warn(f"flopsight: could not register the formulas of {module} ({e}); "
                              "its ops are reported as unsupported", RuntimeWarning, stacklevel=2)

    def modules_on_import(self) -> tuple[str, ...]:
        """The modules whose import registers formulas here (:meth:`when_imported`)."""
        return tuple(self._on_import)

    def register_unit(
        self, *functions: Callable, name: str, backward: Callable[..., Cost] | None = None,
        reaches: Callable | tuple | None = None, may_run: Callable[[list], bool] | None = None,
    ) -> Callable[[Callable[..., Cost]], Callable[..., Cost]]:
        """Decorator: count calls of the torch-level ``functions`` as one unit named ``name``.

        The formula reads the function's arguments by name, like an op formula.
        ``backward``, if given, is a formula with the same arguments that costs the unit's
        whole backward pass; it is evaluated at forward time (so it can read which inputs
        require grad) and charged once, as ``<name>.backward``, when the backward pass runs
        the unit's autograd nodes, whichever kernels the device runs there. Without it the
        backward kernels are counted op by op.

        ``reaches`` (for flopsight's own units): the builtin unit every call reaches with the
        same cost (one per function, or one for all); ``may_run(modules)``: whether a call can
        happen while ``modules`` are profiled (default: always). A native session installs no
        function mode when no unit it cannot record itself may run.
        """
        if not functions:
            raise ValueError("register_unit: pass at least one function")
        targets = reaches if isinstance(reaches, tuple) else (reaches,) * len(functions)
        if len(targets) != len(functions):
            raise ValueError("register_unit: reaches: one builtin per function")

        def deco(fn: Callable[..., Cost]) -> Callable[..., Cost]:
            for f, target in zip(functions, targets):
                self._units[f] = Unit.of_function(f, name, fn, backward, target, may_run)
            return fn

        return deco

    def register_module(
        self, *classes: type[torch.nn.Module], name: str | None = None, backward: Callable[..., Cost] | None = None
    ) -> Callable[[Callable[..., Cost]], Callable[..., Cost]]:
        """Decorator: a rule that counts a whole call of a module of one of ``classes`` (or
        a subclass), replacing the count of everything its subtree runs (fused or custom
        modules whose kernels no formula knows).

        The rule is ``fn(out, module, **forward_arguments)``: the call's output, the module,
        and the arguments of its ``forward`` by name. ``backward`` (same arguments) costs the
        module's whole backward pass, charged once when it runs; without it the backward is
        counted op by op. The tally shows the call as ``name`` (default: the class name).
        """
        if not classes or not all(isinstance(c, type) and issubclass(c, torch.nn.Module) for c in classes):
            raise TypeError(f"register_module: expected nn.Module subclasses, got {classes!r}")

        def deco(fn: Callable[..., Cost]) -> Callable[..., Cost]:
            for c in classes:
                self._module_rules[c] = Unit.of_method(c.forward, name or c.__name__, fn, backward)
            return fn

        return deco

    def has_module_rules(self) -> bool:
        return bool(self._module_rules)

    def module_rule(self, module_type: type) -> Unit | None:
        """The rule for modules of ``module_type`` (the nearest registered base class), or None."""
        if not self._module_rules:
            return None
        for base in module_type.__mro__:
            rule = self._module_rules.get(base)
            if rule is not None:
                return rule
        return None

    def register_function(
        self, *functions: type[torch.autograd.Function], name: str | None = None,
        backward: Callable[..., Cost] | None = None
    ) -> Callable[[Callable[..., Cost]], Callable[..., Cost]]:
        """Decorator: count each ``apply`` of these ``torch.autograd.Function`` subclasses as
        one call, ``fn(out, **forward_arguments)`` (its ``forward``'s arguments by name,
        ``ctx`` left out), instead of the ops it runs. ``backward`` costs its backward pass,
        charged once. The tally shows it as ``name`` (default: the class name).
        """
        if not functions or not all(isinstance(f, type) and issubclass(f, torch.autograd.Function) for f in functions):
            raise TypeError(f"register_function: expected torch.autograd.Function subclasses, got {functions!r}")

        def deco(fn: Callable[..., Cost]) -> Callable[..., Cost]:
            for f in functions:
                # forward(ctx, *args) unless the class uses a separate setup_context
                new_style = getattr(f, "setup_context", None) is not torch.autograd.Function.setup_context
                self._functions[f] = Unit.of_method(f.forward, name or f.__name__, fn, backward,
                                                    skip=0 if new_style else 1)
            return fn

        return deco

    def functions(self) -> dict:
        """autograd.Function subclass -> :class:`Unit` (read-only use)."""
        return self._functions

    def unregister(self, op: OpLike) -> None:
        """Forget the formula of ``op`` (it becomes unsupported again)."""
        self._ops.pop(op_key(op), None)
        self._resolved.clear()
        self.version += 1

    def copy(self, *, units: bool = True) -> Registry:
        """An independent registry with the same entries (without the units if ``units`` is
        False: unit functions then run their aten ops, which are counted op by op)."""
        new = Registry()
        new._ops = dict(self._ops)
        new._units = dict(self._units) if units else {}
        new._module_rules = dict(self._module_rules)
        new._functions = dict(self._functions)
        new._missing = list(self._missing)
        new._on_import, new._waiting = list(self._on_import), dict(self._waiting)
        return new

    # -- lookup -----------------------------------------------------------------------
    def lookup(self, op: OpLike) -> tuple[str, Callable[..., Cost] | None]:
        """(display name, formula or None if unsupported) for an op."""
        key = op_key(op)
        return str(key), self._ops.get(key)

    def resolve(self, op: OpOverload) -> Resolved:
        """``op``'s formula with the binder of its schema, checked against each other once."""
        entry = self._resolved.get(op)
        if entry is None:
            entry = self._resolve(op)
        return entry

    @property
    def resolved(self) -> Callable[[OpOverload], Resolved | None]:
        """What :meth:`resolve` has already built for an op, or None: one dict lookup, for
        the counting mode's per-op path (the cache is emptied, never replaced)."""
        return self._resolved.get

    def _resolve(self, op: OpOverload) -> Resolved:
        name, formula = self.lookup(op)
        binder = error = None
        if formula is not None and formula is not ZERO:
            binder = Binder.of_op(op)
            try:
                check_signature(formula, binder, str(op))
            except FormulaSignatureError as e:
                error = e
        try:
            io = io_bytes_of(op)
        except Exception:  # an op without a readable schema: its bytes are not counted
            io = None
        entry = self._resolved[op] = Resolved(name, formula, binder, error, io)
        return entry

    def unit(self, function: Any) -> Unit | None:
        """The :class:`Unit` that counts ``function``, or None."""
        try:
            return self._units.get(function)
        except TypeError:  # unhashable callables are never units
            return None

    def units(self) -> dict:
        """function -> :class:`Unit` of every unit (read-only use)."""
        return self._units

    def ops(self) -> dict:
        """op packet -> formula of every registered op (read-only use)."""
        return self._ops

    def is_registered(self, op: OpLike) -> bool:
        return op_key(op) in self._ops


#: The process-wide default registry, filled by the formula modules of this package.
REGISTRY = Registry()
