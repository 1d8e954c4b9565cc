"""``flopsight list``: the zoo's models, with their parameters (counted on the meta device),
default inputs and where their hyper-parameters come from."""

from __future__ import annotations

import argparse

import torch

from ..renderers.numbers import params_to_string
from . import zoo

__all__ = ["cmd_list"]


def _zoo_row(entry: zoo.ZooEntry, have_transformers: bool) -> tuple[str, ...]:
    if entry.needs_transformers and not have_transformers:
        return entry.name, entry.family, "-", "(needs transformers)", entry.source
    config = entry.config()
    with torch.device("meta"):  # no memory, no initialisation: only the shapes are made
        params = zoo.param_count(entry.build(config))
    specs = zoo.input_specs(entry.inputs, config, seq_len=entry.seq_len or 128)
    return entry.name, entry.family, params_to_string(params), zoo.describe_specs(specs), entry.source


def cmd_list(args: argparse.Namespace) -> int:
    """Print the zoo: name, family, parameters (counted on the meta device), default inputs, source."""
    try:
        import transformers  # noqa: F401

        have_transformers = True
    except ImportError:
        have_transformers = False
    rows = [("MODEL", "FAMILY", "PARAMS", "DEFAULT INPUTS (batch 1)", "HYPER-PARAMETERS OF")]
    rows += [_zoo_row(entry, have_transformers) for entry in zoo.ZOO.values()]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    if not have_transformers:
        print("\nmodels marked (needs transformers): pip install 'flopsight[transformers]'")
    return 0
