"""Ways to switch flopsight on in an existing training setup without changing the loop."""

from .config import AttachedProfiler, FlopsProfilerConfig, attach, parse_config

__all__ = ["attach", "AttachedProfiler", "FlopsProfilerConfig", "parse_config"]
