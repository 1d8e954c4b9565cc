"""Hiding a known warning while flopsight's own code runs, without forgetting which warnings
the user has already seen.

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
import re
import warnings

__all__ = ["ignoring", "import_torch"]


@contextlib.contextmanager
def ignoring(message: str | None = None, category: type[Warning] = Warning):
    """Ignore the warnings of ``category`` whose message starts with ``message`` (a regular
    expression; None: all of them) while the block runs."""
    entry = ("ignore", re.compile(message, re.I) if message is not None else None, category, None, 0)
    warnings.filters.insert(0, entry)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):  # taken out already by code that reset the filters
            warnings.filters.remove(entry)


def import_torch():
    """``import torch``, with the one notice a torch-only install prints hidden: torch warns
    "Failed to initialize NumPy" while it imports when numpy is missing, and flopsight needs
    no numpy (`make demo` runs without it). Whoever imports torch first in flopsight calls this."""
    with ignoring("Failed to initialize NumPy", UserWarning):
        import torch

    return torch
