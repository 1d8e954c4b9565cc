"""Expert parallelism: the tokens each rank's experts processed, each layer's load imbalance,
and the parameters a token uses against those the layer holds.

An expert is a module whose own name says so: ``expert``, ``experts`` (a container of
experts), or a numbered child of one (``experts.3``), as DeepSpeed's MoE (``deepspeed_experts``),
transformers' Mixtral and most hand-written layers name them. A layer is the module holding
the experts (their container's parent). An expert's tokens are the rows its first linear layer
multiplied in the forward: its MACs over its input times its output features (so experts
whose first layer is not linear have no token count). With the ranks gathered, a layer's
imbalance is the busiest rank's tokens over the mean rank's (1.0: even); else one rank's
experts over their mean.

>>> imbalance([30, 10])
1.5
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from ..result.profile_result import ProfileResult

__all__ = ["ExpertLayer", "expert_figures", "imbalance"]

_EXPERT = re.compile(r"expert", re.IGNORECASE)


def imbalance(tokens: list[int]) -> float:
    """The largest of ``tokens`` over their mean (0.0 when there are none)."""
    mean = sum(tokens) / len(tokens) if tokens else 0
    return max(tokens) / mean if mean else 0.0


@dataclass(frozen=True)
class ExpertLayer:
    """One MoE layer (``path``): this rank's ``experts``; the ``tokens`` they processed per
    rank (index: the rank; without gathered ranks, per expert of this rank) and their
    ``imbalance``; ``top_k``, the experts a token went to (the tokens the experts took over
    those the layer's router took, on every rank gathered; None unknown); and the
    parameters: ``params_per_expert``, ``params_total`` (the shared ones and every rank's
    experts) and ``params_active`` (the shared ones and ``top_k`` experts': what one token uses)."""

    path: str
    experts: tuple[str, ...]
    tokens: tuple[int, ...]
    imbalance: float
    top_k: float | None
    params_per_expert: int
    params_total: int
    params_active: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _is_expert(name: str) -> bool:
    parts = name.split(".")
    return bool(_EXPERT.search(parts[-1])) or (len(parts) > 1 and parts[-1].isdigit()
                                               and bool(_EXPERT.search(parts[-2])))


def _experts(result: ProfileResult) -> dict[str, list[str]]:
    """layer path -> its experts (a container's numbered children, or modules named expert):
    the outermost such modules, found walking the tree from the root."""
    layers: dict[str, list[str]] = {}
    todo = [""]
    while todo:
        name = todo.pop()
        children = result.module(name).children
        if not name or not _is_expert(name) or any(_is_expert(c) for c in children):
            todo.extend(reversed(children))  # not an expert (a container's are its children)
            continue
        parts = name.split(".")
        container = len(parts) > 1 and parts[-1].isdigit()
        layers.setdefault(".".join(parts[:-2] if container else parts[:-1]), []).append(name)
    return layers


def _rows(result: ProfileResult, under: str, skip: tuple[str, ...] = ()) -> int | None:
    """The rows the first linear layer at or under ``under`` (outside ``skip``) multiplied, in
    the tree's order."""
    todo = [under]
    while todo:
        name = todo.pop()
        if name in skip:
            continue
        node = result.module(name)
        sizes = node.layer
        if sizes is not None and sizes.kind == "linear" and sizes.inputs * sizes.outputs:
            return node.forward.macs // (sizes.inputs * sizes.outputs)
        todo.extend(reversed(node.children))
    return None


def _layer(result: ProfileResult, layer: str) -> tuple[list[str], int, int | None]:
    """(its experts, their tokens, the tokens its router took) on one rank."""
    experts = _experts(result).get(layer, [])
    return experts, sum(_rows(result, e) or 0 for e in experts), _rows(result, layer, tuple(experts))


def expert_figures(result: ProfileResult) -> list[ExpertLayer]:
    """Each MoE layer of ``result`` (rank 0's gathered one: with every rank's tokens); [] for
    a model without experts."""
    layers = []
    for layer, experts in _experts(result).items():
        per_expert = result.module(experts[0]).params
        held = result.module(layer).params if layer in result.modules else per_expert * len(experts)
        shared = held - sum(result.module(e).params for e in experts)
        ranks = [r for r in result.ranks if r is not None] if result.ranks else []
        if ranks:
            seen = [_layer(r, layer) for r in ranks]
            tokens = tuple(t for _, t, _ in seen)
            routed = [k for _, _, k in seen]
            top_k = sum(tokens) / sum(routed) if all(routed) and sum(routed) else None  # type: ignore[arg-type]
            total = shared + per_expert * sum(len(e) for e, _, _ in seen)
        else:
            tokens = tuple(_rows(result, e) or 0 for e in experts)
            top_k, total = None, held
        active = shared + top_k * per_expert if top_k is not None else None
        layers.append(ExpertLayer(layer, tuple(experts), tokens, imbalance(list(tokens)), top_k, per_expert, total,
                                  active))
    return layers
