"""Costs that hold for every value of a signature's float scalars, learnt once.

A signature names an op's float scalars by value (``p.addcdiv_(m, d, value=-step_size)``),
because a few formulas read them (``value != 1`` is one more multiply). An optimizer's
scalars change every step (Adam's bias corrections, a schedule's learning rate), so each step
brings new signatures whose cost is almost always the same. :class:`ScalarCosts` keeps, per
signature with its floats left out, what the formula observed of them and the cost that
followed: a new signature whose floats give the same observations costs the same, without
decoding it or running its formula again.

What a formula observes is learnt by running it on :class:`Probe` floats, which note each
comparison with a constant (``value == 1``: the only use formulas make of a float); any other
use (arithmetic, conversion, formatting, hashing) makes the cost depend on the value, and then
each signature is costed on its own, as before. A formula could still read a float without
Python seeing it (a C function given it); so a cost is kept only when the probed run and a run
on plain floats nudged within the same observations both give exactly the plain run's cost.

>>> log = Observed()
>>> v = Probe(-0.001, 0, log)
>>> v == 1, log.comparisons, log.opaque
(False, [(0, '__eq__', 1, False)], False)
>>> v * 2 == -0.002, log.opaque  # arithmetic: the value itself is used
(True, True)
"""

from __future__ import annotations

import math
import operator
import struct
from collections.abc import Callable
from typing import Any

__all__ = ["Observed", "Probe", "ScalarCosts", "split_doubles"]

_I32 = struct.Struct("<i")
_F64 = struct.Struct("<d")
_COMPARISONS = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__")
#: float's other methods: each use marks the cost as depending on the value
_VALUE_USES = (
    "__abs__", "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
    "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__divmod__", "__rdivmod__",
    "__pow__", "__rpow__", "__neg__", "__pos__", "__float__", "__int__", "__trunc__", "__floor__", "__ceil__",
    "__round__", "__format__", "__repr__", "__str__", "__hash__", "__getnewargs__", "__reduce__",
    "__reduce_ex__", "is_integer", "as_integer_ratio", "hex", "conjugate",
)  # fmt: skip
_CONSTANTS = (int, float, bool)
_OPERATORS = {name: getattr(operator, name) for name in _COMPARISONS}


class Observed:
    """What a formula did with the probes of one run: the comparisons (probe index, method,
    constant, result), and whether it used a value any other way (``opaque``)."""

    __slots__ = ("comparisons", "opaque")

    def __init__(self) -> None:
        self.comparisons: list[tuple[int, str, Any, bool]] = []
        self.opaque = False


class Probe(float):
    """The ``index``-th float of a signature, noting to ``log`` how a formula uses it."""

    __slots__ = ("_index", "_log")
    _index: int
    _log: Observed

    def __new__(cls, value: float, index: int, log: Observed) -> Probe:
        probe = super().__new__(cls, value)
        probe._index, probe._log = index, log
        return probe

    def __bool__(self) -> bool:
        result = float.__ne__(self, 0.0)
        self._log.comparisons.append((self._index, "__ne__", 0.0, result))
        return result


def _comparison(name: str) -> Callable:
    compare = getattr(float, name)

    def method(self: Probe, other: Any) -> Any:
        result = compare(self, other)
        if type(other) in _CONSTANTS and isinstance(result, bool):
            self._log.comparisons.append((self._index, name, other, result))
        else:  # compared with another probe, or with something float does not know
            self._log.opaque = True
        return result

    method.__name__ = name
    return method


def _value_use(name: str) -> Callable:
    use = getattr(float, name)

    def method(self: Probe, *args: Any) -> Any:
        self._log.opaque = True
        return use(self, *args)

    method.__name__ = name
    return method


for _name in _COMPARISONS:
    setattr(Probe, _name, _comparison(_name))
for _name in _VALUE_USES:
    setattr(Probe, _name, _value_use(_name))


def _holds(comparisons: list[tuple[int, str, Any, bool]], values: tuple[float, ...]) -> bool:
    """Whether ``values`` give every comparison the result it had."""
    for i, name, other, result in comparisons:
        if _OPERATORS[name](values[i], other) is not result:
            return False
    return True


def _nudged(values: tuple[float, ...], comparisons: list) -> tuple[float, ...] | None:
    """``values`` each moved a little (a different float) with the same ``comparisons``, or
    None when some cannot move without changing one (a value equal to a constant)."""
    moved = tuple(v if not math.isfinite(v) else v + max(abs(v), 1e-300) * 2.0 ** -20 for v in values)
    if moved == values or not _holds(comparisons, moved):
        return None
    return moved


class ScalarCosts:
    """Per signature without its floats, the costs learnt: (comparisons, cost) pairs."""

    def __init__(self) -> None:
        self._known: dict[bytes, list[tuple[list, Any]]] = {}

    def clear(self) -> None:
        self._known.clear()

    def find(self, masked: bytes, values: tuple[float, ...]) -> Any | None:
        """The cost of the signature ``masked`` with floats ``values``, if learnt."""
        for comparisons, cost in self._known.get(masked, ()):
            if _holds(comparisons, values):
                return cost
        return None

    def learn(self, masked: bytes, values: tuple[float, ...], cost: Any, evaluate: Callable[[tuple], Any]) -> None:
        """Keep ``cost`` (what ``evaluate(values)`` gave on plain floats) for every value that
        compares as ``values`` do, where it holds so: ``evaluate(floats)`` gives the cost of
        the signature with these floats in place of its own."""
        log = Observed()
        probed = evaluate(tuple(Probe(v, i, log) for i, v in enumerate(values)))
        if log.opaque or probed != cost:
            return
        moved = _nudged(values, log.comparisons)
        if moved is None or evaluate(moved) != cost:
            return
        self._known.setdefault(masked, []).append((log.comparisons, cost))


def split_doubles(key: bytes) -> tuple[bytes, tuple[float, ...]]:
    """(``key`` with its float scalars zeroed, the floats in order) of a signature
    (recorder.cpp's describe: the layout ``.ops._decode`` reads)."""
    positions: list[int] = []
    pos = 4  # the operator's id
    for _ in range(2):  # inputs, outputs
        (n,) = _I32.unpack_from(key, pos)
        pos += 4
        for _ in range(n):
            pos = _skip(key, pos, positions)
    if not positions:
        return key, ()
    masked = bytearray(key)
    values = []
    for p in positions:
        values.append(_F64.unpack_from(key, p)[0])
        masked[p:p + 8] = bytes(8)
    return bytes(masked), tuple(values)


def _skip(key: bytes, pos: int, positions: list[int]) -> int:
    """The position after the value at ``pos``, noting where each float's 8 bytes are."""
    tag = key[pos:pos + 1]
    pos += 1
    if tag == b"t":
        ndim = key[pos + 3]
        return pos + 4 + 16 * ndim
    if tag in (b"n", b"u", b"X"):
        return pos
    if tag == b"d":
        positions.append(pos)
        return pos + 8
    if tag == b"i":
        return pos + 8
    if tag == b"b":
        return pos + 1
    if tag == b"s":
        return key.index(b"\0", pos) + 1
    if tag in (b"I", b"D", b"B"):
        (n,) = _I32.unpack_from(key, pos)
        return pos + 4 + (n if tag == b"B" else 8 * n)
    if tag in (b"L", b"T"):
        (n,) = _I32.unpack_from(key, pos)
        pos += 4
        for _ in range(n):
            pos = _skip(key, pos, positions)
        return pos
    if tag == b"v":
        return pos + 1
    if tag == b"c":
        return pos + 16
    raise ValueError(f"flopsight: unknown value tag {tag!r} in a native signature")
