"""Everything flopsight keeps for the life of a process, in one object: :data:`PROCESS`.

Each piece of process-wide state (the capture sessions running, the native recorder, torch's
compiler stance while counting, the ranks' gathering counters, the warnings given once...) is
an object of the module that owns its behaviour, created once when that module is imported and
held here under one name (:meth:`ProcessState.own`). So one place lists them, and
:func:`reset` puts them all back as a fresh process has them (tests; a loaded library stays
loaded: it cannot be unloaded).

>>> class Counter:
...     def __init__(self): self.n = 0
...     def reset(self): self.n = 0
>>> counter = PROCESS.own("doctest_counter", Counter)
>>> counter.n += 1; reset(); counter.n, PROCESS.doctest_counter is counter
(0, True)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["PROCESS", "ProcessState", "Warned", "WARNED", "reset"]

T = TypeVar("T")


class ProcessState:
    """The process-wide state objects, by name (see the module docstring)."""

    def __init__(self) -> None:
        self._owned: dict[str, Any] = {}
        self._lock = threading.Lock()

    def own(self, name: str, make: Callable[[], T]) -> T:
        """The state object ``name`` (made by ``make()`` the first time): its module calls this
        once, at import, and keeps the object. It has a ``reset()`` that puts it back as made."""
        with self._lock:
            if name not in self._owned:
                self._owned[name] = make()
            return self._owned[name]

    def __getattr__(self, name: str) -> Any:
        owned = self.__dict__.get("_owned", {})
        if name in owned:
            return owned[name]
        raise AttributeError(f"flopsight keeps no process state named {name!r}")

    def names(self) -> list[str]:
        """The names of the state objects made so far."""
        return sorted(self._owned)

    def reset(self) -> None:
        for state in list(self._owned.values()):
            state.reset()


class Warned:
    """The warnings given once per process, by key.

    >>> warned = Warned()
    >>> warned.first("x"), warned.first("x")
    (True, False)
    """

    def __init__(self) -> None:
        self._keys: set[str] = set()

    def first(self, key: str) -> bool:
        """Whether warning ``key`` is given for the first time (it is then noted as given)."""
        if key in self._keys:
            return False
        self._keys.add(key)
        return True

    def reset(self) -> None:
        self._keys.clear()


PROCESS = ProcessState()
#: the warnings flopsight gives once per process
WARNED = PROCESS.own("warned", Warned)


def reset() -> None:
    """Every state object as a fresh process has it (the native recorder stays loaded)."""
    PROCESS.reset()
