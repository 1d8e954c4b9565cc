"""Routing an object's method through a function of ours, and putting it back: how flopsight
wraps ``optimizer.step()``, a DeepSpeed engine's ``step()`` and ``backward()`` and a Trainer's
``training_step`` (the capture's optimizer source and every integration share it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["wrap_method"]

_ABSENT = object()


def wrap_method(obj: Any, name: str, around: Callable[[Callable, tuple, dict], Any]) -> Callable[[], None]:
    """Route every ``obj.<name>(...)`` through ``around(original, args, kwargs)`` (which must
    call ``original``) by giving ``obj`` an attribute of its own; returns the function that
    puts it back as it was.

    >>> class Wrapper:
    ...     def step(self): return "stepped"
    >>> w, seen = Wrapper(), []
    >>> remove = wrap_method(w, "step", lambda call, args, kwargs: seen.append("around") or call(*args, **kwargs))
    >>> w.step(), seen
    ('stepped', ['around'])
    >>> remove(); "step" in vars(w)
    False
    """
    saved = vars(obj).get(name, _ABSENT)
    original = getattr(obj, name)

    def wrapped(*args, **kwargs):
        return around(original, args, kwargs)

    setattr(obj, name, wrapped)

    def remove() -> None:
        if vars(obj).get(name) is wrapped:  # not replaced again since: put it back
            if saved is _ABSENT:
                delattr(obj, name)
            else:
                setattr(obj, name, saved)

    return remove
