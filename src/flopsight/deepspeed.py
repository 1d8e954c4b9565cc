"""``import flopsight.deepspeed; flopsight.deepspeed.install()``: the engine drop-in under its
short, documented name (it lives in :mod:`flopsight.integrations.deepspeed.engine`)."""

from .integrations.deepspeed.engine import EngineProfiler, install, installed, uninstall

__all__ = ["install", "uninstall", "installed", "EngineProfiler"]
