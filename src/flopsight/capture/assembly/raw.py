"""What one capture session measured: each source's own typed part, keyed by its type.

A source's ``collect(ctx)`` returns its part (a :class:`~.calls.ModuleCalls`, a
:class:`~.counts.Counts`, a :class:`~.sources.spans.SpanTimes`...) or None when it has nothing to
say; building the result reads the parts it knows, and a part nobody asked for is simply
not there.

>>> from flopsight.capture.charging.counts import Counts
>>> raw = RawCapture(Counts(unsupported={"aten.weird": 1}))
>>> raw.get(Counts).unsupported, raw.get(int)
({'aten.weird': 1}, None)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar

__all__ = ["RawCapture"]

T = TypeVar("T")


class RawCapture:
    """The parts of one capture, one per type (None parts are left out)."""

    def __init__(self, *parts: Any):
        self._parts = {type(p): p for p in parts if p is not None}

    def get(self, kind: type[T]) -> T | None:
        """The part of type ``kind``, or None when no source collected one."""
        return self._parts.get(kind)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._parts.values())

    def __repr__(self) -> str:
        return f"RawCapture({', '.join(type(p).__name__ for p in self)})"
