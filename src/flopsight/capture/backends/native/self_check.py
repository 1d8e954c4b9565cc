"""The native recorder checked against the Python path once per process, before it counts.

The recorder is compiled against the installed torch, but what it records rests on rules that
a release (or a build of it) can change: ``RecordFunction``'s layout, which ops are
CompositeImplicitAutograd and whether they decompose on a device, how autograd numbers the
nodes a backward and a recomputed block run. So the first native session of a process first
runs the check the profiler installed (:func:`use`; :mod:`flopsight.native_check` profiles a
small model both ways). If it finds a difference, the recorder is not used in this process,
and one line says why: counts are never wrong, at worst slower.

>>> check(None) is None  # with no recorder there is nothing to check
True
"""

from __future__ import annotations

import sys
from typing import Callable

import torch

__all__ = ["check", "use"]

_checked: dict[int, str | None] = {}  # id(recorder) -> None (agrees) or what differed
_running = [False]
_disagreement: list[Callable[[], str | None]] = []  # the check the profiler installed


def use(disagreement: Callable[[], str | None]) -> None:
    """Check recorders with ``disagreement()``: None when the native recorder counts as the
    Python path does, else what differed. :mod:`flopsight.profiler` installs
    :func:`flopsight.native_check.disagreement`, which runs the profiler (a layer above this one)."""
    _disagreement[:] = [disagreement]


def check(recorder) -> str | None:
    """None when ``recorder`` counts the check's model as the Python path does (checked once
    per process), else what differed. While the check itself runs, None."""
    if recorder is None or _running[0] or not _disagreement:
        return None
    key = id(recorder)
    if key not in _checked:
        _running[0] = True
        try:
            _checked[key] = _disagreement[0]()
        except Exception as e:  # the check could not run: the recorder is not trusted either
            _checked[key] = f"the check raised {type(e).__name__}: {e}"
        finally:
            _running[0] = False
        if _checked[key] is not None:
            print(f"flopsight: the native backend disagrees with the Python path on torch "
                  f"{torch.__version__} ({_checked[key]}); counting with the Python path", file=sys.stderr)
    return _checked[key]
