"""A :class:`~flopsight.analysis.diff.ProfileDiff` as text, Markdown or JSON, and the gates'
messages: a renderer only formats what the analysis found.

:func:`render_diff` is what ``diff.render(fmt)`` writes and :func:`gate_message` what a
:class:`~flopsight.analysis.diff.GateResult` says (its ``message``); the data model's
methods call them through :mod:`flopsight.renderers.output`.

>>> import torch, flopsight
>>> clock = flopsight.FakeClock()
>>> d = flopsight.diff(flopsight.profile(torch.nn.Linear(4, 2), torch.ones(1, 4), clock=clock),
...                    flopsight.profile(torch.nn.Linear(4, 3), torch.ones(1, 4), clock=clock))
>>> print(render_diff(d, "md").splitlines()[0])
### flopsight diff: `a` → `b`
>>> gate_message(d.evaluate(["flops>+1K"])[0])
'flops>+1K: FLOPs of the model rose 18 -> 27 (+9, +50%), within +1 K'
"""

from __future__ import annotations

import json
import math
from typing import Sequence

from ..analysis.diff import (DIFF_FORMATS, METRICS, Caveat, Change, Gate, GateResult, ModuleDiff, ProfileDiff,
                             metric_kind)
from ..analysis.diff.verdict import Cause, CollectiveChange, Verdict
from .numbers import bytes_to_string, duration_to_string, number_to_string

__all__ = ["render_diff", "render_diff_text", "render_diff_markdown", "gate_message", "caveat_note", "format_value",
           "format_signed", "format_percent", "format_threshold"]


# -- values in messages and tables ----------------------------------------------------------------------
def format_value(kind: str, v: float | None) -> str:
    """A figure of kind ``"count"``, ``"time"`` or ``"bytes"`` (see ``METRICS``) in its unit;
    ``n/a`` where it was not measured.

    >>> format_value("count", 1672), format_value("time", 0.0125), format_value("bytes", 512)
    ('1.67 K', '12.5 ms', '512 B')
    """
    if v is None:
        return "n/a"
    if kind == "time":
        return duration_to_string(v)
    if kind == "bytes":
        return bytes_to_string(v)
    return number_to_string(v).strip()


def format_signed(kind: str, d: float | None) -> str:
    """A change with its sign.

    >>> format_signed("count", 832), format_signed("time", -0.002), format_signed("bytes", 0)
    ('+832', '-2 ms', '0')
    """
    if d is None:
        return "n/a"
    if d == 0:
        return "0"
    return ("+" if d > 0 else "-") + format_value(kind, abs(d))


def format_percent(rel: float | None) -> str:
    """``+8.33%``; ``from 0`` when there is nothing to be relative to.

    >>> format_percent(0.0833333), format_percent(-2.5), format_percent(1e-7), format_percent(math.inf)
    ('+8.33%', '-250%', '+<0.01%', 'from 0')
    """
    if rel is None:
        return "n/a"
    if math.isinf(rel):
        return "from 0"
    pct = rel * 100
    if pct == 0:
        return "0%"
    if abs(pct) < 0.01:
        return ("+" if pct > 0 else "-") + "<0.01%"
    return f"{pct:+.0f}%" if abs(pct) >= 100 else f"{pct:+.3g}%"


def format_threshold(gate: Gate) -> str:
    """A gate's threshold as written back: ``+1%``, ``+2 ms``, ``-1.5 M``.

    >>> from flopsight.analysis.diff import parse_gate
    >>> format_threshold(parse_gate("flops>+1%")), format_threshold(parse_gate("latency<-2ms"))
    ('+1%', '-2 ms')
    """
    if gate.relative:
        return format_percent(float(gate.value) / 100)
    return format_signed(metric_kind(gate.metric), float(gate.value))


# -- a gate's message -------------------------------------------------------------------------------------
#: (op, beyond the threshold) -> how a message says it
_VERDICTS = {(">", True): "beyond", (">", False): "within", ("<", True): "below", ("<", False): "not below"}


def gate_message(result: GateResult) -> str:
    """What a gate's outcome says: the figure's move, the verdict against the threshold, and
    for a latency the noise test's (``str(result)`` and ``result.message`` are this)."""
    gate = result.gate
    subject = f"{METRICS[gate.metric][0]} of " + (f"module {gate.path!r}" if gate.path else "the model")
    if not result.measured:
        where = "a" if result.a is None else "b"
        return f"{gate.text}: cannot compare {subject}: not measured in {where} (memory needs memory=True)"
    if result.tested is None:  # a count or bytes: exact, nothing to test
        return _moved(gate, subject, result.a, result.b, result.beyond)
    n, m = result.samples
    if not result.tested:
        why = ("no per-call samples are kept for a module" if gate.path is not None else
               f"{n} vs {m} timed calls cannot show significance at alpha={result.alpha:g}")
        note = f"; could not be tested for noise: {why} (see docs/diff.md)"
        return _moved(gate, subject, result.a, result.b, result.beyond) + note
    message = _moved(gate, subject, result.a, result.b, result.beyond, median=f"median of {n} vs {m} calls")
    if result.beyond:  # the test only matters past the threshold: it says whether the calls show it
        verdict = ("significant" if result.significant else "not significant") + \
            (f" (one-sided Mann-Whitney U against a moved by {format_threshold(gate)}, p={result.p_value:.3g}, "
             f"alpha={result.alpha:g})")
        message += (", and " if not result.passed else ", but ") + verdict
    return message


def _moved(gate: Gate, subject: str, a: float, b: float, beyond: bool, median: str = "") -> str:
    """``flops>+1%: FLOPs of the model rose 840 -> 1.67 K (+832, +99%), beyond +1%``."""
    kind, change = metric_kind(gate.metric), Change(a, b)
    per = " per call" if kind == "time" else ""
    if change.delta:
        moved = f"{'rose' if change.delta > 0 else 'fell'} {format_value(kind, a)} -> {format_value(kind, b)}{per}"
        details = [median, format_signed(kind, change.delta), format_percent(change.relative)]
    else:
        moved, details = f"stayed at {format_value(kind, a)}{per}", [median]
    detail = ", ".join(x for x in details if x)
    return (f"{gate.text}: {subject} {moved}" + (f" ({detail})" if detail else "")
            + f", {_VERDICTS[gate.op, beyond]} {format_threshold(gate)}")


# -- the diff ----------------------------------------------------------------------------------------------
def caveat_note(caveat: Caveat) -> str:
    """A diff's caveat as its note says it.

    >>> caveat_note(Caveat("memory", ("b",)))
    'memory was tracked in b only (profile both with memory=True)'
    """
    f = caveat.figures
    if caveat.kind == "calls":
        return (f"a timed {f[0]} forward call(s) and {f[1]} backward pass(es), b {f[2]} and {f[3]}: counts are "
                "totals over each profile, latencies per call")
    if caveat.kind == "device":
        return f"a ran on {f[0]} in {f[1] or '?'}, b on {f[2]} in {f[3] or '?'}"
    if caveat.kind == "memory":
        return f"memory was tracked in {f[0]} only (profile both with memory=True)"
    if caveat.kind == "ranks":
        return "the figures are rank 0's own; the other ranks' results are not compared"
    raise ValueError(f"caveat: unknown kind {caveat.kind!r}")


def _signed(seconds: float) -> str:
    return ("+" if seconds >= 0 else "-") + duration_to_string(abs(seconds))


def _calls(k: CollectiveChange) -> str:
    """``10 calls vs 1, 124 KB each``, or ``2 calls of 124 KB vs 1 of 8 B`` when their sizes differ."""
    (na, nb), (ba, bb) = k.calls, k.bytes_per_call
    if ba == bb or not na or not nb:
        return f"{na} calls vs {nb}, {bytes_to_string(bb or ba)} each"
    return f"{na} calls of {bytes_to_string(ba)} vs {nb} of {bytes_to_string(bb)}"


def _cause_text(c: Cause) -> str:
    d = c.difference.delta
    if c.part == "communication":
        # the median steps' calls of each kind that changed (their exposed times overlap: the
        # part's figure is what the rank waited for in all)
        kinds = [f"{k.kind}: {_calls(k)}" for k in c.collectives
                 if k.calls[0] != k.calls[1] or k.bytes_per_call[0] != k.bytes_per_call[1]]
        return f"{_signed(d)} exposed communication" + (f" ({'; '.join(kinds[:3])})" if kinds else "")
    if c.part == "framework":
        return f"{_signed(d)} framework and hooks (module and autograd hooks, parameter management, Python between ops)"
    if c.part == "other":
        return f"{_signed(d)} other (data loading, loss, idle)"
    if c.part == "profiler":
        return f"{_signed(d)} profiler (flopsight's own time left in the phases, not the model's)"
    label = "compute" if c.part == "compute" else "in the modules"
    moved = [f"{m.path} ({m.type_name}) {_signed(m.delta)}" for m in c.modules if m.delta]
    return f"{_signed(d)} {label}" + (f" (most in {', '.join(moved)})" if moved else "")


def verdict_text(v: Verdict, a: str = "A", b: str = "B") -> str:
    """The verdict in one sentence: how much slower or faster b's step is, with its noise,
    and the parts that moved beyond theirs, largest first."""
    s = v.step
    units = "passes" if v.unit == "pass" else f"{v.unit}s"
    way = "slower" if s.delta >= 0 else "faster"
    head = (f"{b}'s {v.unit} is {duration_to_string(abs(s.delta))} {way} than {a}'s "
            f"(±{duration_to_string(s.noise)}, {v.samples[0]} vs {v.samples[1]} {units})")
    if not s.significant:
        return head + ": within the noise, not significant"
    parts = [_cause_text(c) for c in v.causes]
    if v.unchanged:
        names = list(v.unchanged)
        parts.append((", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]) + " unchanged")
    return head + (": " + ", ".join(parts) if parts else "")


def _json(d: ProfileDiff, all_modules: bool, gates: Sequence[GateResult]) -> dict:
    """The diff's data (:meth:`~flopsight.analysis.diff.ProfileDiff.to_dict`) with its words:
    the caveats as notes, each gate's message, the verdict's text."""
    data = d.to_dict(all_modules, gates)
    out = {}
    for key, value in data.items():
        if key == "caveats":
            out["notes"] = d.notes
        elif key == "gates":
            out["gates"] = [{"gate": g["gate"], "passed": g["passed"], "message": gate_message(r),
                             "tested": g["tested"], "p_value": g["p_value"]} for g, r in zip(value, gates)]
        elif key == "verdict" and value is not None:
            out["verdict"] = {**value, "text": verdict_text(d.verdict, a=d.a.label, b=d.b.label)}
        else:
            out[key] = value
    return out


def render_diff(d: ProfileDiff, fmt: str = "text", *, all_modules: bool = False,
                gates: Sequence[GateResult] = ()) -> str:
    """``d`` as ``"text"``, ``"md"`` (Markdown tables for a pull request) or ``"json"``
    (:meth:`~flopsight.analysis.diff.ProfileDiff.to_dict`); changed modules only unless
    ``all_modules``; ``gates``: outcomes to report beside it."""
    if fmt not in DIFF_FORMATS:
        raise ValueError(f"fmt: expected one of {', '.join(DIFF_FORMATS)}, got {fmt!r}")
    if fmt == "json":
        return json.dumps(_json(d, all_modules, gates), indent=1, allow_nan=False) + "\n"
    render = render_diff_markdown if fmt == "md" else render_diff_text
    return render(d, d.rows(all_modules), all_modules, list(gates))


def _cell(row: ModuleDiff, metric: str) -> str:
    """A module's change in one metric: ``=``, ``+1.2 K (+8.3%)``, or the amount added/removed."""
    change, kind = row.metrics[metric], metric_kind(metric)
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
        if metric_kind(m) == "time":
            return m in timed
        if m == "trainable":
            return any(r.metrics[m] != r.metrics["params"] for r in rows)
        return any(r.metrics[m].changed for r in rows)

    return [m for m in METRICS if wanted(m)]


def _total_lines(d: ProfileDiff) -> list[list[str]]:
    """Rows of the totals table: metric, a, b, change, percent, noise."""
    noise = d.noise()
    out = []
    for metric, (label, kind) in METRICS.items():
        change = d.total.metrics[metric]
        if change.a is None and change.b is None:
            continue
        if metric in ("bwd_latency", "latency") and not (d.a.backward_passes or d.b.backward_passes):
            continue  # an inference profile: latency is the forward's
        note = _noise_note(noise[metric]) if kind == "time" else ""
        out.append([label, format_value(kind, change.a), format_value(kind, change.b),
                    format_signed(kind, change.delta), format_percent(change.relative), note])
    return out


def _noise_note(noise: dict) -> str:
    """One time metric's entry of :meth:`~flopsight.analysis.diff.ProfileDiff.noise`, in words."""
    (n, m), p = noise["samples"], noise["p_value"]
    if p is None:
        return f"untested ({n} vs {m} calls)"
    return f"p={p:.2g} ({n} vs {m} calls)"


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
    """The text format: totals, then the ``rows`` table, then the gates."""
    out = [f"flopsight diff: {d.a.label} -> {d.b.label}"]
    out += [f"note: {n}" for n in d.notes]
    if d.verdict is not None:
        out += ["", "Verdict: " + verdict_text(d.verdict, d.a.label, d.b.label)]
    out += ["", "Model totals", *_table(["metric", "a", "b", "change", "%", "noise"], _total_lines(d), 1)]
    out += ["", f"Modules: {_summary(d, all_modules)}"]
    if rows:
        cols = _columns(d, rows)
        header = ["module", "type", *(METRICS[m][0] for m in cols)]
        lines = [[f"{_status(r)} {r.path}", _type(r), *(_cell(r, m) for m in cols)] for r in rows]
        out += _table(header, lines, 2)
    if gates:
        out += ["", "Gates"] + [("PASS  " if g.passed else "FAIL  ") + gate_message(g) for g in gates]
    return "\n".join(out) + "\n"


def _md(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "'")


def _md_table(header: list[str], lines: list[list[str]], left: int) -> list[str]:
    align = ["---" if i < left else "--:" for i in range(len(header))]
    return ["| " + " | ".join(cells) + " |" for cells in (header, align, *lines)]


def render_diff_markdown(d: ProfileDiff, rows: list[ModuleDiff], all_modules: bool, gates: list[GateResult]) -> str:
    """The ``md`` format: the text format's tables in Markdown, for a pull request."""
    out = [f"### flopsight diff: `{_md(d.a.label)}` → `{_md(d.b.label)}`", ""]
    out += [f"> {_md(n)}" for n in d.notes] + ([""] if d.notes else [])
    if d.verdict is not None:
        out += [f"**Verdict**: {_md(verdict_text(d.verdict, d.a.label, d.b.label))}", ""]
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
                         [[f"`{_md(g.gate.text)}`", "✅ pass" if g.passed else "❌ fail", _md(gate_message(g))]
                          for g in gates], 3) + [""]
    return "\n".join(out).rstrip("\n") + "\n"
