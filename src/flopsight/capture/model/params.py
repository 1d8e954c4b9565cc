"""The model's parameters: their sizes (a ZeRO-3 partition counts by its full size) and owners."""

from __future__ import annotations

from functools import cached_property

__all__ = ["param_numel", "param_bytes", "ModelParameters"]


def param_numel(p) -> int:
    """Elements of a parameter; a ZeRO-3 partitioned one (local numel 0) by ``ds_numel``."""
    full = getattr(p, "ds_numel", None)
    return int(full) if full is not None else p.numel()


def param_bytes(p) -> int:
    """Bytes of a parameter at its full size (see :func:`param_numel`)."""
    return param_numel(p) * p.element_size()


class ModelParameters:
    """Each parameter of a model once, with the first module path that holds it (a tied
    weight's first owner), as capture sources read them (found when first asked for: a
    timing pass never does).

    >>> from torch import nn
    >>> from flopsight.capture.model.modules import describe
    >>> model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2, bias=False))
    >>> params = ModelParameters(describe(model))
    >>> sorted(params.owner_by_id[id(p)] for p in params.tensors)
    ['0', '0', '1']
    """

    def __init__(self, infos: dict) -> None:
        self._infos = infos

    @cached_property
    def _owners(self) -> dict[int, tuple]:
        # reversed: the first path a parameter has (pre-order) is written last, and wins
        return {id(p): (p, path) for path, info in reversed(self._infos.items())
                for p in info.module._parameters.values() if p is not None}

    @cached_property
    def owned(self) -> list[tuple]:
        """(parameter, path) of each parameter once."""
        return list(self._owners.values())

    @cached_property
    def tensors(self) -> list:
        return [p for p, _ in self._owners.values()]

    @cached_property
    def owner_by_id(self) -> dict[int, str]:
        """id(parameter) -> its module path."""
        return {k: path for k, (_, path) in self._owners.items()}
