"""Where a report goes: one way to check an output file, render the text report and write it.

Every front-end that prints a report (the DeepSpeed facade, :func:`flopsight.attach`,
``python -m flopsight``) goes through here, so they all treat ``output_file`` alike:
None or ``""`` (DeepSpeed's "no file") is stdout, anything else a path, checked before
the model runs; its directory is created when missing, as DeepSpeed does.

>>> import torch, flopsight
>>> result = flopsight.profile(torch.nn.Linear(4, 2), torch.ones(1, 4), clock=flopsight.FakeClock())
>>> text = print_report(result, detailed=False)  # doctest: +ELLIPSIS
<BLANKLINE>
--------------------------------- flopsight ----------------------------------
...
>>> check_output_file(3)
Traceback (most recent call last):
...
TypeError: output_file: expected a path or None, got int
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ..result.profile_result import ProfileResult
from . import format_of, render
from .text_renderer import render_text

__all__ = ["check_output_file", "check_layout", "write_report", "print_report"]


def check_output_file(output_file: Any, arg: str = "output_file") -> None:
    """Raise unless ``output_file`` is None, ``""`` or a path that is not a directory (the
    error names ``arg``)."""
    if output_file is None or output_file == "":
        return
    if not isinstance(output_file, (str, os.PathLike)):
        raise TypeError(f"{arg}: expected a path or None, got {type(output_file).__name__}")
    if os.path.isdir(output_file):
        raise IsADirectoryError(f"{arg}: {os.fspath(output_file)!r} is a directory; expected a file path")


def check_layout(module_depth: Any, top_modules: Any) -> None:
    """Raise, naming the argument, unless ``module_depth`` is an int >= -1 and
    ``top_modules`` an int >= 0 (0 lists no module per depth, as in DeepSpeed).

    >>> check_layout(-1, 0)
    >>> check_layout(-2, 1)
    Traceback (most recent call last):
    ...
    ValueError: module_depth: expected an int >= -1 (-1: every depth), got -2
    """
    if isinstance(module_depth, bool) or not isinstance(module_depth, int) or module_depth < -1:
        raise ValueError(f"module_depth: expected an int >= -1 (-1: every depth), got {module_depth!r}")
    if isinstance(top_modules, bool) or not isinstance(top_modules, int) or top_modules < 0:
        raise ValueError(f"top_modules: expected an int >= 0, got {top_modules!r}")


def write_report(text: str, output_file: str | os.PathLike | None = None) -> None:
    """Write ``text`` to ``output_file`` (replacing it, creating its directory), or to
    stdout when it is None or ``""``."""
    if output_file:
        os.makedirs(os.path.dirname(os.path.abspath(output_file)), exist_ok=True)
        with open(output_file, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


def print_report(result: ProfileResult, output_file: str | os.PathLike | None = None, **options: Any) -> str:
    """Render ``result``, write it (see :func:`write_report`) and return what was written:
    the text report (``options`` are :func:`~flopsight.renderers.text_renderer.render_text`'s),
    or, for an ``output_file`` whose extension names another format (``.json``, ``.csv``,
    ``.md``, ``.html``, ``.trace.json``), that format."""
    fmt = format_of(output_file) if output_file else "text"
    text = render_text(result, **options) if fmt == "text" else render(result, fmt)
    write_report(text, output_file)
    return text
