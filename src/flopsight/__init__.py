"""flopsight: exact per-module parameters, MACs, FLOPs and latency for PyTorch models.

>>> import torch, flopsight
>>> model = torch.nn.Linear(16, 4)
>>> flopsight.profile(model, torch.ones(8, 16)).total.forward.macs
512
"""

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


def __getattr__(name: str):
    """Load the API on first use: torch, the profiler, the renderers (see :mod:`._api`)."""
    import importlib

    if name.startswith("__") or name == "_api":
        raise AttributeError(f"module 'flopsight' has no attribute {name!r}")
    api = importlib.import_module(f"{__name__}._api")
    if hasattr(api, name):
        value = getattr(api, name)
    else:
        try:  # a submodule: flopsight.hardware, flopsight.capture...
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError:
            raise AttributeError(f"module 'flopsight' has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
