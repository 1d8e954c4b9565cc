"""Hiding a known warning while flopsight's own code runs, without forgetting which warnings
the user has already seen; and the log lines a library's native code writes straight to the
process's stderr (:func:`native_stderr_without`).

``warnings.catch_warnings`` would do, but entering it resets every module's record of the
warnings already shown (``__warningregistry__``): a warning the model issues on each call and
Python showed once would print again after every profile. :func:`ignoring` puts one filter
in front of the others and takes it out again, and the records stay.

>>> import warnings
>>> with ignoring("noisy"):
...     warnings.warn("noisy: nobody needs this")
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import sys
import tempfile
import warnings

__all__ = ["ignoring", "import_torch", "native_stderr_without"]


@contextlib.contextmanager
def ignoring(message: str | None = None, category: type[Warning] = Warning):
    """Ignore the warnings of ``category`` whose message starts with ``message`` (a regular
    expression; None: all of them) while the block runs."""
    entry = ("ignore", re.compile(message, re.I) if message is not None else None, category, None, 0)
    # typeshed declares warnings.filters a read-only Sequence; at runtime it is the list the warnings module reads
    warnings.filters.insert(0, entry)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):  # taken out already by code that reset the filters
            warnings.filters.remove(entry)  # type: ignore[attr-defined]  # a list at runtime, as above


def import_torch():
    """``import torch``, with the one notice a torch-only install prints hidden: torch warns
    "Failed to initialize NumPy" when numpy is missing, and flopsight needs no numpy (`make
    demo` runs without it). Whoever imports torch first in flopsight calls this.

    torch tries NumPy once per process (the outcome is kept in C++), at the first call that
    asks: during ``import torch`` in 2.13, later in releases whose import asks nothing (then
    whatever imports ``torch._dynamo`` first, torch.profiler's start among them, would print
    it). So where numpy is missing, the first ask is made here, with the notice hidden."""
    with ignoring("Failed to initialize NumPy", UserWarning):
        import torch

        if _numpy_missing():
            with contextlib.suppress(Exception):  # "Numpy is not available": the ask, answered
                torch.empty(0).numpy()
    return torch


def _numpy_missing() -> bool:
    """Whether ``import numpy`` would fail (without importing it: 0.1 s where it is there)."""
    if "numpy" in sys.modules:
        return sys.modules["numpy"] is None
    try:
        return importlib.util.find_spec("numpy") is None
    except (ImportError, ValueError):
        return True


@contextlib.contextmanager
def native_stderr_without(line: re.Pattern[bytes]):
    """While the block runs, the process's stderr (file descriptor 2, where C++ code writes
    past Python's ``sys.stderr``) goes to a temporary file; when it ends, every line of it
    that ``line`` does not match is written on to the real stderr, in order. What another
    thread writes meanwhile is delayed to the block's end, never lost. Where descriptor 2 or
    a temporary file cannot be had, the block runs unfiltered."""
    _flush(sys.stderr)
    try:
        held = tempfile.TemporaryFile()
    except OSError:
        yield
        return
    with held:
        try:
            saved = os.dup(2)
        except OSError:  # no stderr at all (a daemon's): nothing to filter
            yield
            return
        try:
            os.dup2(held.fileno(), 2)
            try:
                yield
            finally:
                _flush(sys.stderr)
                os.dup2(saved, 2)
        finally:
            os.close(saved)
            held.seek(0)  # written on whether the block returned or raised
            kept = b"".join(text for text in held.read().splitlines(keepends=True) if not line.match(text))
            with contextlib.suppress(OSError):  # a stderr closed meanwhile: nothing to write to
                while kept:
                    kept = kept[os.write(2, kept):]


def _flush(stream) -> None:
    with contextlib.suppress(Exception):  # None, closed, or a stream without a flush
        stream.flush()
