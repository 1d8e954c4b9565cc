"""The module tree: :func:`describe` walks a model once and records, per state_dict-style
path, what the result needs (type, parent, children, parameters, ``extra_repr``, layer sizes);
a module object reachable from two parents is listed at each of its paths. Which call of it
ran where is the backends' business (:mod:`.calls`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

from torch import nn

from .._torch_private import original_module
from ..result.records import LayerSizes
from .params import param_numel
from .scripted import is_scripted, type_name

__all__ = ["ModuleInfo", "describe", "compiled_paths", "layer_sizes"]


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
                return LayerSizes(kind, *sizes)
    return None


#: (kind, attribute of the inputs, attribute of the outputs) of the layers whose sizes are read
_LAYER_ATTRIBUTES = (
    ("linear", "in_features", "out_features"),
    ("linear", "nx", "nf"),  # transformers' Conv1D (GPT-2): a linear map
    ("embedding", "num_embeddings", "embedding_dim"),
)


#: module -> (its extra_repr, its layer sizes): a module's configuration does not change
#: between profiles, and some reprs are slow (EmbeddingBag's formats its weight tensor)
_CONFIGURATIONS: "weakref.WeakKeyDictionary[nn.Module, tuple[str, LayerSizes | None]]" = weakref.WeakKeyDictionary()


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


def describe(model: nn.Module) -> dict[str, ModuleInfo]:
    """Every module path of ``model`` in pre-order (shared modules at each of their paths)."""
    infos: dict[str, ModuleInfo] = {}
    params_of: dict[str, dict[int, object]] = {}  # path -> {id: parameter} of its subtree

    def visit(module: nn.Module, path: str, parent: str | None, depth: int, ancestors: tuple[int, ...]) -> dict:
        extra_repr, layer = _configuration(module)
        info = ModuleInfo(path, module, type_name(module), depth, parent, [], extra_repr, 0, 0, layer=layer)
        infos[path] = info
        # a parameter tied into several submodules is one tensor: collect by identity
        subtree = {id(p): p for p in module._parameters.values() if p is not None}
        named: dict[int, ModuleInfo] = {}  # child object -> its first name under this module
        for key, child in module._modules.items():
            if child is None or id(child) in ancestors:  # skip empty slots and cycles
                continue
            if id(child) in named:  # `self.b = self.a`: one module with two names, reported once
                named[id(child)].aliases.append(key)
                continue
            child_path = f"{path}.{key}" if path else key
            info.children.append(child_path)
            subtree.update(visit(child, child_path, path, depth + 1, ancestors + (id(child),)))
            named[id(child)] = infos[child_path]
        params_of[path] = subtree
        return subtree

    visit(model, "", None, 0, (id(model),))
    visit = None  # the closure refers to itself: break the cycle, so the tree is freed at once

    sizes = {k: (param_numel(p), p.requires_grad) for k, p in params_of[""].items()}  # each tensor once
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
    return infos


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


