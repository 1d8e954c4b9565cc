"""DeepSpeed's ``flops_profiler`` config block: its keys, DeepSpeed's defaults, checked.

Read by :func:`flopsight.attach` and by the engine drop-in (:mod:`.engine`) alike.
"""

from __future__ import annotations

import difflib
import json
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..._checks import is_int

__all__ = ["FlopsProfilerConfig", "parse_config"]

_BLOCK = "flops_profiler"


@dataclass(frozen=True)
class FlopsProfilerConfig:
    """DeepSpeed's ``flops_profiler`` block, with DeepSpeed's defaults.

    ``recompute_fwd_factor`` is accepted so DeepSpeed configs load unchanged, and not used:
    flopsight measures the forward that activation checkpointing re-runs. Two keys are
    flopsight's own (DeepSpeed ignores keys it does not know): ``steps``, how many steps are
    profiled from ``profile_step`` on (the report's times are their medians, with their
    spread), and ``memory``, whether memory is counted too (on unless set to false).
    """

    enabled: bool = False
    profile_step: int = 1
    module_depth: int = -1
    top_modules: int = 1
    detailed: bool = True
    output_file: str | None = None
    recompute_fwd_factor: float = 0.0
    steps: int = 1
    memory: bool = True


# key -> (what it must be, check)
_CHECKS = {
    "enabled": ("a bool", lambda v: isinstance(v, bool)),
    # DeepSpeed takes any value (its engine profiles when global_steps == profile_step, 0 the
    # first step); a negative one would never come, so it is refused here
    "profile_step": ("an int >= 0 (the optimizer steps taken before the profiled one)",
                     lambda v: is_int(v) and v >= 0),
    "module_depth": ("an int >= -1", lambda v: is_int(v) and v >= -1),
    "top_modules": ("an int >= 0", lambda v: is_int(v) and v >= 0),
    "detailed": ("a bool", lambda v: isinstance(v, bool)),
    "output_file": ("a path or None", lambda v: v is None or isinstance(v, (str, os.PathLike))),
    "recompute_fwd_factor": (
        "a non-negative number",
        lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0,
    ),
    "steps": ("a positive int (flopsight's key: steps profiled from profile_step on)", lambda v: is_int(v) and v >= 1),
    "memory": ("a bool (flopsight's key: count memory too)", lambda v: isinstance(v, bool)),
}


def parse_config(config: Mapping[str, Any] | str | os.PathLike) -> FlopsProfilerConfig:
    """The ``flops_profiler`` settings of ``config``: a whole DeepSpeed config (a dict, or
    the path of its JSON file) holding a ``"flops_profiler"`` block, or the block itself.

    Keys the block leaves out take DeepSpeed's defaults (``enabled`` is False), and a config
    without the block means off. Unknown keys are ignored with a warning (DeepSpeed ignores
    them silently); wrong types are errors naming the key. The whole config's other keys are
    DeepSpeed's business.

    >>> parse_config({"train_batch_size": 8, "flops_profiler": {"enabled": True}}).profile_step
    1
    >>> parse_config({"train_batch_size": 8}).enabled
    False
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     cfg = parse_config({"enabled": True, "profile_steps": 3})
    >>> cfg.profile_step
    1
    >>> print(str(caught[0].message).split(";")[0])
    flopsight: config: unknown key 'profile_steps' in the flops_profiler block ignored (did you mean 'profile_step'?)
    """
    if isinstance(config, (str, os.PathLike)):
        with open(config, encoding="utf-8") as f:
            config = json.load(f)
        where = "config file"
    else:
        where = "config"
    if not isinstance(config, Mapping):
        raise TypeError("config: expected a dict (DeepSpeed's config or its flops_profiler block), "
                        f"got {type(config).__name__}")
    if _BLOCK in config:
        block, prefix = config[_BLOCK], f"{where}[{_BLOCK!r}]"
        if not isinstance(block, Mapping):
            raise TypeError(f"{prefix}: expected a dict, got {type(block).__name__}")
    elif any(key in _CHECKS for key in config):  # the block itself
        block, prefix = config, where
    else:  # a DeepSpeed config without the block: profiling is off, as in DeepSpeed
        for key in config:
            if difflib.get_close_matches(str(key), [_BLOCK], n=1, cutoff=0.8):
                warnings.warn(f"flopsight: {where} has no {_BLOCK!r} block, so profiling is off; did you mean "
                              f"{_BLOCK!r} instead of {key!r}?", UserWarning, stacklevel=3)
        return FlopsProfilerConfig()
    unknown = [key for key in block if key not in _CHECKS]
    for key in unknown:  # DeepSpeed ignores them: say so, and go on
        close = difflib.get_close_matches(str(key), list(_CHECKS) + [_BLOCK], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        warnings.warn(
            f"flopsight: {prefix}: unknown key {key!r} in the flops_profiler block ignored{hint}; known keys: "
            f"{', '.join(_CHECKS)}",
            UserWarning,
            stacklevel=3,
        )
    block = {k: v for k, v in block.items() if k in _CHECKS}
    values = {}
    for key, value in block.items():
        expected, ok = _CHECKS[key]
        if not ok(value):
            raise TypeError(f"{prefix}[{key!r}]: expected {expected}, got {value!r}")
        values[key] = value
    if values.get("output_file") == "":  # DeepSpeed treats an empty path as stdout
        values["output_file"] = None
    if values.get("output_file") is not None:
        values["output_file"] = os.fspath(values["output_file"])
    return FlopsProfilerConfig(**values)
