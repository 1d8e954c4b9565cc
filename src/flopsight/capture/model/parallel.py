"""How a run is parallelised: world, data-, tensor-, pipeline-, sequence- and expert-parallel
sizes and the ZeRO stage, read off a DeepSpeed engine or the model's ``DeviceMesh``, or given;
and how tensor parallelism splits the model's parameters.

>>> detect_parallel(object(), given={"tp": 2})
{'world': 1, 'tp': 2}
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch

from ..._checks import check_int
from ...result.metadata import PARALLEL_KEYS
from .modules import walk
from .params import MESH_NAMES, fsdp_managed, model_dims, param_numel

__all__ = ["detect_parallel", "engine_parallel", "check_parallel", "warn_data_parallel", "split_params",
           "mesh_coordinates", "parallel_metadata"]


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
    """What a DeepSpeed engine says about its parallelism: data, tensor (``mp_world_size``),
    pipeline, sequence and, with MoE layers, the largest expert-parallel size, and its ZeRO stage."""
    found = {}
    dp = getattr(engine, "dp_world_size", None)
    if dp is None:
        dp = getattr(engine, "seq_dp_world_size", None)
    for key, value in (("dp", dp), ("tp", getattr(engine, "mp_world_size", None)),
                       ("pp", getattr(engine, "num_stages", None)),
                       ("sp", getattr(engine, "sequence_parallel_size", None)),
                       ("ep", _expert_parallel_size(engine))):
        if isinstance(value, int) and value >= 1:
            found[key] = value
    stage = getattr(engine, "zero_optimization_stage", None)
    if callable(stage):
        found["zero_stage"] = int(stage())
    return found


def _deepspeed_experts(model: Any) -> int | None:
    """The largest expert-parallel size of the model's DeepSpeed MoE layers (``ep_size``), read
    without an engine (a profile of ``engine.module``); None without such a layer."""
    if "deepspeed.moe.layer" not in sys.modules or not isinstance(model, torch.nn.Module):
        return None
    sizes = [size for m in walk(model)
             if type(m).__module__ == "deepspeed.moe.layer" and isinstance(size := getattr(m, "ep_size", None), int)]
    return max(sizes) if sizes else None


def _expert_parallel_size(engine: Any) -> int | None:
    """The largest expert-parallel group's size of an engine with MoE layers (DeepSpeed's groups)."""
    if not getattr(engine, "has_moe_layers", False):
        return None
    try:
        from deepspeed.utils import groups

        return groups._get_max_expert_size()
    except Exception:  # DeepSpeed's private bookkeeping moved: the size is not known
        return None


class _Params(NamedTuple):
    """The model's parameters, each once, with the mesh dimensions that split the model for
    each (:func:`~.params.model_dims`), and the ids of those FSDP2 manages: walked once for
    every figure read off them."""

    params: list
    dims: dict  # id(p) -> its model-parallel mesh dimensions
    fsdp: set


def _walked(model: Any) -> _Params:
    if not isinstance(model, torch.nn.Module):
        return _Params([], {}, set())
    modules = walk(model)
    params = list({id(p): p for m in modules for p in m._parameters.values() if p is not None}.values())
    fsdp = fsdp_managed(modules) if params else set()
    return _Params(params, {id(p): model_dims(p, id(p) in fsdp) for p in params}, fsdp)


def _mesh_roles(walked: _Params) -> Iterator[tuple[Any, list[str]]]:
    """Each DTensor parameter's mesh and what each of its dimensions splits ("dp", "tp", ...):
    by their names; unnamed ones split the data under FSDP2, else the model."""
    for p in walked.params:
        mesh = getattr(p, "device_mesh", None)
        if mesh is None:
            continue
        names = getattr(mesh, "mesh_dim_names", None) or ()
        splits = walked.dims[id(p)]
        yield mesh, [MESH_NAMES.get(str(names[i]).lower() if i < len(names) else "", "tp") if i in splits else "dp"
                     for i in range(mesh.ndim)]


def _mesh_parallel(walked: _Params) -> dict:
    """Sizes of the DeviceMesh dimensions the model's DTensor parameters live on, by what they
    split (:func:`_mesh_roles`)."""
    found: dict[str, int] = {}
    for mesh, roles in _mesh_roles(walked):
        sizes: dict[str, int] = {}
        for i, role in enumerate(roles):
            sizes[role] = sizes.get(role, 1) * int(mesh.size(i))
        for role, size in sizes.items():
            found[role] = max(found.get(role, 1), size)
    return found


def mesh_coordinates(model: Any, pipeline: Any = None, walked: _Params | None = None) -> dict | None:
    """This rank's place in the job: its coordinate along each mesh dimension the model's
    DTensor parameters live on (by what it splits, :func:`_mesh_roles`), and ``pp``, its first
    pipeline stage (``pipeline``: a :class:`~..sources.pipeline.PipelineRuns`); None where
    neither tells.

    >>> mesh_coordinates(torch.nn.Linear(2, 2)) is None
    True
    """
    found: dict[str, int] = {}
    for mesh, roles in _mesh_roles(walked if walked is not None else _walked(model)):
        for role, c in zip(roles, mesh.get_coordinate() or ()):
            found.setdefault(role, int(c))
    if pipeline is not None and pipeline.stages:
        found["pp"] = int(pipeline.stages[0])
    return found or None


def split_params(model: Any, walked: _Params | None = None) -> dict:
    """How tensor (sequence, expert) parallelism splits the model's parameters, where it
    does: ``params_of_model``, every parameter counted once at its full size (what one
    process would hold), ``params_replicated``, the parameters every such rank holds whole
    (norms, biases after a row-wise split, modules left unsplit), and ``replicated_modules``,
    the paths of the modules left unsplit (leaves with parameters, none of them a DTensor
    on a model-parallel dimension: a norm outside sequence parallelism, a head left whole),
    whose work every rank of the model-parallel group repeats; {} where none is split.

    >>> split_params(torch.nn.Linear(2, 2))
    {}
    """
    walked = walked if walked is not None else _walked(model)
    fsdp = walked.fsdp
    split = False
    whole = replicated = 0
    for p in walked.params:
        full = int(getattr(p, "ds_numel", None) or p.numel())  # a DTensor's numel is its global one
        local = param_numel(p, id(p) in fsdp)
        dims = walked.dims[id(p)]
        split = split or any(p.device_mesh.size(i) > 1 for i in dims)
        whole += full
        if local == full:
            replicated += local
    if not split:
        return {}
    # left whole: no parameter a DTensor over a model-parallel dimension (split there, or
    # replicated over it as sequence parallelism's norms are: their inputs are split)
    unsplit = [name for name, m in model.named_modules() if not m._modules and m._parameters
               and not any(getattr(p, "device_mesh", None) is not None and walked.dims.get(id(p))
                           for p in m._parameters.values() if p is not None)]
    return {"params_of_model": whole, "params_replicated": replicated, "replicated_modules": tuple(unsplit)}


def parallel_metadata(model: Any, given: dict | None = None, pipeline: Any = None) -> dict:
    """What a result's metadata records of the run's parallelism, the model's parameters walked
    once: ``parallel`` (:func:`detect_parallel`), ``coordinates`` (:func:`mesh_coordinates`)
    and how tensor parallelism splits the parameters (:func:`split_params`).

    >>> parallel_metadata(torch.nn.Linear(2, 2))
    {'parallel': None, 'coordinates': None}
    """
    walked = _walked(model)
    return {"parallel": detect_parallel(model, given=given, pipeline=pipeline, walked=walked),
            "coordinates": mesh_coordinates(model, pipeline, walked), **split_params(model, walked)}


def detect_parallel(model: Any, engine: Any = None, given: dict | None = None, pipeline: Any = None,
                    walked: _Params | None = None) -> dict | None:
    """The run's parallelism: the world size, then what the engine or the model's mesh says
    (and ``pipeline``, the :class:`~..sources.pipeline.PipelineRuns` a stage ran in), then
    ``given`` over them; None in one process with nothing detected or given."""
    dist = torch.distributed
    distributed = dist.is_available() and dist.is_initialized()
    found = {"world": dist.get_world_size() if distributed else 1}
    found.update(engine_parallel(engine) if engine is not None
                 else _mesh_parallel(walked if walked is not None else _walked(model)))
    if engine is None and "ep" not in found:
        ep = _deepspeed_experts(model)
        if ep is not None:
            found["ep"] = ep
    if pipeline is not None and pipeline.ranks > 1:
        found["pp"] = pipeline.ranks
    found.update(given or {})
    split = math.prod(found.get(key, 1) for key in ("tp", "pp", "sp"))
    if "dp" not in found and split > 1 and found["world"] % split == 0:  # the ranks left replicate the model
        found["dp"] = found["world"] // split
    return found if distributed or len(found) > 1 else None
