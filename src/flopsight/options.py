"""One frozen set of options for every way into a profile, validated once.

:func:`flopsight.profile`, :class:`flopsight.Profiler`, ``get_model_profile``, the DeepSpeed
engine drop-in, :func:`flopsight.attach`, the trainer callbacks and the command line all build
one :class:`ProfileOptions`; its errors name the field, before the model runs.

>>> ProfileOptions(repeat=3).repeat
3
>>> ProfileOptions(repeat=0)
Traceback (most recent call last):
...
ValueError: repeat: expected a positive int (how many calls to time), got 0
>>> ProfileOptions(memory="yes")
Traceback (most recent call last):
...
TypeError: memory: expected a bool, got str
>>> ProfileOptions.of(ProfileOptions(memory=True), steps=2).memory
True
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any

from torch import nn

from ._checks import check_bool, check_choice, check_int
from .capture.assembly.gather import DEFAULT_GATHER_TIMEOUT, check_gather_timeout
from .capture.backends import check_backend
from .capture.model.parallel import check_parallel
from .capture.runtime.timing import Clock
from .capture.sources.kernels import check_kernels
from .capture.sources.optimizer import check_optimizer
from .formulas import REGISTRY
from .formulas.attention import ATTENTION_CONVENTIONS, attention_registry
from .formulas.registry import Registry

__all__ = ["ProfileOptions", "MODES", "TIMINGS", "CALL_ONLY", "SPAN_ONLY"]

#: What ``mode`` may name: the method that is profiled.
MODES = ("forward", "generate")
#: How latency is kept free of the counting overhead.
TIMINGS = ("auto", "separate", "subtract")
#: options of a profiled call only (``profile()``): a span times what the user runs
CALL_ONLY = ("warm_up", "repeat", "mode", "func_name", "timing")
#: options of a profiled span only (``Profiler`` and what builds on it)
SPAN_ONLY = ("optimizer", "batch_size", "parallel", "steps")


@dataclass(frozen=True)
class ProfileOptions:
    """What a profile measures and how (see :func:`flopsight.profile` for each field).

    Everywhere: ``memory``, ``kernels``, ``attention`` (``"dense"`` or ``"effective"``),
    ``backend`` (``"auto"``, ``"native"``, ``"python"``; None reads ``$FLOPSIGHT_BACKEND``),
    ``ignore_modules`` (module types folded into their parent), ``registry`` (the formulas),
    ``clock``, ``gather_timeout`` (seconds rank 0 waits for each rank; None: no gathering).
    A call (:data:`CALL_ONLY`): ``warm_up``, ``repeat``, ``mode``, ``func_name``, ``timing``.
    A span (:data:`SPAN_ONLY`): ``optimizer``, ``batch_size``, ``parallel``, ``steps``.
    """

    memory: bool = False
    kernels: bool = False
    attention: str = "dense"
    backend: str | None = None
    ignore_modules: Any = None
    registry: Registry | None = None
    clock: Clock | None = None
    gather_timeout: float | None = DEFAULT_GATHER_TIMEOUT
    warm_up: int = 1
    repeat: int = 1
    mode: str = "forward"
    func_name: str | None = None
    timing: str = "auto"
    optimizer: Any = None
    batch_size: int | None = None
    parallel: dict | None = None
    steps: int | None = None

    def __post_init__(self) -> None:
        checked = {
            "memory": check_bool(self.memory, "memory"),
            "kernels": check_kernels(self.kernels),
            "attention": check_choice(self.attention, "attention", ATTENTION_CONVENTIONS),
            "backend": check_backend(self.backend),
            "ignore_modules": _module_types(self.ignore_modules),
            "registry": _check_registry(self.registry),
            "gather_timeout": None if self.gather_timeout is None else check_gather_timeout(self.gather_timeout),
            "warm_up": check_int(self.warm_up, "warm_up", low=0),
            "repeat": check_int(self.repeat, "repeat", low=1, what="how many calls to time"),
            "mode": check_choice(self.mode, "mode", MODES),
            "func_name": _check_name(self.func_name),
            "timing": check_choice(self.timing, "timing", TIMINGS),
            "optimizer": check_optimizer(self.optimizer),
            "batch_size": check_int(self.batch_size, "batch_size", low=1, optional=True),
            "parallel": check_parallel(self.parallel),
            "steps": check_int(self.steps, "steps", low=1, optional=True, what="how many steps to profile"),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @classmethod
    def of(cls, options: ProfileOptions | None = None, **changes: Any) -> ProfileOptions:
        """``options`` (default: all defaults) with ``changes``; an unknown name is a TypeError naming it."""
        if options is not None and not isinstance(options, ProfileOptions):
            raise TypeError(f"options: expected a flopsight.ProfileOptions or None, got {type(options).__name__}")
        if "device_time" in changes:  # its name before "kernels": one name per concept
            warnings.warn("flopsight: device_time= is now kernels= (the same option)", DeprecationWarning, stacklevel=3)
            changes["kernels"] = changes.pop("device_time")
        known = {f.name for f in fields(cls)}
        for name in changes:
            if name not in known:
                raise TypeError(f"{name}: not an option of a profile; options: {', '.join(sorted(known))}")
        return dataclasses.replace(options, **changes) if options is not None else cls(**changes)

    def replace(self, **changes: Any) -> ProfileOptions:
        """A copy with ``changes``, validated again."""
        return ProfileOptions.of(self, **changes)

    def refuse(self, names: Iterable[str], front_end: str, why: str) -> ProfileOptions:
        """Itself, or a ValueError naming the first of ``names`` set away from its default
        (options ``front_end`` does not take, ``why``)."""
        for name in names:
            if getattr(self, name) != _DEFAULTS[name]:
                raise ValueError(f"{name}: {front_end} does not take it ({why})")
        return self

    @property
    def ignore(self) -> Callable[[nn.Module], bool]:
        """Whether a module's calls are not tracked (its costs go to its parent)."""
        types = self.ignore_modules
        return (lambda m: isinstance(m, types)) if types else _never

    @property
    def formulas(self) -> Registry:
        """The registry to count with, under the attention convention."""
        return attention_registry(self.registry or REGISTRY, self.attention)


def _never(module: nn.Module) -> bool:
    return False


def _module_types(ignore_modules: Any) -> tuple[type, ...]:
    """``ignore_modules`` as a tuple of module types (one type, as DeepSpeed users often write
    it, or a list of them)."""
    if not ignore_modules:
        return ()
    if isinstance(ignore_modules, type):
        ignore_modules = (ignore_modules,)
    elif not isinstance(ignore_modules, Iterable) or isinstance(ignore_modules, (str, bytes)):
        raise TypeError(
            f"ignore_modules: expected an nn.Module subclass or a list of them, got {type(ignore_modules).__name__}")
    types = tuple(ignore_modules)
    bad = [t for t in types if not (isinstance(t, type) and issubclass(t, nn.Module))]
    if bad:
        raise TypeError(f"ignore_modules: expected nn.Module subclasses, got {bad[0]!r}")
    return types


def _check_registry(registry: Any) -> Registry | None:
    if registry is not None and not isinstance(registry, Registry):
        raise TypeError(f"registry: expected a flopsight Registry or None, got {type(registry).__name__}")
    return registry


def _check_name(name: Any) -> str | None:
    if name is not None and not isinstance(name, str):
        raise TypeError(f"func_name: expected a method name (str) or None, got {type(name).__name__}")
    return name


#: each field's default: read from the class, not from an instance, whose checks would read the
#: environment ($FLOPSIGHT_BACKEND) and torch.profiler's state when this module is imported
_DEFAULTS = {f.name: f.default for f in fields(ProfileOptions)}
