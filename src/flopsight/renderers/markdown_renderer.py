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

from ..analysis.report import efficiency_section
from ..analysis.report_options import ReportOptions
from .efficiency_lines import format_efficiency
from .numbers import bytes_to_string, duration_to_string, flops_to_string, macs_to_string, number_to_string, params_to_string

__all__ = ["render_markdown", "format_markdown"]

_ESCAPES = str.maketrans({"|": "\\|", "<": "&lt;", ">": "&gt;", "&": "&amp;", "`": "\\`", "\n": " "})


def render_markdown(result, **options: Any) -> str:
    """The summary table, then the ``top`` modules (default 10; the root left out) by
    ``phase`` FLOPs (default ``"forward"``), then the operators by FLOPs; memory and
    communication when measured; with ``peak`` (FLOP/s, a device name or ``"cpu"``: see
    :mod:`flopsight.hardware`), the efficiency figures, the peak used beside each ratio.
    ``options`` are :class:`~flopsight.analysis.report_options.ReportOptions`'."""
    return format_markdown(result, ReportOptions.of(**options))


def format_markdown(result, options: ReportOptions) -> str:
    """The Markdown report of ``result`` as ``options`` ask (the format table's entry)."""
    top, phase = options.top, options.phase
    lines = [_title(result), ""]
    lines += _summary(result)
    lines += _efficiency(result, options.peak)
    lines += _top_modules(result, top, phase)
    lines += _operators(result, top, phase)
    lines += _memory(result)
    lines += _communication(result)
    return "\n".join(lines) + "\n"


def _n(value) -> str:
    return number_to_string(value).strip()


def _cell(text) -> str:
    return str(text).translate(_ESCAPES).strip()


def _table(header, rows, align=None) -> list[str]:
    align = align or ["---"] + ["---:"] * (len(header) - 1)
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out + [""]


def _title(result) -> str:
    m = result.metadata
    parts = [m.device, m.dtype] + ([f"batch {m.batch_size}"] if m.batch_size else [])
    if m.world_size > 1:
        parts.append(f"rank {m.rank} of {m.world_size}")
    return f"### flopsight: {_cell(m.model or result.total.type_name)} ({', '.join(p for p in parts if p)})"


def _summary(result) -> list[str]:
    phases = [p for p in result.phases if p != "recompute" or result.total.recompute.calls]
    total = result.total
    if phases == ["forward"] or not phases:
        f = total.forward
        rows = [["params", params_to_string(total.params)], ["MACs", macs_to_string(f.macs)],
                ["FLOPs", _n(f.flops)], ["latency", duration_to_string(f.latency)],
                ["FLOPS", flops_to_string(f.flops_per_second)]]
        return _table(["", "forward"], rows)
    it = result.iteration
    stats = {p: result.phase_total(p) for p in phases}
    rows = [
        ["MACs"] + [macs_to_string(stats[p].macs) for p in phases] + [macs_to_string(it.macs)],
        ["FLOPs"] + [_n(stats[p].flops) for p in phases] + [_n(it.flops)],
        ["latency"] + [duration_to_string(stats[p].latency) for p in phases] + [duration_to_string(it.latency)],
        ["FLOPS"] + [flops_to_string(stats[p].flops_per_second) for p in phases] + [flops_to_string(it.flops_per_second)],
    ]
    return [f"params: {params_to_string(total.params)}", ""] + _table([""] + phases + ["iteration"], rows)


def _efficiency(result, peak) -> list[str]:
    """Against ``peak`` only when one is given; the dtype is the one the result recorded."""
    if peak is None:
        return []
    rows = [[_cell(label), _cell(value)] for label, value in format_efficiency(efficiency_section(result, peak))]
    return ["#### Efficiency", ""] + _table(["", ""], rows, ["---", "---:"]) if rows else []


def _top_modules(result, top: int, phase: str) -> list[str]:
    nodes = [n for n in result.walk() if n.name and n.inclusive[phase].calls]
    if not nodes or not top:
        return []
    whole = result.total.inclusive[phase].flops or 1
    nodes.sort(key=lambda n: (-n.inclusive[phase].flops, -n.inclusive[phase].latency, n.name))
    rows = []
    for n in nodes[:top]:
        s = n.inclusive[phase]
        rows.append([_cell(n.name), _cell(n.type_name), params_to_string(n.params), macs_to_string(s.macs),
                     _n(s.flops), f"{100 * s.flops / whole:.1f} %", duration_to_string(s.latency)])
    header = ["module", "type", "params", f"{phase} MACs", f"{phase} FLOPs", "of model FLOPs", f"{phase} latency"]
    return [f"#### Top {len(rows)} modules by {phase} FLOPs", ""] + _table(header, rows, ["---", "---"] + ["---:"] * 5)


def _operators(result, top: int, phase: str) -> list[str]:
    ops = list(result.ops(phase).items())[:top]
    if not ops:
        return []
    rows = [[_cell(name), str(s.calls), macs_to_string(s.macs), _n(s.flops),
             duration_to_string(s.latency)] for name, s in ops]
    return [f"#### Top {len(rows)} operators by {phase} FLOPs", ""] + _table(["operator", "calls", "MACs", "FLOPs", "latency"], rows)


def _memory(result) -> list[str]:
    m = result.memory
    if m is None:
        return []
    rows = [[name, bytes_to_string(value)] for name, value in (
        ("params", m.params), ("grads", m.grads), ("optimizer state", m.optimizer_state),
        ("activations saved for backward", m.activations), ("peak", m.peak))]
    return ["#### Memory", ""] + _table(["", "bytes"], rows)


def _communication(result) -> list[str]:
    calls = result.collectives()
    if not calls:
        return []
    rows = [[_cell(c.kind), _cell(c.module or "(model)"), c.phase, str(c.count), bytes_to_string(c.bytes),
             duration_to_string(c.latency)] for c in calls]
    return ["#### Communication", ""] + _table(["collective", "module", "phase", "calls", "bytes per rank", "time"], rows,
                                               ["---", "---", "---", "---:", "---:", "---:"])
