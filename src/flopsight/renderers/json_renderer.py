"""JSON: everything a result holds, in the versioned schema of ``docs/schema.md``.

Keys keep their order and floats their ``repr``, so save, load, save is byte-identical.

>>> import json, torch, flopsight
>>> result = flopsight.profile(torch.nn.Linear(4, 2), torch.ones(1, 4), clock=flopsight.FakeClock())
>>> json.loads(render_json(result))["schema_version"] == flopsight.SCHEMA_VERSION
True
"""

from __future__ import annotations

import json
from typing import Any

from ..analysis.report import Report
from ..analysis.report_options import ReportOptions

__all__ = ["render_json", "format_json"]


def render_json(result, **options: Any) -> str:
    """``result.to_dict()`` as JSON text (ends with a newline); ``indent`` (default 1) is
    the one :class:`~flopsight.analysis.report_options.ReportOptions` field it reads."""
    return format_json(Report(result, ReportOptions.of(**options)))


def format_json(report: Report) -> str:
    """The format table's entry."""
    return json.dumps(report.result.to_dict(), indent=report.options.indent_or(1)) + "\n"
