"""Where a report goes: :func:`write` writes any report, in any format, to a path or a stream.

Every front-end goes through here (``result.save``, the DeepSpeed facade, the engine,
:func:`flopsight.attach`, the command line, the trainer callbacks), and so do the data
model's own ``render`` and ``save`` methods: this module installs itself as their
:class:`~flopsight.result.reporting.Reporter` when it is imported. So they all treat a
target alike:

* ``subject``: a :class:`~flopsight.ProfileResult`, a diff or a gate's outcome (see
  :func:`render`), or text already rendered, written as it is.
* ``target``: None or ``""`` (DeepSpeed's "no file") is stdout; an open text stream is
  written to; anything else is a path, checked (:func:`check_output_file`, which front-ends
  also call before the model runs), its folder created when missing (as DeepSpeed does),
  the file replaced.
* ``fmt``: None takes a path's extension (:func:`~flopsight.renderers.format_of`; ``.txt``
  and unknown endings are the text report), else text.
* ``options``: :class:`~flopsight.analysis.report_options.ReportOptions`' for a result,
  each format reading those it uses; ``all_modules`` and ``gates`` for a diff.

>>> import io, torch, flopsight
>>> result = flopsight.profile(torch.nn.Linear(4, 2), torch.ones(1, 4), clock=flopsight.FakeClock())
>>> text = write(result, detailed=False)  # doctest: +ELLIPSIS
<BLANKLINE>
-------------------------- DeepSpeed Flops Profiler --------------------------
...
>>> stream = io.StringIO()
>>> write(result, stream, "csv") == stream.getvalue() == result.render("csv")
True
>>> check_output_file(3)
Traceback (most recent call last):
...
TypeError: output_file: expected a path or None, got int
"""

from __future__ import annotations

import os
import sys
from typing import IO, Any

from ..result import reporting
from ..result.profile_result import ProfileResult
from . import format_of
from . import render as render_result

__all__ = ["render", "write", "format_for", "check_output_file", "write_report", "print_report"]


def check_output_file(output_file: Any, arg: str = "output_file") -> None:
    """Raise unless ``output_file`` is None, ``""`` or a path that is not a directory (the
    error names ``arg``)."""
    if output_file is None or output_file == "":
        return
    if not isinstance(output_file, (str, os.PathLike)):
        raise TypeError(f"{arg}: expected a path or None, got {type(output_file).__name__}")
    if os.path.isdir(output_file):
        raise IsADirectoryError(f"{arg}: {os.fspath(output_file)!r} is a directory; expected a file path")


def format_for(target: Any, fmt: str | None = None) -> str:
    """The format a report written to ``target`` takes: ``fmt`` when given, else a path's
    extension (:func:`~flopsight.renderers.format_of`), else (stdout, a stream) text.

    >>> format_for("run.trace.json"), format_for("run.json", "text"), format_for(None)
    ('trace', 'text', 'text')
    """
    if fmt is not None:
        return fmt
    return format_of(target) if isinstance(target, (str, os.PathLike)) and target else "text"


def render(subject: Any, fmt: str = "text", **options: Any) -> str:
    """``subject`` as text in ``fmt``: a :class:`~flopsight.ProfileResult` in any of
    :data:`~flopsight.renderers.FORMATS`; a diff (:class:`~flopsight.analysis.diff.ProfileDiff`)
    as ``"text"``, ``"md"`` or ``"json"``; a gate's outcome (``GateResult``) as its message, a
    diff's ``Caveat`` as its note;
    text as it is."""
    if isinstance(subject, ProfileResult):
        return render_result(subject, fmt, **options)
    if isinstance(subject, str):
        if fmt != "text" or options:
            raise ValueError(f"fmt: text is written as it is: expected 'text' and no options, got {fmt!r}"
                             + (f" and {', '.join(options)}" if options else ""))
        return subject
    # the diff's types and renderer only when a diff is written: most runs never load them
    from ..analysis.diff import Caveat, GateResult, ProfileDiff
    from ..analysis.diff.verdict import Verdict

    if isinstance(subject, ProfileDiff):
        from .diff_renderer import render_diff

        return render_diff(subject, fmt, **options)
    if isinstance(subject, Verdict):
        from .diff_renderer import verdict_text

        return verdict_text(subject, **options)
    if isinstance(subject, (GateResult, Caveat)):
        if fmt != "text" or options:
            raise ValueError(f"fmt: a gate's outcome or a diff's caveat is one line of text: expected 'text' and no "
                             f"options, got {fmt!r}")
        from .diff_renderer import caveat_note, gate_message

        return gate_message(subject) if isinstance(subject, GateResult) else caveat_note(subject)
    raise TypeError(f"subject: expected a ProfileResult, a ProfileDiff, a GateResult, a Caveat or text, "
                    f"got {type(subject).__name__}")


def write(subject: Any, target: str | os.PathLike | IO[str] | None = None, fmt: str | None = None,
          **options: Any) -> str:
    """Render ``subject`` (see :func:`render`) and write it to ``target``; returns the text."""
    if hasattr(target, "write") and not isinstance(target, (str, os.PathLike)):
        text = _text(subject, target, fmt, options)
        target.write(text)
        return text
    check_output_file(target, "target")  # before rendering: a bad path costs nothing
    text = _text(subject, target, fmt, options)
    if target:
        os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
        with open(target, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return text


def _text(subject: Any, target: Any, fmt: str | None, options: dict[str, Any]) -> str:
    if isinstance(subject, str) and fmt is None and not options:
        return subject  # rendered already: written as it is, whatever the file's extension
    return render(subject, format_for(target, fmt), **options)


def write_report(text: str, output_file: str | os.PathLike | None = None) -> None:
    """Write ``text`` as it is (:func:`write`)."""
    write(text, output_file)


def print_report(result: ProfileResult, output_file: str | os.PathLike | None = None, **options: Any) -> str:
    """Write ``result``'s report (:func:`write`): DeepSpeed's name for it."""
    return write(result, output_file, **options)


class _Reporter:
    """This module as the data model's :class:`~flopsight.result.reporting.Reporter`."""

    render = staticmethod(render)
    write = staticmethod(write)


reporting.install(_Reporter())
