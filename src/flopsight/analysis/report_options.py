"""What a report is asked for: one frozen, validated :class:`ReportOptions` for every format.

Every way to a report (``result.render``, ``result.save``, the DeepSpeed facade, ``attach``,
the engine, the CLI, the trainer callbacks) turns its options into one of these; each field
is checked as it is set, the error naming it, so a front-end builds one before the model
runs. Each format reads the fields it uses (see :class:`ReportOptions`) and ignores the
rest; a name that is no report option at all is an error.

>>> ReportOptions(ops=3, collapse=True).ops
3
>>> ReportOptions.of(module_depth=-2)
Traceback (most recent call last):
...
ValueError: module_depth: expected an int >= -1 (-1: every depth), got -2
>>> ReportOptions.of(colapse=True)
Traceback (most recent call last):
...
TypeError: colapse: not a report option; did you mean 'collapse'?
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any

from .._checks import is_int
from ..hardware import canonical_dtype, check_peak
from ..result.tree import PHASES
from .report_figures import ParallelInfo

__all__ = ["ReportOptions", "DEFAULT", "check_text_options"]


class _FormatDefault:
    """The format's own default (``indent``: 1 for JSON, None for the one-line trace)."""

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT: Any = _FormatDefault()


def _is_count(value: Any, minimum: int) -> bool:
    return is_int(value) and value >= minimum


@dataclass(frozen=True)
class ReportOptions:
    """Every option of every format, checked.

    The text report (DeepSpeed's layout, :func:`~flopsight.renderers.text_renderer.render_text`):
    ``profile_step`` (the summary's title), ``module_depth`` and ``top_modules`` (the
    aggregated profile), ``detailed`` (the module tree), ``parallel`` and
    ``recompute_fwd_factor`` (a DeepSpeed engine's), and the sections beyond DeepSpeed:
    ``ops``, ``collapse``, ``detail_depth``, ``peak``, ``efficiency``, ``dtype``. Markdown:
    ``top``, ``phase`` and ``peak``. HTML: ``title`` and ``peak``. JSON and the Chrome
    trace: ``indent`` (:data:`DEFAULT`: the format's own). CSV: none.
    """

    profile_step: int = 1
    module_depth: int = -1
    top_modules: int = 1
    detailed: bool = True
    parallel: ParallelInfo | None = None
    recompute_fwd_factor: float = 0.0
    ops: int | None = None
    collapse: bool = False
    detail_depth: int | None = None
    peak: Any = None
    efficiency: bool = False
    dtype: str | None = None
    top: int = 10
    phase: str = "forward"
    title: str | None = None
    indent: Any = DEFAULT

    def __post_init__(self) -> None:
        if not is_int(self.profile_step):
            raise TypeError(f"profile_step: expected an int, got {self.profile_step!r}")
        if not _is_count(self.module_depth, -1):
            raise ValueError(f"module_depth: expected an int >= -1 (-1: every depth), got {self.module_depth!r}")
        if not _is_count(self.top_modules, 0):
            raise ValueError(f"top_modules: expected an int >= 0, got {self.top_modules!r}")
        if self.parallel is not None and not isinstance(self.parallel, ParallelInfo):
            raise TypeError(f"parallel: expected a ParallelInfo or None, got {type(self.parallel).__name__}")
        if not (is_int(self.recompute_fwd_factor) or isinstance(self.recompute_fwd_factor, float)):
            raise TypeError(f"recompute_fwd_factor: expected a number, got {self.recompute_fwd_factor!r}")
        if self.ops is not None and not _is_count(self.ops, 0):
            raise ValueError(f"ops: expected None or an int >= 0 (operators per module; 0: no table), got {self.ops!r}")
        for name in ("detailed", "collapse", "efficiency"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name}: expected True or False, got {getattr(self, name)!r}")
        if self.detail_depth is not None and not _is_count(self.detail_depth, 0):
            raise ValueError(f"detail_depth: expected None (every depth) or an int >= 0, got {self.detail_depth!r}")
        check_peak(self.peak)  # "cpu" is measured where it is used, not here
        if self.dtype is not None:
            canonical_dtype(self.dtype)
        if self.phase not in PHASES:
            raise ValueError(f"phase: expected one of {', '.join(PHASES)}, got {self.phase!r}")
        if not _is_count(self.top, 0):
            raise ValueError(f"top: expected an int >= 0, got {self.top!r}")
        if self.title is not None and not isinstance(self.title, str):
            raise TypeError(f"title: expected a str or None, got {type(self.title).__name__}")
        if not (self.indent is DEFAULT or self.indent is None or _is_count(self.indent, 0)
                or isinstance(self.indent, str)):
            raise TypeError(f"indent: expected None, an int >= 0 or a str, got {self.indent!r}")

    @classmethod
    def of(cls, **options: Any) -> ReportOptions:
        """``options`` by name, checked; a name that is no field is a TypeError naming it."""
        names = [f.name for f in dataclasses.fields(cls)]
        for name in options:
            if name not in names:
                close = difflib.get_close_matches(name, names, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"expected one of {', '.join(names)}"
                raise TypeError(f"{name}: not a report option; {hint}")
        return cls(**options)

    @property
    def table_depth(self) -> int | None:
        """How deep the per-module tables go (operators, kernels): the shallower of
        ``module_depth`` (-1: every depth) and ``detail_depth``; None: every depth.

        >>> ReportOptions(module_depth=3, detail_depth=1).table_depth, ReportOptions().table_depth
        (1, None)
        """
        limits = [d for d in (self.module_depth if self.module_depth >= 0 else None, self.detail_depth)
                  if d is not None]
        return min(limits) if limits else None

    def indent_or(self, default: int | None) -> Any:
        """``indent``, or the format's ``default`` when it was not given."""
        return default if self.indent is DEFAULT else self.indent


def check_text_options(*, ops=None, collapse=False, detail_depth=None, peak=None, efficiency=False,
                       dtype=None) -> None:
    """Raise, naming the argument, unless the text report's optional sections are asked for
    with values it can use (:class:`ReportOptions` checks them); cheap, so front-ends call
    it before the model runs.

    >>> check_text_options(ops=3, collapse=True, detail_depth=2, peak=1e12)
    >>> check_text_options(detail_depth=-1)
    Traceback (most recent call last):
    ...
    ValueError: detail_depth: expected None (every depth) or an int >= 0, got -1
    """
    ReportOptions(ops=ops, collapse=collapse, detail_depth=detail_depth, peak=peak, efficiency=efficiency, dtype=dtype)
