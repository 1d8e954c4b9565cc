"""The module tree: :func:`describe` walks a model once and records, per state_dict-style
path, what the result needs (type, parent, children, parameters, ``extra_repr``, layer sizes);
a module object reachable from two parents is listed at each of its paths. Which call of it
ran where is the backends' business (:mod:`.calls`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import cast

from torch import nn

from ..._torch_private import original_module
from ...result.records import LayerSizes
from .params import fsdp_managed, param_numel
from .scripted import is_scripted, type_name

__all__ = ["ModuleInfo", "walk", "walk_named", "describe", "compiled_paths", "layer_sizes"]


@dataclass
class ModuleInfo:
    path: str
    module: nn.Module
    type_name: str
    depth: int
    parent: str | None
    children: list[str]
    extra_repr: str
    params: int
    params_trainable: int
    shared_with: list[str] = field(default_factory=list)
    aliases: list[str] = field(default_factory=list)  # other names of this object under the same parent
    layer: LayerSizes | None = None  # a linear or embedding layer's sizes
    params_shared: int = 0  # of ``params``, those a module outside its subtree holds too (tied weights)


def layer_sizes(module: nn.Module) -> LayerSizes | None:
    """A linear or embedding layer's sizes, read off its attributes (see :class:`LayerSizes`).

    >>> layer_sizes(nn.Linear(3, 5)), layer_sizes(nn.Embedding(10, 4)), layer_sizes(nn.ReLU())
    (LayerSizes(kind='linear', inputs=3, outputs=5), LayerSizes(kind='embedding', inputs=10, outputs=4), None)
    """
    attributes = vars(module)  # set in __init__; nn.Module.__getattr__ would raise for each one missing
    for kind, inputs, outputs in _LAYER_ATTRIBUTES:
        if inputs in attributes:
            sizes = attributes[inputs], attributes.get(outputs)
            if all(isinstance(v, int) and not isinstance(v, bool) for v in sizes):
                return LayerSizes(kind, *cast("tuple[int, int]", sizes))  # (both ints: checked just above)
    return None


#: (kind, attribute of the inputs, attribute of the outputs) of the layers whose sizes are read
_LAYER_ATTRIBUTES = (
    ("linear", "in_features", "out_features"),
    ("linear", "nx", "nf"),  # transformers' Conv1D (GPT-2): a linear map
    ("embedding", "num_embeddings", "embedding_dim"),
)


#: module -> (its extra_repr, its layer sizes): a module's configuration does not change
#: between profiles, and some reprs are slow (EmbeddingBag's formats its weight tensor)
_CONFIGURATIONS: weakref.WeakKeyDictionary[nn.Module, tuple[str, LayerSizes | None]] = weakref.WeakKeyDictionary()


def _configuration(module: nn.Module) -> tuple[str, LayerSizes | None]:
    known = _CONFIGURATIONS.get(module)
    if known is not None:
        return known
    if is_scripted(module):  # TorchScript's is "original_name=Linear": the type name already says it
        text = ""
    else:
        try:
            text = module.extra_repr()
        except Exception:  # a user's extra_repr must never break profiling
            text = ""
    known = _CONFIGURATIONS[module] = (text, layer_sizes(module))
    return known


def walk_named(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``list(model.named_modules())``: ``model`` and every submodule, each once under its first
    path, in pre-order, found without recursion, so that a model nested deeper than Python's
    recursion limit allows is walked too (see :mod:`.recursion`).

    >>> [(path, type(m).__name__) for path, m in walk_named(nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU())))]
    [('', 'Sequential'), ('0', 'Linear'), ('1', 'Sequential'), ('1.0', 'ReLU')]
    """
    found: list[tuple[str, nn.Module]] = []
    seen: set[int] = set()
    stack = [("", model)]
    while stack:
        path, module = stack.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        found.append((path, module))
        stack.extend(reversed([(f"{path}.{key}" if path else key, child)
                               for key, child in module._modules.items() if child is not None]))
    return found


def walk(model: nn.Module) -> list[nn.Module]:
    """``list(model.modules())``, found without recursion (see :func:`walk_named`)."""
    return [module for _, module in walk_named(model)]


def describe(model: nn.Module) -> dict[str, ModuleInfo]:
    """Every module path of ``model`` in pre-order (shared modules at each of their paths),
    walked without recursion (a model may nest deeper than Python's recursion limit)."""
    infos: dict[str, ModuleInfo] = {}
    params_of: dict[str, dict[int, nn.Parameter]] = {}  # path -> {id: parameter} of its subtree
    aliases: list[tuple[str, str]] = []  # (a child's path, another name of it under the same parent)
    # (module, path, parent, depth, the ids on its path); None after a module: its subtree is done
    stack: list = [(model, "", None, 0, (id(model),))]
    while stack:
        entry = stack.pop()
        if entry[0] is None:
            info = infos[entry[1]]
            # a parameter tied into several submodules is one tensor: collect by identity
            subtree = {id(p): p for p in info.module._parameters.values() if p is not None}
            for child_path in info.children:
                subtree.update(params_of[child_path])
            params_of[info.path] = subtree
            continue
        module, path, parent, depth, ancestors = entry
        extra_repr, layer = _configuration(module)
        info = ModuleInfo(path, module, type_name(module), depth, parent, [], extra_repr, 0, 0, layer=layer)
        infos[path] = info
        named: dict[int, str] = {}  # child object -> its first path under this module
        children = []
        for key, child in module._modules.items():
            if child is None or id(child) in ancestors:  # skip empty slots and cycles
                continue
            if id(child) in named:  # `self.b = self.a`: one module with two names, reported once
                aliases.append((named[id(child)], key))
                continue
            named[id(child)] = child_path = f"{path}.{key}" if path else key
            info.children.append(child_path)
            children.append((child, child_path, path, depth + 1, ancestors + (id(child),)))
        stack.append((None, path))
        stack.extend(reversed(children))  # the first child on top: pre-order
    for child_path, key in aliases:
        infos[child_path].aliases.append(key)

    fsdp = fsdp_managed(info.module for info in infos.values())
    # each tensor once; this rank's shard of one that tensor parallelism splits
    sizes = {k: (param_numel(p, k in fsdp), p.requires_grad) for k, p in params_of[""].items()}
    by_object: dict[int, list[str]] = {}
    for info in infos.values():
        by_object.setdefault(id(info.module), []).append(info.path)
        for k in params_of[info.path]:
            n, trainable = sizes[k]
            info.params += n
            if trainable:
                info.params_trainable += n
    for paths in by_object.values():
        if len(paths) > 1:
            for p in paths:
                infos[p].shared_with = [q for q in paths if q != p]
    _count_shared(infos, params_of, sizes)
    return infos


def _count_shared(infos: dict[str, ModuleInfo], params_of: dict[str, dict[int, nn.Parameter]], sizes: dict) -> None:
    """Each module's ``params_shared``: its parameters that a module outside its subtree holds
    too (a tied weight, or a module reached at two paths). Each module counts them, so
    siblings' shares of the model's params can add up past 100%; the model counts them once."""
    owners: dict[int, list[str]] = {}  # tensor -> the paths of the modules holding it directly
    for info in infos.values():
        for p in info.module._parameters.values():
            if p is not None and info.path not in owners.setdefault(id(p), []):
                owners[id(p)].append(info.path)
    tied = {k: paths for k, paths in owners.items() if len(paths) > 1}
    if not tied:
        return
    for info in infos.values():
        if not info.path:  # the model: nothing outside it (its 0 stays)
            continue
        inside = params_of[info.path]
        prefix = info.path + "."
        info.params_shared = sum(sizes[k][0] for k, paths in tied.items() if k in inside
                                 and any(o != info.path and not o.startswith(prefix) for o in paths))


def compiled_paths(infos: dict) -> tuple[str, ...]:
    """The paths of the profiled tree's ``torch.compile``d modules (their wrappers).

    >>> import torch
    >>> model = nn.Sequential(nn.Linear(2, 2))
    >>> model.append(torch.compile(nn.ReLU(), backend="eager"))
    Sequential(...)
    >>> compiled_paths(describe(model))
    ('1',)
    """
    return tuple(info.path for info in infos.values() if original_module(info.module) is not info.module)


