"""Where a report goes: one way to check an output file, render the text report and write it.

Every front-end that prints a report (the DeepSpeed facade, :func:`flopsight.attach`,
``python -m flopsight``) goes through here, so they all treat ``output_file`` alike:
None or ``""`` (DeepSpeed's "no file") is stdout, anything else a path whose directory
must exist, checked before the model runs.

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

from ..result import ProfileResult, check_parent_dir
from .text_renderer import ParallelInfo, render_text

__all__ = ["check_output_file", "write_report", "print_report"]


def check_output_file(output_file: Any, arg: str = "output_file") -> None:
    """Raise unless ``output_file`` is None, ``""`` or a path in an existing directory
    (the error names ``arg``)."""
    if output_file is None or output_file == "":
        return
    if not isinstance(output_file, (str, os.PathLike)):
        raise TypeError(f"{arg}: expected a path or None, got {type(output_file).__name__}")
    check_parent_dir(output_file, arg)


def write_report(text: str, output_file: str | os.PathLike | None = None) -> None:
    """Write ``text`` to ``output_file`` (replacing it), or to stdout when it is None or ``""``."""
    if output_file:
        with open(output_file, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


def print_report(
    result: ProfileResult,
    output_file: str | os.PathLike | None = None,
    *,
    profile_step: int = 1,
    module_depth: int = -1,
    top_modules: int = 1,
    detailed: bool = True,
    parallel: ParallelInfo | None = None,
    recompute_fwd_factor: float = 0.0,
) -> str:
    """Render ``result`` as the text report, write it (see :func:`write_report`) and
    return the text. The arguments are :func:`~flopsight.renderers.text_renderer.render_text`'s."""
    text = render_text(
        result,
        profile_step=profile_step,
        module_depth=module_depth,
        top_modules=top_modules,
        detailed=detailed,
        parallel=parallel,
        recompute_fwd_factor=recompute_fwd_factor,
    )
    write_report(text, output_file)
    return text
