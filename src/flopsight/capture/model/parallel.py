"""How a run is parallelised: world, data-, tensor-, pipeline- and sequence-parallel sizes
and the ZeRO stage, read off a DeepSpeed engine or the model's ``DeviceMesh``, or given.

>>> detect_parallel(object(), given={"tp": 2})
{'world': 1, 'tp': 2}
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from ..._checks import check_int
from ...result.metadata import PARALLEL_KEYS
from .modules import walk

__all__ = ["detect_parallel", "engine_parallel", "check_parallel", "warn_data_parallel"]

# DeviceMesh dimension names -> our keys
_MESH_NAMES = {"dp": "dp", "data": "dp", "dp_shard": "dp", "dp_replicate": "dp", "fsdp": "dp", "ddp": "dp",
               "tp": "tp", "tensor": "tp", "pp": "pp", "pipeline": "pp", "sp": "sp", "cp": "sp", "seq": "sp",
               "context": "sp"}


def check_parallel(given: Any) -> dict | None:
    """``given`` as a dict of known keys to positive ints (``zero_stage`` 0-3), or an error."""
    if given is None:
        return None
    if not isinstance(given, dict):
        raise TypeError(f"parallel: expected a dict like {{'dp': 2, 'tp': 4}} or None, got {type(given).__name__}")
    for key, value in given.items():
        if key not in PARALLEL_KEYS:
            raise ValueError(f"parallel: unknown key {key!r}; known keys: {', '.join(PARALLEL_KEYS)}")
        check_int(value, f"parallel[{key!r}]", low=0 if key == "zero_stage" else 1)
    return dict(given)


def warn_data_parallel(model: torch.nn.Module) -> None:
    """Warn when ``model`` is, or holds, an ``nn.DataParallel`` over several devices: its
    replicas run in threads of their own, which the counting does not follow (so only what
    runs on the calling thread is counted). On one device it calls its module directly.

    >>> warn_data_parallel(torch.nn.DataParallel(torch.nn.Linear(2, 2)))  # the CPU: no replicas
    """
    for module in walk(model):  # not model.modules(): a deep model may be past the recursion limit
        if isinstance(module, torch.nn.DataParallel) and len(getattr(module, "device_ids", None) or ()) > 1:
            warnings.warn(
                f"flopsight: nn.DataParallel over {len(module.device_ids)} devices runs its replicas in threads "
                "that counting does not follow, so their work is not counted; profile its .module (one "
                "replica's work), or use DistributedDataParallel",
                UserWarning,
                stacklevel=3,
            )
            return


def engine_parallel(engine: Any) -> dict:
    """What a DeepSpeed engine says about its parallelism."""
    found = {}
    dp = getattr(engine, "dp_world_size", None)
    if dp is None:
        dp = getattr(engine, "seq_dp_world_size", None)
    for key, value in (("dp", dp), ("tp", getattr(engine, "mp_world_size", None)),
                       ("pp", getattr(engine, "num_stages", None)),
                       ("sp", getattr(engine, "seq_parallel_world_size", None))):
        if isinstance(value, int) and value >= 1:
            found[key] = value
    stage = getattr(engine, "zero_optimization_stage", None)
    if callable(stage):
        found["zero_stage"] = int(stage())
    return found


def _mesh_parallel(model: Any) -> dict:
    """Sizes of the named dimensions of the DeviceMesh the model's DTensor parameters live on."""
    params = model.parameters() if isinstance(model, torch.nn.Module) else ()
    for p in params:
        mesh = getattr(p, "device_mesh", None)
        names = getattr(mesh, "mesh_dim_names", None)
        if mesh is None:
            continue
        found: dict[str, int] = {}
        for i, name in enumerate(names or ()):
            key = _MESH_NAMES.get(str(name).lower())
            if key is not None:
                found[key] = found.get(key, 1) * int(mesh.size(i))
        if not names:  # an unnamed 1-D mesh: FSDP2's default, data parallel
            found["dp"] = int(mesh.size())
        return found
    return {}


def detect_parallel(model: Any, engine: Any = None, given: dict | None = None) -> dict | None:
    """The run's parallelism: the world size, then what the engine or the model's mesh says,
    then ``given`` over both; None in one process with nothing detected or given."""
    dist = torch.distributed
    distributed = dist.is_available() and dist.is_initialized()
    found = {"world": dist.get_world_size() if distributed else 1}
    found.update(engine_parallel(engine) if engine is not None else _mesh_parallel(model))
    found.update(given or {})
    return found if distributed or len(found) > 1 else None
