"""The model's parameters: their sizes on this rank and their owners.

A ZeRO-3 partition counts by its full size, as does a parameter that data parallelism shards
(FSDP2): DeepSpeed's "params per GPU" is the model's share of a replica. A parameter that
tensor, sequence or expert parallelism splits (a DTensor sharded over such a mesh dimension)
counts by this rank's shard: it is the part of the model this rank holds and computes with.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import cached_property

from torch import nn

from ..._torch_private import dtensor_local, fsdp_module_class

__all__ = ["param_numel", "param_bytes", "ModelParameters", "MESH_NAMES", "model_dims", "fsdp_managed"]

#: DeviceMesh dimension names -> the parallelism they stand for
MESH_NAMES = {"dp": "dp", "data": "dp", "dp_shard": "dp", "dp_replicate": "dp", "fsdp": "dp", "ddp": "dp",
              "hsdp": "dp", "replicate": "dp", "shard": "dp", "dp_shard_cp": "dp",
              "tp": "tp", "tensor": "tp", "mp": "tp", "model": "tp", "pp": "pp", "pipeline": "pp",
              "sp": "sp", "cp": "sp", "seq": "sp", "context": "sp", "ep": "ep", "expert": "ep"}


def model_dims(p, fsdp: bool = False) -> list[int]:
    """The mesh dimensions of DTensor ``p`` that split the model (tensor, sequence, pipeline,
    expert parallel), not its data: by their names; unnamed ones split the model unless FSDP
    manages ``p`` (``fsdp``: its dimensions are then data parallel). [] for a plain tensor.

    >>> import torch
    >>> model_dims(torch.zeros(2))
    []
    """
    mesh = getattr(p, "device_mesh", None)
    if mesh is None or dtensor_local(p) is None:
        return []
    names = getattr(mesh, "mesh_dim_names", None)
    if not names:
        return [] if fsdp else list(range(mesh.ndim))
    return [i for i, name in enumerate(names) if MESH_NAMES.get(str(name).lower(), "dp" if fsdp else "tp") != "dp"]


def fsdp_managed(modules: Iterable[nn.Module]) -> set[int]:
    """The ids of the parameters an FSDP2 module (``fully_shard``) among ``modules`` manages."""
    fsdp = fsdp_module_class()
    if fsdp is None:
        return set()
    return {id(p) for m in modules if isinstance(m, fsdp) for p in m.parameters()}


def _shards(placement) -> bool:
    """Whether a DTensor placement splits a dimension (``Shard``, and FSDP2's strided shard of
    an already split one, which is no ``Shard`` to ``is_shard()``)."""
    return placement.is_shard() or isinstance(getattr(placement, "dim", None), int)


def param_numel(p, fsdp: bool = False) -> int:
    """Elements of a parameter on this rank: a ZeRO-3 partitioned one (local numel 0) by
    ``ds_numel``, a DTensor by its shard over the dimensions that split the model
    (:func:`model_dims`; ``fsdp``: FSDP2 manages it), its full size over the others.

    >>> import torch
    >>> param_numel(torch.zeros(3, 4))
    12
    """
    full = getattr(p, "ds_numel", None)
    if full is not None:
        return int(full)
    dims = model_dims(p, fsdp)
    if not dims:
        return p.numel()
    placements, mesh = p.placements, p.device_mesh
    split = math.prod(mesh.size(i) for i in dims if _shards(placements[i]))
    if split == 1:
        return p.numel()
    local = dtensor_local(p)
    if local is not None and not any(_shards(placements[i]) for i in range(mesh.ndim) if i not in dims):
        return local.numel()  # exact, an uneven shard's too
    return p.numel() // split


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
