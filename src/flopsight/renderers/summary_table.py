"""A result's short forms: ``repr(result)`` in one line and ``result.summary()``, a
one-screen per-layer table, as text (``str``, ``repr``) and as HTML (``_repr_html_``, what a
notebook shows). The figures are :mod:`flopsight.analysis.summary`'s; this file only words
and lays them out, numbers as the text report writes them (:mod:`.numbers`).

>>> import torch, flopsight
>>> model = torch.nn.Sequential(torch.nn.Linear(16, 5), torch.nn.ReLU())
>>> result = flopsight.profile(model, torch.ones(8, 16), clock=flopsight.FakeClock())
>>> print(result_repr(result))  # 8x16 @ 16x5: 640 MACs; 2*640 + 40 bias adds + 40 ReLUs = 1360 FLOPs
<ProfileResult Sequential: 85 params | forward: 640 MACs, 1.36 KFLOPs, 5 ms | coverage 100%>
>>> print(summary(result))  # doctest: +NORMALIZE_WHITESPACE
Sequential: 85 params | forward: 640 MACs, 1.36 KFLOPs, 5 ms | coverage 100%
====================================================================
Module (type)     Params       MACs      FLOPs    Latency    % FLOPs
--------------------------------------------------------------------
Sequential            85        640     1.36 K       5 ms       100%
  (0): Linear         85        640     1.32 K       1 ms     97.06%
  (1): ReLU            0          0         40       1 ms      2.94%
====================================================================
Forward figures of each module, its submodules' included.
"""

from __future__ import annotations

import html
import textwrap
from typing import Any

from ..analysis.summary import MAX_ROWS, Headline, SummaryRow, SummaryTable, headline, summary_figures
from ..result.profile_result import ProfileResult
from .numbers import DEFAULT_PRECISION, duration_to_string, number_to_string, params_to_string, shared_params_mark

__all__ = ["ModelSummary", "summary", "result_repr", "result_html", "headline_text"]

#: the module column's widest label; longer ones keep their end (the most specific part)
_NAME_WIDTH = 56
_NUMBER_WIDTH = 11


def _count(n: float) -> str:
    return number_to_string(n).strip()


def _latency(seconds: float | None) -> str:
    return "n/a" if seconds is None else duration_to_string(seconds)


def _pct(percent: float) -> str:
    return f"{round(percent, DEFAULT_PRECISION):g}%"


def _coverage(h: Headline) -> str:
    c = h.coverage
    if not c.calls_without_formula:
        return "coverage 100%"
    # never rounds up to 100% while some calls went uncounted
    percent = min(round(100 * c.fraction, DEFAULT_PRECISION), 99.99)
    return f"coverage {percent:g}% ({c.calls_without_formula} of {c.calls} op calls not counted)"


def headline_text(h: Headline) -> str:
    """``BertModel: 109.48 M params | forward: 2.79 GMACs, 5.59 GFLOPs, 31.2 ms | coverage 100%``."""
    if h.latency is None:
        latency = "latency n/a (meta device)"
    else:
        latency = duration_to_string(h.latency)
        if h.samples > 1:
            latency += f" (median of {h.samples})"
    parts = [f"{h.model}: {params_to_string(h.params)} params",
             f"{h.scope}: {number_to_string(h.macs)}MACs, {number_to_string(h.flops)}FLOPs, {latency}",
             _coverage(h)]
    if h.ranks:
        parts.append(f"{h.ranks} ranks")
    if h.error:
        parts.append("profile incomplete: the call raised")
    return " | ".join(parts)


def result_repr(result: ProfileResult) -> str:
    """``repr(result)``: one line, whatever the model's size."""
    try:
        return f"<ProfileResult {headline_text(headline(result))}>"
    except Exception as e:  # a repr must never raise: a notebook would show a traceback for the value
        return f"<ProfileResult of {len(result.modules)} modules (no summary: {type(e).__name__})>"


# -- the table -------------------------------------------------------------------------------
def _columns(table: SummaryTable) -> list[str]:
    columns = ["Params", "MACs", "FLOPs", "Latency", "% FLOPs"]
    if table.training:
        columns += ["bwd FLOPs", "bwd latency"]
    return columns


def _cells(row: SummaryRow, training: bool) -> list[str]:
    # tied weights: marked as the text and Markdown reports mark them
    cells = [params_to_string(row.params) + shared_params_mark(row.params_shared), _count(row.macs),
             _count(row.flops), _latency(row.latency), _pct(row.flops_share)]
    if training:
        cells += [_count(row.bwd_flops), _latency(row.bwd_latency)]
    return cells


def _type(row: SummaryRow) -> str:
    return f"{row.count} x {row.type_name}" if row.count > 1 else row.type_name


def _marks(row: SummaryRow) -> str:
    if row.ignored:
        return " [ignored]"
    return "" if row.ran else " [not called]"


def _label(row: SummaryRow, table: SummaryTable) -> str:
    """Tree order: ``(key): Type``, indented by depth; sorted: ``path: Type``; ``N x Type`` for N modules."""
    if row.path == "":
        return _type(row) + _marks(row)
    if table.sort is not None:
        return f"{row.path}: {_type(row)}{_marks(row)}"
    return f"{'  ' * row.depth}({row.key}): {_type(row)}{_marks(row)}"  # as nn.Module's repr names a child


def _fit(label: str, width: int) -> str:
    return label if len(label) <= width else "..." + label[len(label) - width + 3:]


def _notes(table: SummaryTable) -> list[str]:
    notes = ["Forward figures of each module, its submodules' included"
             + ("; bwd: its measured backward." if table.training else ".")]
    if any(r.params_shared for r in table.rows):
        notes.append("\"(N shared)\": N of the module's params are tied to modules outside it; each module holding "
                     "them counts them, the model's total once.")
    if any(r.count > 1 for r in table.rows):
        notes.append("A row of N x Type sums N identical modules (a run of repeated layers, collapse=True).")
    if table.sort is not None:
        notes.append(f"Modules below the model sorted by {table.sort}, largest first.")
    if table.deeper:
        notes.append(f"Modules deeper than depth {table.depth} are in their parents' figures "
                     "(summary(depth=N) shows them).")
    if table.meta:
        notes.append("Latency n/a: profiled on the meta device, where nothing runs on hardware.")
    return notes


def format_summary(table: SummaryTable) -> str:
    """The table as text, one line per row between rules, notes below."""
    columns = _columns(table)
    labels = [_label(r, table) for r in table.rows]
    width = min(max([len("Module (type)"), *map(len, labels)]), _NAME_WIDTH)
    cells = [_cells(r, table.training) for r in table.rows]
    widths = [max([_NUMBER_WIDTH, len(c) + 1, *(len(row[i]) + 1 for row in cells)]) for i, c in enumerate(columns)]

    def line(name: str, values: list[str]) -> str:
        return f"{name:<{width}}" + "".join(f"{v:>{w}}" for v, w in zip(values, widths))

    header = line("Module (type)", columns)
    rule = len(header)
    lines = [headline_text(table.headline), "=" * rule, header, "-" * rule]
    lines += [line(_fit(label, width), row) for label, row in zip(labels, cells)]
    if table.left_out:
        lines.append(f"... {table.left_out} more row{'s' if table.left_out > 1 else ''} "
                     f"(max_rows={table.max_rows}; summary(max_rows=N) shows more)")
    lines += ["=" * rule, *(wrapped for note in _notes(table) for wrapped in textwrap.wrap(note, max(rule, 60)))]
    return "\n".join(lines)


def format_summary_html(table: SummaryTable) -> str:
    """The table as an HTML fragment (a notebook's output cell); every name is escaped."""
    e = html.escape
    columns = _columns(table)
    head = "".join(f'<th style="text-align:right">{e(c)}</th>' for c in columns)
    body = []
    for r in table.rows:
        name = _label(r, table).lstrip(" ")
        indent = 0 if table.sort is not None else 1.2 * r.depth
        cells = "".join(f'<td style="text-align:right">{e(c)}</td>' for c in _cells(r, table.training))
        body.append(f'<tr><td style="text-align:left;padding-left:{indent:g}em">{e(name)}</td>{cells}</tr>')
    if table.left_out:
        body.append(f'<tr><td colspan="{len(columns) + 1}" style="text-align:left">... {table.left_out} more rows '
                    f"(max_rows={table.max_rows})</td></tr>")
    notes = "<br>".join(e(n) for n in _notes(table))
    return (f'<div class="flopsight-summary"><table><caption style="text-align:left">'
            f"{e(headline_text(table.headline))}</caption>"
            f'<thead><tr><th style="text-align:left">Module (type)</th>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>"
            f'<p style="font-size:smaller">{notes}</p></div>')


class ModelSummary:
    """What ``result.summary()`` returns: the table as text (``str()``, and ``repr()`` so a
    console shows it) and as HTML (``_repr_html_``, so a notebook shows it); ``table`` holds
    its figures (:class:`~flopsight.analysis.summary.SummaryTable`)."""

    def __init__(self, table: SummaryTable):
        self.table = table

    @property
    def rows(self) -> tuple[SummaryRow, ...]:
        return self.table.rows

    def __str__(self) -> str:
        return format_summary(self.table)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        return format_summary_html(self.table)


def summary(result: ProfileResult, depth: int | None = None, *, max_rows: int = MAX_ROWS, sort: str | None = None,
            collapse: bool = True) -> ModelSummary:
    """``result.summary()`` (see :meth:`flopsight.ProfileResult.summary`)."""
    return ModelSummary(summary_figures(result, depth, max_rows=max_rows, sort=sort, collapse=collapse))


def result_html(result: ProfileResult, **options: Any) -> str:
    """``result._repr_html_()``: the summary table with its default options."""
    return format_summary_html(summary_figures(result, **options))
