"""flopsight: exact per-module parameters, MACs, FLOPs and latency for PyTorch models.

>>> import torch, flopsight
>>> model = torch.nn.Linear(16, 4)
>>> flopsight.profile(model, torch.ones(8, 16)).total.forward.macs
512
"""

__version__ = "0.1.0"

from .capture.dispatch import UnsupportedOpWarning
from .capture.timing import FakeClock
from .formulas import REGISTRY, Cost
from .profiler import Profiler, profile
from .result import ModuleStats, OpStats, PhaseStats, ProfileResult, load


def register_formula(*ops, registry=None):
    """Decorator: count ``ops`` (aten or ``torch.library`` ops) with ``fn(out, *args, **kwargs) -> Cost``.

    >>> import torch, flopsight
    >>> @flopsight.register_formula("aten::mm")
    ... def my_mm(out, a, b):
    ...     return flopsight.Cost.of_product(a.shape[0] * a.shape[1] * b.shape[1])
    """
    return (registry or REGISTRY).register(*ops)


def mark_zero_cost(*ops, registry=None) -> None:
    """Count ``ops`` as free (views, copies, bookkeeping) instead of reporting them unsupported."""
    (registry or REGISTRY).zero_cost(*ops)


__all__ = [
    "__version__",
    "profile",
    "Profiler",
    "ProfileResult",
    "ModuleStats",
    "PhaseStats",
    "OpStats",
    "load",
    "Cost",
    "register_formula",
    "mark_zero_cost",
    "UnsupportedOpWarning",
    "FakeClock",
]
