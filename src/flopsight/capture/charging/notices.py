"""The warnings capture raises: unsupported operators, failed formulas, unprofiled forwards."""

from __future__ import annotations

import warnings

__all__ = ["UnsupportedOpWarning", "UnprofiledForwardWarning", "warn_unsupported", "warn_formula_failed",
           "warn_unprofiled_forward", "warn_backward_elsewhere", "warn_profiler_share", "PROFILER_SHARE_LIMIT"]

#: the profiler's own share of a span's host time above which a clock that cannot subtract it
#: (CUDA events) is warned about
PROFILER_SHARE_LIMIT = 0.25


class UnsupportedOpWarning(UserWarning):
    """An operator ran that no formula counts; it is listed in ``result.unsupported_ops``."""


class UnprofiledForwardWarning(UserWarning):
    """A backward pass ran through a graph whose forward was not profiled."""


def warn_unsupported(name: str) -> None:
    # The message names the op, so Python's default filter shows it once per op.
    warnings.warn(
        f"flopsight: no formula for operator {name!r}; its cost is not counted and it is "
        "listed in result.unsupported_ops. Register one with flopsight.register_formula "
        "or mark it with flopsight.mark_zero_cost.",
        UnsupportedOpWarning,
        stacklevel=4,
    )


def warn_formula_failed(name: str, error: Exception) -> None:
    warnings.warn(
        f"flopsight: the formula for {name!r} failed ({error!r}); its cost is not counted and it is "
        "listed in result.unsupported_ops",
        UnsupportedOpWarning,
        stacklevel=4,
    )


def warn_unprofiled_forward() -> None:
    warnings.warn(
        "flopsight: the backward pass runs through autograd nodes created before profiling started (their "
        "forward was not profiled), so they cannot be attributed to modules and their cost goes to the root. "
        "Start profiling before the forward pass.",
        UnprofiledForwardWarning,
        stacklevel=4,
    )


def warn_backward_elsewhere() -> None:
    warnings.warn(
        "flopsight: gradients appeared but no backward pass ran on the profiled thread: a backward pass ran on "
        "another thread, which is not counted (counting follows the thread that started profiling and the "
        "autograd threads it starts). Call backward() on that thread, or profile there.",
        UserWarning,
        stacklevel=4,
    )


def warn_profiler_share(share: float, clock: str) -> None:
    warnings.warn(
        f"flopsight: the profiler's own work took {100 * share:.0f}% of the profiled span's host time, and "
        f"the {clock} clock cannot take it out: where the device waited for the host, that time is in the "
        "latencies. Time a separate pass (flopsight.profile with warm_up >= 1) for latencies without it.",
        UserWarning,
        stacklevel=4,
    )
