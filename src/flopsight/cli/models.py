"""What the command line's MODEL names, and how it is built: a zoo name, a factory, or a
transformers config JSON file.

:func:`resolve` turns the string into a :class:`Target` without building anything (a
config is read, a factory's module imported); :meth:`Target.build` builds it on the
device and in the dtype asked for, and returns the model with its inputs (None when a
factory gave none). :func:`choose_device` picks the meta device when the model's
parameters would not fit in memory.

>>> target = resolve("llama-3-70b")
>>> target.kind, target.input_kind, target.model_class
('zoo', 'text', 'LlamaForCausalLM')
>>> resolve("no/such/make.py:build")
Traceback (most recent call last):
...
flopsight.cli.models.BadModel: no such file: no/such/make.py
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.util
import inspect
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from . import zoo

__all__ = ["Target", "BadModel", "UsageError", "resolve", "default_dtype", "choose_device", "available_memory",
           "needed_bytes", "split_factory_output", "call_factory"]


class BadModel(ValueError):
    """MODEL (or what it built) cannot be used: a usage error, shown with exit status 2."""


class UsageError(Exception):
    """An option's value this MODEL cannot use, found after parsing: exit status 2, the
    option named as argparse names it."""

    def __init__(self, option: str, message: str):
        super().__init__(f"argument {option}: {message}")


@dataclass
class Target:
    """MODEL resolved: ``kind`` is ``"zoo"``, ``"factory"`` or ``"config"``. ``config`` and
    ``model_class`` are known before building for zoo and config targets (None for a
    plain-torch zoo model and for factories, which are only known once called)."""

    spec: str
    kind: str
    label: str
    entry: zoo.ZooEntry | None = None
    config: Any = None
    model_class: str | None = None
    factory: Callable | None = None

    @property
    def input_kind(self) -> str | None:
        """What the model takes (see :func:`flopsight.cli.zoo.models.input_kind`); None for a factory."""
        if self.kind == "factory":
            return None
        return self.entry.inputs if self.entry is not None else zoo.input_kind(self.config)

    @property
    def default_seq_len(self) -> int:
        return (self.entry.seq_len if self.entry is not None else None) or 128

    def can_generate(self) -> bool | None:
        """Whether the model has a working ``generate()`` (None: unknown before building)."""
        if self.kind == "factory":
            return None
        if self.model_class is None:  # a plain-torch zoo model
            return False
        import transformers

        cls = getattr(transformers, self.model_class)
        return bool(getattr(cls, "can_generate", lambda: False)())

    def build_model(self) -> nn.Module:
        """A zoo or config model, on torch's current default device and dtype, in eval mode."""
        if self.entry is not None:
            return self.entry.build(self.config)
        if self.model_class is None:  # a factory: build.build_factory calls it
            raise ValueError(f"{self.label}: a factory's model is built by calling it")
        return zoo.build_transformers(self.model_class, self.config)


# -- resolving -----------------------------------------------------------------------------
def _is_factory(spec: str) -> bool:
    where, colon, name = spec.rpartition(":")
    return bool(colon and where and name.isidentifier())


def _is_config(spec: str) -> bool:
    return spec.lower().endswith(".json") or os.path.isfile(os.path.join(spec, "config.json"))


def resolve(spec: str) -> Target:
    """The target ``spec`` names; :class:`BadModel` (or :class:`~flopsight.cli.zoo.models.UnknownModel`,
    with its did-you-mean) when it names nothing usable."""
    if _is_config(spec):
        config = load_config(spec)
        try:
            zoo.input_kind(config)  # fail now, not after building, when the inputs are unknown
        except ValueError as e:
            raise BadModel(str(e)) from None
        return Target(spec, "config", os.path.basename(os.path.normpath(spec)), config=config,
                      model_class=model_class_for(config))
    if _is_factory(spec):
        return Target(spec, "factory", spec, factory=load_factory(spec))
    entry = zoo.lookup(spec)
    if entry.needs_transformers:
        _require_transformers(entry.name)
    return Target(spec, "zoo", entry.name, entry=entry, config=entry.config(),
                  model_class=entry.architecture.model if entry.architecture else None)


def _require_transformers(what: str) -> None:
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise BadModel(f"{what} is built by transformers, which is not installed "
                       "(pip install 'flopsight[transformers]')") from None


# -- config JSON files -----------------------------------------------------------------------
def load_config(path: str) -> Any:
    """The transformers config in a ``config.json`` (a file, or a directory holding one),
    read offline: ``AutoConfig.for_model(model_type, **the rest)``."""
    file = os.path.join(path, "config.json") if os.path.isdir(path) else path
    try:
        with open(file, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise BadModel(f"cannot read {file}: {e.strerror or e}") from None
    except ValueError as e:
        raise BadModel(f"{file} is not valid JSON: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise BadModel(f"{file} has no \"model_type\": not a transformers config")
    _require_transformers(file)
    import transformers

    fields = dict(data)
    model_type = fields.pop("model_type")
    known = list(transformers.CONFIG_MAPPING.keys())
    if model_type not in known:  # transformers' own message lists every known type: 12 KB
        close = difflib.get_close_matches(model_type, known, n=3, cutoff=0.5)
        hint = f"; closest known: {', '.join(close)}" if close else ""
        raise BadModel(f"{file}: unknown model_type {model_type!r} (transformers {transformers.__version__} "
                       f"knows {len(known)} types{hint})")
    try:
        return transformers.AutoConfig.for_model(model_type, **fields)
    except Exception as e:  # an unknown model_type, a field of the wrong type (strict dataclass checks)...
        raise BadModel(f"{file}: transformers cannot make a {model_type!r} config of it: {e}") from None


def model_class_for(config: Any) -> str:
    """The transformers class a config is built as: the first of its ``architectures``
    that transformers has (``LlamaForCausalLM``...), else the bare model (``AutoModel``'s)."""
    import transformers

    for name in getattr(config, "architectures", None) or ():
        if isinstance(getattr(transformers, name, None), type):
            return name
    try:
        # a class, or a tuple of them for a few model types (transformers annotates a pair of classes)
        model: Any = transformers.MODEL_MAPPING[type(config)]
    except KeyError:
        raise BadModel(f"transformers has no model for a {type(config).__name__}; "
                       "name one in the config's \"architectures\"") from None
    # several classes for one config (funnel's: the model and its base): AutoModel builds the first
    return (model[0] if isinstance(model, tuple) else model).__name__


# -- factories ---------------------------------------------------------------------------------
def load_factory(spec: str) -> Callable:
    """The function ``package.module:function`` or ``path/to/file.py:function`` names
    (its module is imported, nothing is called)."""
    where, _, name = spec.rpartition(":")
    module = _import_file(where) if where.endswith(".py") or os.sep in where or "/" in where else _import_module(where)
    function = getattr(module, name, None)
    if not callable(function):
        raise BadModel(f"{where} has no function {name!r}")
    return function


def _import_module(name: str) -> Any:
    # the console script, unlike `python -m`, does not put the working directory on sys.path
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise BadModel(f"cannot import module {name!r}: {e}") from None


def _import_file(path: str) -> Any:
    if not os.path.isfile(path):
        raise BadModel(f"no such file: {path}")
    module_name = "_flopsight_factory_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:  # a suffix no importer reads (not a .py file)
        raise BadModel(f"cannot import {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look their module up here
    folder = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, folder)  # as when the file runs as a script: its neighbours import
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(module_name, None)
        raise BadModel(f"importing {path} failed: {type(e).__name__}: {e}") from e
    finally:
        sys.path.remove(folder)
    return module


def call_factory(factory: Callable, given: dict[str, Any]) -> tuple[Any, list[str]]:
    """``factory(**the options it accepts)``: each of ``given`` (the options the user set)
    that the function names as a parameter (or all, for ``**kwargs``). Returns what it
    returned and the names of the options it did not take."""
    parameters: Mapping[str, inspect.Parameter]
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin or a C function: call it bare
        parameters = {}
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    passed = {k: v for k, v in given.items() if takes_all or k in parameters}
    return factory(**passed), [k for k in given if k not in passed]


def _as_call(inputs: Any) -> tuple[tuple, dict]:
    if isinstance(inputs, dict):
        return (), dict(inputs)
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    return (inputs,), {}


def split_factory_output(out: Any) -> tuple[nn.Module, tuple[tuple, dict] | None]:
    """A factory's return value as (model, (args, kwargs) or None): a model alone, or
    ``(model, inputs)`` where inputs is a tensor, a tuple of arguments or a dict of keyword
    arguments, or ``(model, args, kwargs)``.

    >>> model, call = split_factory_output((torch.nn.Linear(2, 3), torch.ones(1, 2)))
    >>> type(model).__name__, [tuple(t.shape) for t in call[0]], call[1]
    ('Linear', [(1, 2)], {})
    """
    if isinstance(out, nn.Module):
        return out, None
    if isinstance(out, (tuple, list)) and len(out) in (2, 3) and isinstance(out[0], nn.Module):
        if len(out) == 3:
            if out[2] is not None and not isinstance(out[2], dict):
                raise BadModel(f"the factory returned (model, args, {type(out[2]).__name__}); {_ACCEPTED}, the "
                               "third a dict of keyword arguments")
            return out[0], (_as_call(out[1])[0], dict(out[2] or {}))
        return out[0], _as_call(out[1])
    raise BadModel(f"the factory returned {_shape_of(out)}; {_ACCEPTED}")


_ACCEPTED = ("expected a torch.nn.Module, (model, inputs) with inputs a tensor, a tuple of arguments or a dict "
             "of keyword arguments, or (model, args, kwargs)")


def _shape_of(out: Any) -> str:
    """What a factory returned, in a few words: ``int``, ``a tuple of 4 (int, str, ...)``.

    >>> _shape_of(3), _shape_of((1, "a")), _shape_of([])
    ('int', 'a tuple of 2 (int, str)', 'an empty list')
    """
    if isinstance(out, (tuple, list)):
        kind = type(out).__name__
        if not out:
            return f"an empty {kind}"
        items = ", ".join(type(v).__name__ for v in out[:3]) + (", ..." if len(out) > 3 else "")
        return f"a {kind} of {len(out)} ({items})"
    return type(out).__name__


# -- device and dtype ------------------------------------------------------------------------------
@contextlib.contextmanager
def default_dtype(dtype: torch.dtype | None) -> Iterator[None]:
    """torch's default dtype is ``dtype`` inside (parameters are created in it directly)."""
    if dtype is None:
        yield
        return
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def available_memory() -> int | None:
    """Bytes of memory free for a new process to use (Linux's MemAvailable), None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def needed_bytes(params: int, dtype: torch.dtype, mode: str) -> int:
    """Memory the parameters take: once for inference; four times for a training step
    (weights, gradients and AdamW's two moments), activations not included.

    >>> needed_bytes(1_000_000, torch.bfloat16, "forward"), needed_bytes(1_000_000, torch.float32, "train")
    (2000000, 16000000)
    """
    copies = 4 if mode == "train" else 1
    return params * dtype.itemsize * copies


#: share of the available memory the parameters may take before the meta device is picked
#: (the rest is for activations, the KV cache, torch and Python)
HEADROOM = 0.8


def choose_device(params: int, dtype: torch.dtype, mode: str, available: int | None) -> tuple[str, int]:
    """``("meta", needed)`` when the parameters need more than :data:`HEADROOM` of the
    ``available`` memory, else ``("cpu", needed)``.

    >>> choose_device(70_000_000_000, torch.float32, "forward", 24 * 2**30)[0]
    'meta'
    >>> choose_device(11_000_000, torch.float32, "train", 24 * 2**30)[0]
    'cpu'
    """
    need = needed_bytes(params, dtype, mode)
    if available is not None and need > HEADROOM * available:
        return "meta", need
    return "cpu", need
