"""Ways to switch flopsight on in an existing setup: DeepSpeed's API and engine
(:mod:`.deepspeed`), :func:`~.attach.attach` for any loop driven by a DeepSpeed config, and
callbacks for transformers' Trainer (:mod:`.hf`) and Lightning (:mod:`.lightning`)."""

from .attach import AttachedProfiler, attach
from .deepspeed.config import FlopsProfilerConfig, parse_config

__all__ = ["attach", "AttachedProfiler", "FlopsProfilerConfig", "parse_config"]


def __getattr__(name: str):
    """A submodule, imported the first time it is named (see :mod:`flopsight._lazy`)."""
    from .._lazy import submodule

    return submodule(__name__, name)
