"""Argument checks shared by every layer: one message per kind of value, naming the argument.

>>> check_int(3, "repeat", low=1)
3
>>> check_int(True, "repeat", low=1)
Traceback (most recent call last):
...
ValueError: repeat: expected a positive int, got True
>>> check_int(None, "batch_size", low=1, optional=True) is None
True
>>> check_bool(1, "memory")
Traceback (most recent call last):
...
TypeError: memory: expected a bool, got int
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["is_int", "check_int", "check_bool", "check_choice"]


def is_int(value: Any) -> bool:
    """An int that is not a bool (``True`` is an int to Python, never a count to a user)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(value: Any, name: str, *, low: int = 0, optional: bool = False, what: str = "") -> Any:
    """``value`` if it is an int >= ``low`` (or None when ``optional``), else a ValueError
    naming ``name`` (``what``: what the int counts, added to the message)."""
    if value is None and optional:
        return None
    if not is_int(value) or value < low:
        expected = ("a positive int" if low == 1 else f"an int >= {low}") + (" or None" if optional else "") \
            + (f" ({what})" if what else "")
        raise ValueError(f"{name}: expected {expected}, got {value!r}")
    return value


def check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")
    return value


def check_choice(value: Any, name: str, choices: Iterable) -> Any:
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name}: expected one of {', '.join(map(repr, choices))}, got {value!r}")
    return value
