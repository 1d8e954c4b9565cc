"""Room on the Python stack for a deep model's profile.

A plain call of a model nested ``d`` modules deep takes about four Python frames per level
(``__call__``, ``_call_impl``, ``forward``, the child's call); with global hooks installed,
torch's ``_call_impl`` calls the forward through one more frame, so under the profiler a
model hits Python's recursion limit at four fifths of the depth a plain call reaches (197
levels against 248 at the default limit of 1000). While a deep model is profiled the limit
is raised by two frames per level, and put back afterwards.

>>> import sys
>>> before = sys.getrecursionlimit()
>>> with deep_enough(depth=600):
...     sys.getrecursionlimit() > before
True
>>> sys.getrecursionlimit() == before
True
"""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator

__all__ = ["deep_enough", "limit_for"]


def limit_for(depth: int, limit: int) -> int:
    """The recursion limit a model ``depth`` modules deep is profiled under, given the
    current ``limit``: the same for a shallow model, two more frames per level for a deep one.

    >>> limit_for(12, 1000), limit_for(248, 1000)
    (1000, 1596)
    """
    return limit + 2 * depth + 100 if 8 * depth > limit else limit


@contextlib.contextmanager
def deep_enough(depth: int) -> Iterator[None]:
    """Raise the recursion limit for a model ``depth`` deep (see :func:`limit_for`) while the
    block runs; the limit is put back unless the block changed it itself."""
    before = sys.getrecursionlimit()
    needed = limit_for(depth, before)
    if needed == before:
        yield
        return
    sys.setrecursionlimit(needed)
    try:
        yield
    finally:
        if sys.getrecursionlimit() == needed:
            sys.setrecursionlimit(before)
