"""Markdown: the summary and the top modules as tables, to paste into an issue or a PR.

Module names, types and operator names are user data: ``|`` and backticks are escaped and
``<``, ``>``, ``&`` written as entities (so names are plain text, not code spans, where
entities would show literally): a name can neither break a table nor inject HTML (GitHub
renders HTML inside Markdown).

>>> import torch, flopsight
>>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
>>> text = render_markdown(flopsight.profile(model, torch.ones(3, 4), clock=flopsight.FakeClock()))
>>> print(text.splitlines()[0])
### flopsight: Sequential (cpu, float32, batch 3)
>>> print("\\n".join(line for line in text.splitlines() if line.startswith("| MACs")))
| MACs | 96 MACs |
"""

from __future__ import annotations

from typing import Any

from ..analysis.report import EfficiencySection, PhaseTable, RankedModule, Report, ops_timed_apart
from ..analysis.report_options import ReportOptions
from ..result.communication import Collective
from ..result.memory import MemoryTotals
from ..result.metadata import Metadata
from ..result.stats import Stats
from .efficiency_lines import format_efficiency
from .numbers import (
    bytes_to_string,
    duration_to_string,
    flops_to_string,
    macs_to_string,
    number_to_string,
    params_to_string,
    shared_params_mark,
)

__all__ = ["render_markdown", "format_markdown"]

_ESCAPES = str.maketrans({"|": "\\|", "<": "&lt;", ">": "&gt;", "&": "&amp;", "`": "\\`", "\n": " ", "\r": " "})


def render_markdown(result, **options: Any) -> str:
    """The summary table, then the ``top`` modules (default 10; the root left out) by
    ``phase`` FLOPs (default ``"forward"``), then the operators by FLOPs; memory and
    communication when measured; with ``peak`` (FLOP/s, a device name or ``"cpu"``: see
    :mod:`flopsight.hardware`), the efficiency figures, the peak used beside each ratio.
    ``options`` are :class:`~flopsight.analysis.report_options.ReportOptions`'."""
    return format_markdown(Report(result, ReportOptions.of(**options)))


def format_markdown(report: Report) -> str:
    """The Markdown of a report (the format table's entry)."""
    phase = report.options.phase
    lines = [_title(report.result.metadata, report.result.total.type_name), ""]
    meta = report.on_meta_device  # nothing ran on hardware: times and rates are n/a
    lines += _summary(report.phase_table, meta)
    lines += _efficiency(report.peak_efficiency)
    lines += _top_modules(report.top_modules, phase, meta)
    lines += _operators(report.top_operators, phase, meta, ops_timed_apart(report.result))
    lines += _memory(report.memory)
    lines += _communication(report.collectives, meta)
    return "\n".join(lines) + "\n"


def _time(seconds: float, meta: bool) -> str:
    return "n/a" if meta else duration_to_string(seconds)


def _rate(flops_per_second: float, meta: bool) -> str:
    return "n/a" if meta else flops_to_string(flops_per_second)


def _n(value) -> str:
    return number_to_string(value).strip()


def _cell(text) -> str:
    # a line end (\n, \r\n or \r, each one in Markdown) would end the row: one space each
    return str(text).replace("\r\n", "\n").translate(_ESCAPES).strip()


def _table(header, rows, align=None) -> list[str]:
    align = align or ["---"] + ["---:"] * (len(header) - 1)
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out + [""]


def _title(m: Metadata, root_type: str) -> str:
    parts = [m.device, m.dtype] + ([f"batch {m.batch_size}"] if m.batch_size else [])
    if m.world_size > 1:
        parts.append(f"rank {m.rank} of {m.world_size}")
    return f"### flopsight: {_cell(m.model or root_type)} ({', '.join(p for p in parts if p)})"


def _summary(t: PhaseTable, meta: bool = False) -> list[str]:
    if t.iteration is None:
        f = dict(t.phases)["forward"]
        rows = [["params", params_to_string(t.params)], ["MACs", macs_to_string(f.macs)],
                ["FLOPs", _n(f.flops)], ["latency", _time(f.latency, meta)],
                ["FLOPS", _rate(f.flops_per_second, meta)]]
        return _table(["", "forward"], rows)
    it, stats = t.iteration, [s for _, s in t.phases]
    rows = [
        ["MACs"] + [macs_to_string(s.macs) for s in stats] + [macs_to_string(it.macs)],
        ["FLOPs"] + [_n(s.flops) for s in stats] + [_n(it.flops)],
        ["latency"] + [_time(s.latency, meta) for s in stats] + [_time(it.latency, meta)],
        ["FLOPS"] + [_rate(s.flops_per_second, meta) for s in stats] + [_rate(it.flops_per_second, meta)],
    ]
    return [f"params: {params_to_string(t.params)}", ""] + _table([""] + [p for p, _ in t.phases] + ["iteration"], rows)


def _efficiency(section: EfficiencySection | None) -> list[str]:
    """Against the peak given (none without one)."""
    if section is None:
        return []
    rows = [[_cell(label), _cell(value)] for label, value in format_efficiency(section)]
    return ["#### Efficiency", ""] + _table(["", ""], rows, ["---", "---:"]) if rows else []


def _top_modules(modules: tuple[RankedModule, ...], phase: str, meta: bool = False) -> list[str]:
    if not modules:
        return []
    rows = [[_cell(m.path), _cell(m.type_name), params_to_string(m.params) + shared_params_mark(m.params_shared),
             macs_to_string(m.stats.macs), _n(m.stats.flops), f"{m.flops_share:.1f} %", _time(m.stats.latency, meta)]
            for m in modules]
    header = ["module", "type", "params", f"{phase} MACs", f"{phase} FLOPs", "of model FLOPs", f"{phase} latency"]
    note = ["\"(N shared)\": N of the module's params are tied to modules outside it; each module holding them "
            "counts them, the model's total once.", ""] if any(m.params_shared for m in modules) else []
    table = _table(header, rows, ["---", "---"] + ["---:"] * 5)
    return [f"#### Top {len(rows)} modules by {phase} FLOPs", ""] + table + note


def _operators(ops: tuple[tuple[str, Stats], ...], phase: str, meta: bool = False,
               counting_pass: bool = False) -> list[str]:
    if not ops:
        return []
    rows = [[_cell(name), str(s.calls), macs_to_string(s.macs), _n(s.flops),
             _time(s.latency, meta)] for name, s in ops]
    # operators timed in a counting pass apart from the modules' timed calls (they can exceed theirs) say so
    return [f"#### Top {len(rows)} operators by {phase} FLOPs", ""] + _table(
        ["operator", "calls", "MACs", "FLOPs", "latency (counting pass)" if counting_pass else "latency"], rows)


def _memory(m: MemoryTotals | None) -> list[str]:
    if m is None:
        return []
    rows = [[name, bytes_to_string(value)] for name, value in (
        ("params", m.params), ("grads", m.grads), ("optimizer state", m.optimizer_state),
        ("activations saved for backward", m.activations), ("peak (everything live at once)", m.peak),
        ("peak allocated while profiling", m.peak_allocated))]
    return ["#### Memory", ""] + _table(["", "bytes"], rows)


def _communication(calls: tuple[Collective, ...], meta: bool = False) -> list[str]:
    if not calls:
        return []
    rows = [[_cell(c.kind), _cell(c.module or "(model)"), c.phase, str(c.count), bytes_to_string(c.bytes),
             _time(c.latency, meta)] for c in calls]
    return ["#### Communication", ""] + _table(["collective", "module", "phase", "calls", "bytes per rank", "time"],
                                               rows, ["---", "---", "---", "---:", "---:", "---:"])
