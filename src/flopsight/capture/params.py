"""Parameter sizes: a ZeRO-3 partition counts by its full size."""

from __future__ import annotations

__all__ = ["param_numel", "param_bytes"]


def param_numel(p) -> int:
    """Elements of a parameter; a ZeRO-3 partitioned one (local numel 0) by ``ds_numel``."""
    full = getattr(p, "ds_numel", None)
    return int(full) if full is not None else p.numel()


def param_bytes(p) -> int:
    """Bytes of a parameter at its full size (see :func:`param_numel`)."""
    return param_numel(p) * p.element_size()
