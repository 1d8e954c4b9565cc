"""Functions of torch (or DeepSpeed) routed through flopsight's while any capture listens.

A :class:`Routes` holds the sources listening and, for each function it routed, where it lives
(a class or a module), its name and its own object. The first source to open routes them
(:meth:`Routes.route`, in :meth:`Routes.install`); the last to close, and
:func:`flopsight._process.reset`, put every one back.

>>> import types
>>> home = types.SimpleNamespace(double=lambda x: 2 * x)
>>> class Plus(Routes):
...     def install(self):
...         self.route(home, "double", lambda own: lambda x: own(x) + 1)
>>> routes = Plus(); routes.open("a source"); home.double(3)
7
>>> routes.close("a source"); home.double(3)
6
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["Routes"]


class Routes:
    """The sources listening, and what was routed: (where, name, its own object)."""

    def __init__(self) -> None:
        self.sources: list[Any] = []
        self.saved: list[tuple[Any, str, Any]] = []

    def install(self) -> None:
        """Route the functions (:meth:`route`): the first source opens."""
        raise NotImplementedError

    def open(self, source: Any) -> None:
        if not self.sources:
            self.install()
        self.sources.append(source)

    def close(self, source: Any) -> None:
        if source in self.sources:
            self.sources.remove(source)
        if not self.sources:
            self.reset()

    def route(self, where: Any, name: str, wrap: Callable[[Any], Callable]) -> None:
        """``where.name`` (``where``'s own, not an inherited one) replaced by ``wrap(own)``."""
        own = vars(where)[name]
        self.saved.append((where, name, own))
        setattr(where, name, functools.wraps(own)(wrap(own)))

    def reset(self) -> None:
        for where, name, own in reversed(self.saved):
            setattr(where, name, own)
        self.saved.clear()
        self.sources.clear()
