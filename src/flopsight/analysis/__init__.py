"""Analysis: pure functions from a :class:`~flopsight.ProfileResult` to derived views."""

from .aggregate import DepthSummary, by_depth_and_type, max_depth
from .report_figures import ModuleFigures, SummaryFigures, module_figures, summary_figures

__all__ = ["DepthSummary", "by_depth_and_type", "max_depth", "SummaryFigures", "ModuleFigures", "summary_figures",
           "module_figures"]


def __getattr__(name: str):
    """A submodule, imported the first time it is named (see :mod:`flopsight._lazy`)."""
    from .._lazy import submodule

    return submodule(__name__, name)
