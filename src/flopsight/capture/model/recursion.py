"""Room on the Python stack for a deep model's profile.

A plain call of a model nested ``d`` modules deep takes about three Python frames per level
(``_wrapped_call_impl``, ``_call_impl``, ``forward``); with global hooks installed, torch's
``_call_impl`` calls the forward through one more frame. So a model nested 1,000 deep needs a
recursion limit of about 4,000 under the profiler, four times Python's default. While a deep
model is profiled the limit is raised to five frames per level above the frames already on
the stack (a margin for the formulas and hooks at the innermost level), and put back
afterwards. The depth itself is measured without recursion (:func:`model_depth`), and so is
every walk of the module tree flopsight makes (:func:`flopsight.capture.model.modules.walk`).

Python 3.12 also bounds the C stack, which each module call uses, whatever the limit: there a
model nested a few hundred deep fails in a plain call too, and the error says how deep it is.

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
from collections.abc import Iterator
from typing import TYPE_CHECKING

from torch import nn

if TYPE_CHECKING:
    from types import FrameType

__all__ = ["deep_enough", "limit_for", "model_depth", "room_for", "FRAMES_PER_LEVEL"]

#: the frames a module level may take under the profiler: four, and one to spare
FRAMES_PER_LEVEL = 5
#: frames beyond the levels: the leaf's own code, the formulas and hooks it runs
_MARGIN = 200
_DEEP = "levels deep"


def limit_for(depth: int, limit: int, used: int = 0) -> int:
    """The recursion limit a model ``depth`` modules deep is profiled under, given the
    current ``limit`` and the ``used`` frames already on the stack: the same for a shallow
    model, else five frames per level above those in use.

    >>> limit_for(12, 1000), limit_for(1000, 1000), limit_for(1000, 9000)
    (1000, 5200, 9000)
    """
    return max(limit, used + FRAMES_PER_LEVEL * depth + _MARGIN)


def model_depth(model: nn.Module) -> int:
    """How deep submodules nest under ``model`` (0: none), found without recursion, so that a
    model too deep for Python's default limit is measured before the limit is raised. A module
    reached again through its own subtree (a cycle) ends that path.

    >>> model_depth(nn.Linear(2, 2)), model_depth(nn.Sequential(nn.Sequential(nn.ReLU()), nn.ReLU()))
    (0, 2)
    """
    heights: dict[int, int] = {}  # id(module) -> how deep its own subtree goes
    on_path: set[int] = set()
    stack: list[tuple[nn.Module, bool]] = [(model, False)]
    while stack:
        module, finished = stack.pop()
        key = id(module)
        children = [c for c in module._modules.values() if c is not None]
        if finished:
            on_path.discard(key)
            # a child not measured is on the path: a cycle, not counted
            heights[key] = 1 + max((heights[id(c)] for c in children if id(c) in heights), default=-1)
        elif key not in heights and key not in on_path:
            on_path.add(key)
            stack.append((module, True))
            stack.extend((c, False) for c in children if id(c) not in heights and id(c) not in on_path)
    return heights[id(model)]


def _frames_in_use() -> int:
    frame: FrameType | None = sys._getframe(1)
    used = 0
    while frame is not None:
        frame, used = frame.f_back, used + 1
    return used


@contextlib.contextmanager
def deep_enough(depth: int) -> Iterator[None]:
    """Raise the recursion limit for a model ``depth`` deep (see :func:`limit_for`) while the
    block runs; the limit is put back unless the block changed it itself. A RecursionError
    that leaves the block says how deep the model is."""
    before = sys.getrecursionlimit()
    deep = depth * FRAMES_PER_LEVEL > before // 2
    needed = limit_for(depth, before, _frames_in_use()) if deep else before
    if needed != before:
        sys.setrecursionlimit(needed)
    try:
        yield
    except RecursionError as e:
        notes = getattr(e, "__notes__", None) or []
        if deep and not any(_DEEP in str(n) for n in notes):
            note = (f"flopsight: the model nests modules {depth} {_DEEP}; it was profiled under a "
                    f"recursion limit of {sys.getrecursionlimit()}, and this Python's C stack may "
                    "allow fewer levels (Python 3.12 bounds it whatever the limit: a plain call "
                    "fails there too)")
            # set as add_note would (Python 3.10 has no add_note, and its stubs no __notes__)
            e.__notes__ = [*notes, note]  # type: ignore[attr-defined]
        raise
    finally:
        if needed != before and sys.getrecursionlimit() == needed:
            sys.setrecursionlimit(before)


def room_for(model: nn.Module):
    """:func:`deep_enough` for ``model``'s depth: around everything a profile does with it,
    torch's own recursive walks (``model.eval()``, ``named_modules()``) included."""
    return deep_enough(model_depth(model))
