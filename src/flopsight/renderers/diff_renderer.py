"""Text and Markdown tables of a :class:`~flopsight.analysis.diff.ProfileDiff` (its
``render("text")`` and ``render("md")``): a renderer only formats what the analysis found.

>>> import torch, flopsight
>>> clock = flopsight.FakeClock()
>>> d = flopsight.diff(flopsight.profile(torch.nn.Linear(4, 2), torch.ones(1, 4), clock=clock),
...                    flopsight.profile(torch.nn.Linear(4, 3), torch.ones(1, 4), clock=clock))
>>> print(d.render("md").splitlines()[0])
### flopsight diff: `a` → `b`
"""

from __future__ import annotations

from ..analysis.diff import (
    DEFAULT_ALPHA, METRICS, GateResult, ModuleDiff, ProfileDiff, _kind, _testable, _two_sided,
    format_percent, format_signed, format_value,
)

__all__ = ["render_diff_text", "render_diff_markdown"]


def _cell(row: ModuleDiff, metric: str) -> str:
    """A module's change in one metric: ``=``, ``+1.2 K (+8.3%)``, or the amount added/removed."""
    change, kind = row.metrics[metric], _kind(metric)
    if change.a is None or change.b is None:
        return "n/a"
    if not change.changed:
        return "="
    if row.status in ("added", "removed"):
        return format_signed(kind, change.delta)
    return f"{format_signed(kind, change.delta)} ({format_percent(change.relative)})"


def _columns(d: ProfileDiff, rows: list[ModuleDiff]) -> list[str]:
    """The module table's metrics: counts that changed in a shown row (trainable params only
    where they moved apart from params: a frozen layer), and the latencies."""
    timed = ["fwd_latency", "bwd_latency"] if d.a.backward_passes or d.b.backward_passes else ["latency"]

    def wanted(m: str) -> bool:
        if _kind(m) == "time":
            return m in timed
        if m == "trainable":
            return any(r.metrics[m] != r.metrics["params"] for r in rows)
        return any(r.metrics[m].changed for r in rows)

    return [m for m in METRICS if wanted(m)]


def _total_lines(d: ProfileDiff) -> list[list[str]]:
    """Rows of the totals table: metric, a, b, change, percent, noise."""
    out = []
    for metric, (label, kind) in METRICS.items():
        change = d.total.metrics[metric]
        if change.a is None and change.b is None:
            continue
        if metric in ("bwd_latency", "latency") and not (d.a.backward_passes or d.b.backward_passes):
            continue  # an inference profile: latency is the forward's
        noise = _noise_note(d, metric) if kind == "time" else ""
        out.append([label, format_value(kind, change.a), format_value(kind, change.b), format_signed(kind, change.delta),
                    format_percent(change.relative), noise])
    return out


def _noise_note(d: ProfileDiff, metric: str) -> str:
    xs, ys = d.a.samples[metric], d.b.samples[metric]
    if not _testable(len(xs), len(ys), DEFAULT_ALPHA):
        return f"untested ({len(xs)} vs {len(ys)} calls)"
    return f"p={_two_sided(xs, ys):.2g} ({len(xs)} vs {len(ys)} calls)"


def _summary(d: ProfileDiff, all_modules: bool) -> str:
    return (f"{len(d.changed)} of {len(d.modules)} changed, {len(d.added)} added, {len(d.removed)} removed"
            + (" (all shown)" if all_modules else ""))


def _table(header: list[str], lines: list[list[str]], left: int) -> list[str]:
    """Aligned columns: the first ``left`` to the left, the rest (numbers) to the right."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *lines)]

    def fmt(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i < left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return [fmt(header), fmt(["-" * w for w in widths]), *(fmt(line) for line in lines)]


def _status(row: ModuleDiff) -> str:
    return {"added": "+", "removed": "-", "changed": "~", "unchanged": " "}[row.status]


def _type(row: ModuleDiff) -> str:
    if row.type_a and row.type_b and row.type_a != row.type_b:
        return f"{row.type_a} -> {row.type_b}"
    return row.type_b or row.type_a or ""


def render_diff_text(d: ProfileDiff, rows: list[ModuleDiff], all_modules: bool, gates: list[GateResult]) -> str:
    out = [f"flopsight diff: {d.a.label} -> {d.b.label}"]
    out += [f"note: {n}" for n in d.notes]
    out += ["", "Model totals", *_table(["metric", "a", "b", "change", "%", "noise"], _total_lines(d), 1)]
    out += ["", f"Modules: {_summary(d, all_modules)}"]
    if rows:
        cols = _columns(d, rows)
        header = ["module", "type", *(METRICS[m][0] for m in cols)]
        lines = [[f"{_status(r)} {r.path}", _type(r), *(_cell(r, m) for m in cols)] for r in rows]
        out += _table(header, lines, 2)
    if gates:
        out += ["", "Gates"] + [("PASS  " if g.passed else "FAIL  ") + g.message for g in gates]
    return "\n".join(out) + "\n"


def _md(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "'")


def _md_table(header: list[str], lines: list[list[str]], left: int) -> list[str]:
    align = ["---" if i < left else "--:" for i in range(len(header))]
    return ["| " + " | ".join(cells) + " |" for cells in (header, align, *lines)]


def render_diff_markdown(d: ProfileDiff, rows: list[ModuleDiff], all_modules: bool, gates: list[GateResult]) -> str:
    out = [f"### flopsight diff: `{_md(d.a.label)}` → `{_md(d.b.label)}`", ""]
    out += [f"> {_md(n)}" for n in d.notes] + ([""] if d.notes else [])
    out += _md_table(["metric", "a", "b", "change", "%", "noise"], [[_md(c) for c in r] for r in _total_lines(d)], 1)
    out += ["", f"**Modules**: {_summary(d, all_modules)}", ""]
    if rows:
        cols = _columns(d, rows)
        header = ["", "module", "type", *(METRICS[m][0] for m in cols)]
        lines = [[_status(r).strip(), f"`{_md(r.path)}`", _md(_type(r)), *(_md(_cell(r, m)) for m in cols)]
                 for r in rows]
        out += _md_table(header, lines, 3) + [""]
    if gates:
        out += _md_table(["gate", "result", "detail"],
                         [[f"`{_md(g.gate.text)}`", "✅ pass" if g.passed else "❌ fail", _md(g.message)]
                          for g in gates], 3) + [""]
    return "\n".join(out).rstrip("\n") + "\n"
