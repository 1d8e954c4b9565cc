"""CSV: one row per module and phase (``.csv``), and the operator table (``.ops.csv``).

Made to open cleanly in a spreadsheet: one header row, plain numbers (bytes, seconds, counts;
no units or thousands separators), and text cells that a spreadsheet would take for a formula
(a module named ``=cmd()``) prefixed with ``'``.

>>> import torch, flopsight
>>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
>>> result = flopsight.profile(model, torch.ones(3, 4), clock=flopsight.FakeClock())
>>> print(render_csv(result).splitlines()[1])  # op_latency_s last: 4 ops of 1 fake ms
0,,Sequential,0,forward,40,40,1,96,240,0.005,0,0,0.003,496,,,,0.004
>>> render_ops_csv(result).splitlines()[1]
'0,0,Linear,forward,aten.addmm,1,96,216,0.001,304'
"""

from __future__ import annotations

import csv
import io
from typing import Any

from ..analysis.report import Report
from ..analysis.report_options import ReportOptions

__all__ = ["render_csv", "render_ops_csv", "format_csv", "format_ops_csv", "MODULE_COLUMNS", "OP_COLUMNS"]

#: the module table's columns: inclusive figures (the module and its submodules), then its own
MODULE_COLUMNS = (
    "rank", "module", "type", "depth", "phase", "params", "params_trainable", "calls",
    "macs", "flops", "latency_s", "self_macs", "self_flops", "self_latency_s", "bytes_moved",
    "activations_bytes", "peak_bytes", "peak_backward_bytes", "op_latency_s",
)
#: the operator table's columns: each module's own calls of each op, per phase
OP_COLUMNS = ("rank", "module", "type", "phase", "op", "calls", "macs", "flops", "latency_s", "bytes_moved")

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def render_csv(result, **options: Any) -> str:
    """One row per module (pre-order) and phase it ran in. No option changes it; any
    :class:`~flopsight.analysis.report_options.ReportOptions` field is accepted."""
    return format_csv(Report(result, ReportOptions.of(**options)))


def render_ops_csv(result, **options: Any) -> str:
    """One row per module, phase and operator (most FLOPs first), for the module's own calls."""
    return format_ops_csv(Report(result, ReportOptions.of(**options)))


def format_csv(report: Report) -> str:
    """The format table's entry for ``csv``: :attr:`~flopsight.analysis.report.Report.module_rows`."""
    rank = report.result.metadata.rank
    rows = []
    for r in report.module_rows:
        mem = (r.memory.activations, r.memory.peak, r.memory.peak_backward) if r.memory is not None else ("", "", "")
        inc, own = r.inclusive, r.own
        rows.append((rank, _text(r.path), _text(r.type_name), r.depth, r.phase, r.params, r.params_trainable,
                     own.calls, inc.macs, inc.flops, _seconds(inc.latency), own.macs, own.flops,
                     _seconds(own.latency), r.bytes_moved, *mem, _seconds(r.op_latency)))
    return _write(MODULE_COLUMNS, rows)


def format_ops_csv(report: Report) -> str:
    """The format table's entry for ``ops_csv``: :attr:`~flopsight.analysis.report.Report.operator_rows`."""
    rank = report.result.metadata.rank
    rows = [(rank, _text(r.path), _text(r.type_name), r.phase, _text(r.op), r.stats.calls, r.stats.macs,
             r.stats.flops, _seconds(r.stats.latency), r.bytes_moved) for r in report.operator_rows]
    return _write(OP_COLUMNS, rows)


def _seconds(value: float) -> str:
    return repr(float(value)) if value else "0"


def _text(value: str) -> str:
    """A text cell a spreadsheet shows as text, never evaluates."""
    return "'" + value if value.startswith(_FORMULA_START) else value


def _write(header, rows) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()
