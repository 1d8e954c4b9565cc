"""Where the data model's ``render`` and ``save`` methods find the renderers.

``result.render(fmt)``, ``result.save(path)`` and ``diff.render(fmt)`` are methods of objects
of the layers below the renderers, kept for users as thin calls into them. Importing the
renderers from here would be an import of a layer above (and a cycle), so they are found by
the module's name when a method is first called (:func:`renderers`): nothing installs itself
at import time, and nothing here imports a layer above.

>>> renderers().__name__
'flopsight.renderers.output'
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["renderers", "summary_table"]

#: the module that renders and writes results, diffs, gates' outcomes and caveats
RENDERERS = "flopsight.renderers.output"
#: the module of a result's short forms: its one-line repr and its summary table
SUMMARY_TABLE = "flopsight.renderers.summary_table"


def renderers() -> ModuleType:
    """:mod:`flopsight.renderers.output` (``render(subject, fmt, **options)``, ``write(subject,
    target, fmt, force=..., **options)``), imported by name on first use."""
    return importlib.import_module(RENDERERS)


def summary_table() -> ModuleType:
    """:mod:`flopsight.renderers.summary_table` (``result_repr``, ``summary``, ``result_html``),
    imported by name on first use."""
    return importlib.import_module(SUMMARY_TABLE)
