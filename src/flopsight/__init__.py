"""flopsight: exact per-module parameters, MACs, FLOPs and latency for PyTorch models.

>>> import torch, flopsight
>>> model = torch.nn.Linear(16, 4)
>>> flopsight.profile(model, torch.ones(8, 16)).total.forward.macs
512
"""

from typing import Any

from ._version import __version__

__all__ = [
    "__version__",
    "profile",
    "Profiler",
    "ProfileOptions",
    "ProfileResult",
    "ModuleStats",
    "Collective",
    "ModuleNode",
    "ModelCall",
    "Phases",
    "Stats",
    "Coverage",
    "Metadata",
    "Timing",
    "load",
    "combine_steps",
    "diff",
    "SCHEMA_VERSION",
    "Cost",
    "register_formula",
    "mark_zero_cost",
    "register_module",
    "register_function",
    "UnsupportedOpWarning",
    "UnprofiledForwardWarning",
    "UntestedTorchWarning",
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


#: where each public name lives, loaded the first time it is used: a profile imports the
#: profiler and the capture, not the renderers, the diff or the integrations
_WHERE = {
    **dict.fromkeys(("profile", "Profiler"), "profiler"),
    "ProfileOptions": "options",
    **dict.fromkeys(("ProfileResult", "ModuleStats", "ModelCall", "Coverage", "SCHEMA_VERSION", "load"),
                    "result.profile_result"),
    "Collective": "result.communication",
    **dict.fromkeys(("ModuleNode", "Phases"), "result.tree"),
    "Stats": "result.stats",
    **dict.fromkeys(("Metadata", "Timing"), "result.metadata"),
    "combine_steps": "result.steps",
    "diff": "analysis.diff",
    **dict.fromkeys(("Cost", "REGISTRY"), "formulas"),
    **dict.fromkeys(("register_formula", "mark_zero_cost", "register_module", "register_function"), "_api"),
    **dict.fromkeys(("UnsupportedOpWarning", "UnprofiledForwardWarning"), "capture.charging.notices"),
    "UntestedTorchWarning": "torch_support",
    "FakeClock": "capture.runtime.timing",
    **dict.fromkeys(("attach", "AttachedProfiler"), "integrations.attach"),
    **dict.fromkeys(("get_model_profile", "FlopsProfiler", "get_module_flops", "get_module_macs",
                     "get_module_duration"), "integrations.deepspeed.api"),
    **dict.fromkeys(("number_to_string", "macs_to_string", "flops_to_string", "bytes_to_string", "params_to_string",
                     "duration_to_string"), "renderers.numbers"),
}


def __getattr__(name: str) -> Any:  # a lazily loaded name: a function, a class, a constant or a module
    """Load a public name on first use, from the module that holds it (:data:`_WHERE`); or a
    submodule (``flopsight.hardware``, ``flopsight.capture``...)."""
    import importlib

    if name.startswith("__"):
        raise AttributeError(f"module 'flopsight' has no attribute {name!r}")
    from ._quiet import import_torch

    import_torch()  # first, its NumPy notice hidden (see flopsight._quiet)
    where = _WHERE.get(name)
    if where is not None:
        value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    else:
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError:
            raise AttributeError(f"module 'flopsight' has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
