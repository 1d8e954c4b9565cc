"""Renderers: one file per format, each only formatting a report model
(:class:`~flopsight.analysis.report.Report`).

:func:`render` is the one way in for a result (``result.render(fmt)`` and, through
:mod:`.output`, ``result.save(path)`` call it): its options become one checked
:class:`~flopsight.analysis.report_options.ReportOptions`, the report model is made of the
result and them, and each format reads the sections and fields it uses.
A file's format comes from its extension (:func:`format_of`), the text
report for ``.txt`` and anything unknown, as DeepSpeed writes its report whatever the
file's name.

>>> format_of("run.trace.json"), format_of("run.json"), format_of("run.ops.csv"), format_of("report.log")
('trace', 'json', 'ops_csv', 'text')
"""

from __future__ import annotations

import importlib
import os
from typing import Any

__all__ = ["FORMATS", "EXTENSIONS", "render", "format_of"]

#: format -> (module in this package, its function of a :class:`~flopsight.analysis.report.Report`)
FORMATS = {
    "text": ("text_renderer", "format_text"),
    "json": ("json_renderer", "format_json"),
    "csv": ("csv_renderer", "format_csv"),
    "ops_csv": ("csv_renderer", "format_ops_csv"),
    "md": ("markdown_renderer", "format_markdown"),
    "html": ("html_renderer", "format_html"),
    "trace": ("trace_renderer", "format_trace"),
}

#: file name ending -> format, longest ending first
EXTENSIONS = {
    ".trace.json": "trace",
    ".json": "json",
    ".ops.csv": "ops_csv",
    ".csv": "csv",
    ".md": "md",
    ".markdown": "md",
    ".html": "html",
    ".htm": "html",
    ".txt": "text",
}


def format_of(path: str | os.PathLike) -> str:
    """The format a file named ``path`` is written in: by its ending, else ``"text"``."""
    name = os.fspath(path).lower()
    for ending, fmt in EXTENSIONS.items():
        if name.endswith(ending):
            return fmt
    return "text"


def render(result, fmt: str = "text", **options: Any) -> str:
    """``result`` as ``fmt`` (one of :data:`FORMATS`); ``options`` are
    :class:`~flopsight.analysis.report_options.ReportOptions`' (a name that is none is a
    TypeError naming it)."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    # the report model (and torch) only when something is rendered: the formats' names,
    # numbers.py and format_of are read by the command line's parser, which imports no torch
    from ..analysis.report import Report
    from ..analysis.report_options import ReportOptions

    module, function = FORMATS[fmt]
    return getattr(importlib.import_module(f"{__name__}.{module}"), function)(
        Report(result, ReportOptions.of(**options)))


def __getattr__(name: str):
    """A submodule, imported the first time it is named (see :mod:`flopsight._lazy`)."""
    from .._lazy import submodule

    return submodule(__name__, name)
