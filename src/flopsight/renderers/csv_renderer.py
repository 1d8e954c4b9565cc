"""CSV: one row per module and phase (``.csv``), and the operator table (``.ops.csv``).

Made to open cleanly in a spreadsheet: one header row, plain numbers (bytes, seconds, counts;
no units or thousands separators), and text cells that a spreadsheet would take for a formula
(a module named ``=cmd()``) prefixed with ``'``.

>>> import torch, flopsight
>>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
>>> result = flopsight.profile(model, torch.ones(3, 4), clock=flopsight.FakeClock())
>>> print(render_csv(result).splitlines()[1])  # op time: 4 ops of 1 fake ms
0,,Sequential,0,forward,40,40,1,96,240,0.005,0,0,0.003,496,,,,0.004,0
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

#: the module table's columns: inclusive figures (the module and its submodules), then its own;
#: ``params_shared``: of its params, those tied to modules outside it (the root's total counts them once).
#: ``op_latency_s``: the time inside its ops, in the pass the JSON's ``metadata.timing.ops`` names
#: (docs/conventions/timing.md, "operator times")
MODULE_COLUMNS = (
    "rank", "module", "type", "depth", "phase", "params", "params_trainable", "calls",
    "macs", "flops", "latency_s", "self_macs", "self_flops", "self_latency_s", "bytes_moved",
    "activations_bytes", "peak_bytes", "peak_backward_bytes", "op_latency_s", "params_shared",
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
    seconds = _na_seconds if report.on_meta_device else _seconds  # nothing ran on hardware: no time
    rows = []
    for r in report.module_rows:
        mem = (r.memory.activations, r.memory.peak, r.memory.peak_backward) if r.memory is not None else ("", "", "")
        inc, own = r.inclusive, r.own
        rows.append((rank, _text(r.path), _text(r.type_name), r.depth, r.phase, r.params, r.params_trainable,
                     own.calls, inc.macs, inc.flops, seconds(inc.latency), own.macs, own.flops,
                     seconds(own.latency), r.bytes_moved, *mem, seconds(r.op_latency), r.params_shared))
    return _write(MODULE_COLUMNS, rows)


def format_ops_csv(report: Report) -> str:
    """The format table's entry for ``ops_csv``: :attr:`~flopsight.analysis.report.Report.operator_rows`."""
    rank = report.result.metadata.rank
    seconds = _na_seconds if report.on_meta_device else _seconds
    rows = [(rank, _text(r.path), _text(r.type_name), r.phase, _text(r.op), r.stats.calls, r.stats.macs,
             r.stats.flops, seconds(r.stats.latency), r.bytes_moved) for r in report.operator_rows]
    return _write(OP_COLUMNS, rows)


def _seconds(value: float) -> str:
    return repr(float(value)) if value else "0"


def _na_seconds(value: float) -> str:
    """A time on the meta device, where nothing ran on hardware (pandas reads it as NaN)."""
    return "n/a"


def _text(value: str) -> str:
    """A text cell a spreadsheet shows as text, never evaluates: a leading ``'`` protects a
    formula's first character, and is doubled on a value that starts with one itself (so that
    ``=x`` and ``'=x`` stay apart: drop one leading ``'`` to read the name back). A NUL, which
    Python 3.10's CSV writer cannot write, is written as U+FFFD."""
    value = value.replace("\x00", "\ufffd")
    return "'" + value if value.startswith(_FORMULA_START + ("'",)) else value


def _write(header, rows) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    # the writer quotes a field holding its line terminator ("\n") but not a bare "\r", which a
    # reader also ends a row at: such a (rare) row is written with every field quoted
    quoted = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_ALL)
    writer.writerow(header)
    for row in rows:
        (quoted if any(isinstance(v, str) and "\r" in v for v in row) else writer).writerow(row)
    return out.getvalue()
