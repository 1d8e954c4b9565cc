"""A package's submodules, imported the first time they are named (``flopsight.renderers.text_renderer``
after ``import flopsight``): each package's ``__getattr__`` calls :func:`submodule`.

>>> submodule("flopsight", "_version").__name__
'flopsight._version'
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["submodule"]


def submodule(package: str, name: str) -> ModuleType:
    """Module ``package.name``, imported now; AttributeError when there is none."""
    if not name.startswith("__"):
        try:
            return importlib.import_module(f"{package}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{package}.{name}":  # the submodule exists and imports something missing
                raise
    raise AttributeError(f"module {package!r} has no attribute {name!r}")
