"""Where a report goes: :func:`write` writes any report, in any format, to a path or a stream.

Every front-end goes through here (``result.save``, the DeepSpeed facade, the engine,
:func:`flopsight.attach`, the command line, the trainer callbacks), and so do the data
model's own ``render`` and ``save`` methods, which find it by name
(:func:`flopsight.result.reporting.renderers`). So they all treat a target alike:

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

import contextlib
import os
import sys
import tempfile
from typing import IO, Any

from ..result.profile_result import ProfileResult
from . import EXTENSIONS, format_of
from . import render as render_result

__all__ = ["render", "write", "format_for", "check_output_file", "write_report", "print_report", "is_report",
           "write_atomically", "TEXT_ENDINGS"]


#: endings written as DeepSpeed's text report besides ``.txt`` (and a name without one)
TEXT_ENDINGS = (".log", ".out")


def check_output_file(output_file: Any, arg: str = "output_file", fmt: str | None = None, *,
                      force: bool = False) -> None:
    """Raise unless ``output_file`` is None, ``""`` (stdout) or a path a report can be
    written to, before anything runs (the error names ``arg``):

    * not a directory; its folder writable, or creatable (the nearest existing one a folder,
      not a file, and writable);
    * with ``fmt`` None, an ending that names a format (:data:`~flopsight.renderers.EXTENSIONS`),
      or ``.log``, ``.out`` or none at all: DeepSpeed's text report, as for ``.txt``;
    * not a file that holds something else (a model's source, its config): an existing file
      is replaced only if it is a report flopsight or DeepSpeed wrote, or with ``force``.

    >>> check_output_file("profile.yaml")
    Traceback (most recent call last):
    ...
    ValueError: output_file: 'profile.yaml' ends in '.yaml', which names no report format; use one of .trace.json, .json, .ops.csv, .csv, .md, .markdown, .html, .htm, .txt (.log, .out or no ending: the text report too)
    """  # noqa: E501  (a doctest's expected output, as printed)
    if output_file is None or output_file == "":
        return
    if not isinstance(output_file, (str, os.PathLike)):
        raise TypeError(f"{arg}: expected a path or None, got {type(output_file).__name__}")
    path = os.fspath(output_file)
    if os.path.isdir(path):
        raise IsADirectoryError(f"{arg}: {path!r} is a directory; expected a file path")
    if fmt is None and not _known_ending(path):
        ending = os.path.splitext(path)[1]
        raise ValueError(f"{arg}: {path!r} ends in {ending!r}, which names no report format; use one of "
                         f"{', '.join(EXTENSIONS)} ({', '.join(TEXT_ENDINGS)} or no ending: the text report too)")
    folder = _existing_folder(path)
    if not os.path.isdir(folder):  # "report.html/r.json": no folder can be made where a file is
        what = "a file" if os.path.isfile(folder) else "a broken link"
        raise NotADirectoryError(f"{arg}: cannot write {path!r}: {folder!r} is {what}, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(f"{arg}: cannot write {path!r}: the folder {folder!r} is not writable")
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            raise PermissionError(f"{arg}: cannot write {path!r}: the file is read-only")
        if not os.path.isfile(path):  # /dev/null, a pipe: written to as they are, never replaced
            return
        if not force and not is_report(path):
            raise FileExistsError(f"{arg}: {path!r} exists and is not a report flopsight or DeepSpeed wrote (a "
                                  "model's source or config?); it is left as it is: choose another name, or "
                                  "force it (force=True, --force)")


def _known_ending(path: str) -> bool:
    name = os.path.basename(path).lower()
    ending = os.path.splitext(name)[1]
    return ending in ("", *TEXT_ENDINGS) or any(name.endswith(e) for e in EXTENSIONS)


def _existing_folder(path: str) -> str:
    """The folder ``path`` goes in, or its nearest existing ancestor (where the missing
    folders would be created): a file when one is in the way."""
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(folder):
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return folder


#: what the start of each report holds: the text report's banner (DeepSpeed's too), the
#: JSON's and the trace's keys, the HTML page's data block, the Markdown's title, the CSVs' header
_REPORT_MARKS = ("Flops Profiler", '"schema_version"', '"generator": "flopsight', "flopsight-data",
                 "### flopsight:", "rank,module,type,")


def is_report(path: str) -> bool:
    """Whether the file at ``path`` is a report flopsight (any format) or DeepSpeed wrote: an
    empty file, or one whose first 64 KB name either.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
    ...     _ = f.write("def build(): ...")
    >>> is_report(f.name)
    False
    """
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return False
    if not head.strip():
        return True
    text = head.decode("utf-8", errors="replace")
    return any(mark in text for mark in _REPORT_MARKS)


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


def write(subject: Any, target: str | os.PathLike | IO[str] | None = None, fmt: str | None = None, *,
          force: bool = False, **options: Any) -> str:
    """Render ``subject`` (see :func:`render`) and write it to ``target``; returns the text.
    A path is checked first (:func:`check_output_file`; ``force`` replaces a file that is not
    a report) and written atomically: a failed write leaves the file that was there."""
    if target is not None and hasattr(target, "write") and not isinstance(target, (str, os.PathLike)):
        text = _text(subject, target, fmt, options)
        target.write(text)
        return text
    # before rendering: a bad path costs nothing; pre-rendered text goes to any name
    check_output_file(target, "target", fmt if fmt is not None or not isinstance(subject, str) else "text",
                      force=force)
    text = _text(subject, target, fmt, options)
    if target:
        write_atomically(os.fspath(target), text)
    else:
        sys.stdout.write(text)
    return text


def write_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder renamed over it:
    a full disk or a crash midway leaves the old file whole, never a truncated one. A path that
    is not a regular file (``/dev/null``, a pipe) is written to directly: renaming over it
    would replace the device. Not flushed to the disk (no ``fsync``): that only matters when
    the machine itself goes down, and costs milliseconds inside a training step (the DeepSpeed
    engine prints its profile from inside ``engine.step()``).

    >>> write_atomically(os.devnull, "nothing")
    >>> os.path.isfile(os.devnull)
    False
    """
    if os.path.exists(path) and not os.path.isfile(path):
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        if os.path.exists(path):
            os.chmod(temporary, os.stat(path).st_mode & 0o7777)  # the file keeps its permissions
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temporary, 0o666 & ~umask)  # as open() would have made it
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


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

