"""The public API is fully annotated: every function a user reaches (``flopsight.__all__``,
``flopsight.deepspeed``, the trainer callbacks) and every public method and property of its
classes states the type of each parameter and of what it returns, so an editor completes it and
a type checker checks the user's calls. mypy over src/ (make typecheck, run by make test) checks
that the annotations hold; this test checks that none is missing, name by name, as a user sees
them (a class inherits nothing it does not define from this check).
"""

from __future__ import annotations

import enum
import importlib
import inspect

import pytest

import flopsight


def _public_objects() -> list[tuple[str, object]]:
    names = [(f"flopsight.{n}", getattr(flopsight, n)) for n in flopsight.__all__]
    deepspeed = importlib.import_module("flopsight.deepspeed")
    names += [(f"flopsight.deepspeed.{n}", getattr(deepspeed, n)) for n in deepspeed.__all__]
    for integration in ("hf", "lightning"):
        try:
            module = importlib.import_module(f"flopsight.integrations.{integration}")
        except ImportError:  # the trainer library is not installed
            continue
        names.append((f"flopsight.integrations.{integration}.FlopsightCallback", module.FlopsightCallback))
    return names


def _unannotated(function) -> list[str]:
    """The parameters of ``function`` without an annotation (``self`` and ``cls`` need none),
    and ``return`` when its result has none (``__init__`` needs none: PEP 484 takes it for
    ``None`` once a parameter is annotated, as mypy does)."""
    signature = inspect.signature(function)
    missing = [p.name for i, p in enumerate(signature.parameters.values())
               if p.annotation is inspect.Parameter.empty and not (i == 0 and p.name in ("self", "cls"))]
    if signature.return_annotation is inspect.Signature.empty and function.__name__ != "__init__":
        missing.append("return")
    return missing


def _functions_of(qualname: str, obj: object) -> list[tuple[str, object]]:
    """The functions a user calls through ``obj``: itself, or a class's own public methods,
    properties' getters and ``__init__``/``__call__``/``__enter__``/``__exit__``."""
    if not inspect.isclass(obj):
        return [(qualname, obj)] if callable(obj) else []
    if issubclass(obj, (BaseException, enum.Enum)):
        return []  # raised or compared, never called with arguments of the user's
    found = []
    for name, member in vars(obj).items():
        if name.startswith("_") and name not in ("__init__", "__call__", "__enter__", "__exit__"):
            continue
        if isinstance(member, property):
            member = member.fget
        elif isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if inspect.isfunction(member):
            found.append((f"{qualname}.{name}", member))
    return found


FUNCTIONS = [f for qualname, obj in _public_objects() for f in _functions_of(qualname, obj)]


def test_the_public_api_has_functions_to_check():
    # a guard against this test checking nothing: the entry points are among them
    names = {name for name, _ in FUNCTIONS}
    assert {"flopsight.get_model_profile", "flopsight.profile", "flopsight.Profiler.__init__",
            "flopsight.FlopsProfiler.start_profile", "flopsight.ProfileResult.to_dict"} <= names


@pytest.mark.parametrize("name, function", FUNCTIONS, ids=[name for name, _ in FUNCTIONS])
def test_every_public_function_is_fully_annotated(name, function):
    assert _unannotated(function) == [], f"{name}: no annotation for {_unannotated(function)}"


def test_a_missing_annotation_is_found():
    def half(x, y: int):
        return x

    assert _unannotated(half) == ["x", "return"]
