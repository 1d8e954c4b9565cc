"""``flopsight list``: the zoo's models, with their parameters (counted on the meta device),
default inputs and where their hyper-parameters come from. Read from :mod:`.catalog`: listing
builds nothing and imports no torch."""

from __future__ import annotations

import argparse
import importlib.util

from ..renderers.numbers import params_to_string
from .catalog import CATALOG

__all__ = ["cmd_list"]


def cmd_list(args: argparse.Namespace) -> int:
    """Print the zoo: name, family, parameters, default inputs, source."""
    have_transformers = importlib.util.find_spec("transformers") is not None
    rows = [("MODEL", "FAMILY", "PARAMS", "DEFAULT INPUTS (batch 1)", "HYPER-PARAMETERS OF")]
    for entry in CATALOG:
        if entry.needs_transformers and not have_transformers:
            rows.append((entry.name, entry.family, "-", "(needs transformers)", entry.source))
        else:
            rows.append((entry.name, entry.family, params_to_string(entry.params), entry.inputs, entry.source))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    if not have_transformers:
        print("\nmodels marked (needs transformers): pip install 'flopsight[transformers]'")
    return 0
