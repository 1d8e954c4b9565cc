"""Where the data model's ``render`` and ``save`` methods find the renderers.

``result.render(fmt)``, ``result.save(path)`` and ``diff.render(fmt)`` are methods of objects
of the layers below the renderers, which import those layers: calling them directly would be
an import cycle. So the renderers plug in here instead: :mod:`flopsight.renderers.output`
calls :func:`install` when it is imported, and importing ``flopsight`` imports it, so the
methods always find it. Nothing here imports a layer above.

>>> type(reporter()).__module__    # installed by `import flopsight`
'flopsight.renderers.output'
"""

from __future__ import annotations

import importlib

import os
from typing import IO, Any, Protocol

__all__ = ["Reporter", "install", "reporter"]


class Reporter(Protocol):
    """What the renderers layer provides (see :mod:`flopsight.renderers.output`)."""

    def render(self, subject: Any, fmt: str = "text", **options: Any) -> str:
        """``subject`` (a result, a diff) as text in format ``fmt``."""

    def write(self, subject: Any, target: str | os.PathLike | IO[str] | None = None, fmt: str | None = None, *,
              force: bool = False, **options: Any) -> str:
        """Render ``subject`` and write it to ``target`` (a path, a stream, or stdout); returns the text."""


_reporter: Reporter | None = None


def install(reporter: Reporter) -> None:
    """Make ``reporter`` the one the data model's methods call."""
    global _reporter
    _reporter = reporter


def reporter() -> Reporter:
    """The installed reporter: flopsight's renderers install theirs when they are imported,
    which happens here, by name, the first time a result is rendered before they were (the
    data model names no renderer module in its imports)."""
    if _reporter is None:
        importlib.import_module("flopsight.renderers.output")
    return _reporter
