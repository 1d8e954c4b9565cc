"""Parameter sizes: a ZeRO-3 partition counts by its full size."""

from __future__ import annotations

__all__ = ["param_numel"]


def param_numel(p) -> int:
    """Elements of a parameter; a ZeRO-3 partitioned one (local numel 0) by ``ds_numel``."""
    full = getattr(p, "ds_numel", None)
    return int(full) if full is not None else p.numel()
