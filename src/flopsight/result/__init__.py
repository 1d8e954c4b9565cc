"""The data model of a profile: plain, immutable, serialisable records and views derived
from them.

:mod:`.profile_result` (the whole profile, its JSON), :mod:`.stats` (the one cost record),
:mod:`.tree` (inclusive values), :mod:`.metadata` (the run), records of communication
(:mod:`.communication`), memory (:mod:`.memory`), timeline (:mod:`.timeline`) and device
usage (:mod:`.device_usage`), and the training-step and generate() views
(:mod:`.iteration`, :mod:`.generation`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .communication import Collective
from .metadata import Metadata, Timing
from .profile_result import SCHEMA_VERSION, Coverage, ModelCall, ModuleStats, ProfileResult, load
from .stats import Stats
from .tree import ModuleNode, Phases

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["ProfileResult", "ModuleStats", "ModelCall", "Coverage", "load", "SCHEMA_VERSION", "Stats",
           "ModuleNode", "Phases", "Metadata", "Timing", "Collective"]


def __getattr__(name: str) -> ModuleType:
    """A submodule, imported the first time it is named (see :mod:`flopsight._lazy`)."""
    from .._lazy import submodule

    return submodule(__name__, name)
