"""Analysis: pure functions from a :class:`~flopsight.ProfileResult` to derived views."""

from .aggregate import DepthSummary, by_depth_and_type, max_depth

__all__ = ["DepthSummary", "by_depth_and_type", "max_depth"]
