"""The torch releases flopsight supports and is tested on, and the one line a user of another sees.

The floor is 2.9: on 2.6 the native recorder does not compile, profiling a compiled model
leaves a graph break at the module hook, and ops the formulas use do not exist (README,
"Supported torch", has what was measured).
``make test`` runs the pinned 2.13.0; ``make test-matrix`` (and CI) the other tested releases.

>>> untested("2.13.0"), untested("2.10.1+cu128")
(None, None)
>>> print(untested("2.16.0"))
flopsight: torch 2.16.0 is outside the tested range (2.9 to 2.15); counts may miss the ops it added or renamed
"""

from __future__ import annotations

import sys
import warnings
from typing import TYPE_CHECKING

from ._process import WARNED
from .formulas.availability import release

if TYPE_CHECKING:
    from types import FrameType

__all__ = ["FLOOR", "NEWEST", "TESTED", "UntestedTorchWarning", "untested", "warn_if_untested"]

#: the releases the suite runs on: the floor, the GPU image's, the pinned default and the newest
TESTED = ("2.9.1", "2.11.0", "2.13.0", "2.15.0")
FLOOR, NEWEST = "2.9", "2.15"


class UntestedTorchWarning(UserWarning):
    """The running torch is outside the releases flopsight is tested on; it still runs."""


def untested(version: str) -> str | None:
    """The line to show for torch ``version``, or None inside the tested range."""
    if release(FLOOR) <= release(version) <= release(NEWEST):
        return None
    return (f"flopsight: torch {version} is outside the tested range ({FLOOR} to {NEWEST}); counts may miss "
            "the ops it added or renamed")


def warn_if_untested() -> None:
    """Say so once per process (at the first profile) when the running torch is untested."""
    if not WARNED.first("untested torch"):
        return
    import torch

    line = untested(torch.__version__)
    if line is not None:
        warnings.warn(line, UntestedTorchWarning, stacklevel=_callers_level())


def _callers_level() -> int:
    """The stack level of the first frame outside flopsight (where the user called it)."""
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] == "flopsight":
        frame, level = frame.f_back, level + 1
    return level
