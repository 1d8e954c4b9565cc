"""flopsight: exact per-module parameters, MACs, FLOPs and latency for PyTorch models.

>>> import torch, flopsight
>>> model = torch.nn.Linear(16, 4)
>>> flopsight.profile(model, torch.ones(8, 16)).total.forward.macs
512
"""

__version__ = "0.1.0"

from .capture.dispatch import UnprofiledForwardWarning, UnsupportedOpWarning
from .capture.timing import FakeClock
from .compat import FlopsProfiler, get_model_profile, get_module_duration, get_module_flops, get_module_macs
from .formulas import REGISTRY, Cost
from .profiler import Profiler, profile
from .integrations.config import AttachedProfiler, attach
from .result import ModuleStats, OpStats, PhaseStats, ProfileResult, load
from .units import (
    bytes_to_string,
    duration_to_string,
    flops_to_string,
    macs_to_string,
    number_to_string,
    params_to_string,
)


def register_formula(*ops, registry=None):
    """Decorator: count ``ops`` (aten or ``torch.library`` ops) with ``fn(out, *args, **kwargs) -> Cost``.

    >>> import torch, flopsight
    >>> registry = flopsight.REGISTRY.copy()  # or leave registry out to change the global one
    >>> @flopsight.register_formula("aten::mm", registry=registry)
    ... def my_mm(out, a, b):
    ...     return flopsight.Cost.of_product(a.shape[0] * a.shape[1] * b.shape[1])
    >>> flopsight.profile(torch.nn.Linear(3, 2, bias=False), torch.ones(4, 3), registry=registry).total.forward.macs
    24
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
    "UnprofiledForwardWarning",
    "FakeClock",
    "attach",
    "AttachedProfiler",
    # DeepSpeed-compatible API
    "get_model_profile",
    "FlopsProfiler",
    "get_module_flops",
    "get_module_macs",
    "get_module_duration",
    "number_to_string",
    "macs_to_string",
    "flops_to_string",
    "bytes_to_string",
    "params_to_string",
    "duration_to_string",
]
