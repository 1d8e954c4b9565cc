"""What one call costs by its registry entry's formula: the one evaluation every path uses
(the Python backend's dispatch mode through the attribution object, the native backend once
per signature, calls counted whole).

>>> import torch
>>> from flopsight.formulas import REGISTRY
>>> mm = REGISTRY.resolve(torch.ops.aten.mm.default)
>>> evaluate(mm, (torch.ones(2, 4), (torch.ones(2, 3), torch.ones(3, 4)), {}))
Stats(macs=24, flops=48)
"""

from __future__ import annotations

from ..._torch_private import function_modes_disabled
from ...formulas.registry import ZERO
from ...result.stats import ZERO_STATS, Stats

__all__ = ["evaluate"]


def evaluate(entry, payload: tuple) -> Stats | Exception | None:
    """``entry.cost(*payload)`` (an op's ``(out, args, kwargs)``, a unit's ``(out, bound)``):
    its cost; None when the entry has no formula; the exception when its formula fails (a
    formula bug must not break the user's model: the caller lists it as unsupported). Formulas
    run with the function modes off (a formula's own torch calls are not the model's)."""
    formula = entry.formula
    if formula is None:
        return None
    if formula is ZERO:  # most ops (views, copies): no formula to run
        return ZERO_STATS
    try:
        with function_modes_disabled():
            return entry.cost(*payload)
    except Exception as e:
        return e
