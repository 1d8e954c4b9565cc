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
from collections.abc import Sequence
from typing import Any

from ..analysis.diff import (
    DIFF_FORMATS,
    METRICS,
    Caveat,
    Change,
    Gate,
    GateResult,
    ModuleDiff,
    ProfileDiff,
    metric_kind,
)
from ..analysis.diff.verdict import Verdict
from .numbers import bytes_to_string, duration_to_string, number_to_string
from .verdict_words import verdict_text

__all__ = ["render_diff", "render_diff_text", "render_diff_markdown", "gate_message", "caveat_note", "format_value",
           "format_signed", "format_percent", "format_threshold", "headline", "refusal"]


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
    a, b, beyond = result.a, result.b, result.beyond
    if a is None or b is None:  # (not result.measured)
        where = "a" if a is None else "b"
        return f"{gate.text}: cannot compare {subject}: not measured in {where} (memory needs memory=True)"
    if beyond is None:  # evaluate_gate decides it wherever both sides are measured
        raise ValueError(f"result: {gate.text!r} was measured on both sides but not decided (beyond is None)")
    if result.tested is None:  # a count or bytes: exact, nothing to test
        return _moved(gate, subject, a, b, beyond)
    n, m = result.samples
    if not result.tested:
        why = ("no per-call samples are kept for a module" if gate.path is not None else
               f"{n} vs {m} timed calls cannot show significance at alpha={result.alpha:g}")
        note = f"; could not be tested for noise: {why} (see docs/diff.md)"
        return _moved(gate, subject, a, b, beyond) + note
    message = _moved(gate, subject, a, b, beyond, median=f"median of {n} vs {m} calls")
    if beyond:  # the test only matters past the threshold: it says whether the calls show it
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
#: per header field that differs, what it means for the figures
_DIFFERS = {
    "inputs": "the profiles measured different work, so counts and times change with the inputs, not only the model",
    "dtype": "times and memory change with the precision, not only the model",
    "device": "latencies and memory are not comparable across devices (counts are)",
    "backend": "counts may differ by how they were counted, not by the model",
    "torch": "operators may decompose, count and run differently between torch versions",
    "flopsight": "counting conventions may differ between flopsight versions",
}


def caveat_note(caveat: Caveat) -> str:
    """A diff's caveat as its note says it.

    >>> caveat_note(Caveat("memory", ("b",)))
    'memory was tracked in b only (profile both with memory=True)'
    >>> caveat_note(Caveat("differs", ("inputs", "float32[2, 8]", "float32[4, 8]")))[:61]
    'the inputs differ (a float32[2, 8], b float32[4, 8]): the pro'
    """
    f = caveat.figures
    if caveat.kind == "differs":
        return f"the {f[0]} differ (a {f[1]}, b {f[2]}): {_DIFFERS[f[0]]}"
    if caveat.kind == "modules":
        then = ("modules compared by path anyway (force), though a path need not be the same module in both"
                if f[2] else "modules are not compared, only the totals (see Modules)")
        return f"the model classes differ (a {f[0]}, b {f[1]}): {then}"
    if caveat.kind == "unrecorded":
        return (f"{f[0]} does not record its {', '.join(f[1:])} (an older file?): "
                f"{'that' if len(f) == 2 else 'those'} could not be compared")
    if caveat.kind == "calls":
        return (f"a timed {f[0]} forward call(s) and {f[1]} backward pass(es), b {f[2]} and {f[3]}: counts are "
                "totals over each profile, latencies per call")
    if caveat.kind == "memory":
        return f"memory was tracked in {f[0]} only (profile both with memory=True)"
    if caveat.kind == "ranks":
        return "the figures are rank 0's own; the other ranks' results are not compared"
    raise ValueError(f"caveat: unknown kind {caveat.kind!r}")


# -- the header, the headline, the refusal ------------------------------------------------------------
def headline(d: ProfileDiff) -> str | None:
    """Whether there is any difference, in one line, where the counts are the same (None where
    they differ: the totals show how). Times are judged by the step verdict, else by the noise
    test of the model's calls (:meth:`~flopsight.analysis.diff.ProfileDiff.sameness`).

    >>> import torch, flopsight
    >>> r = flopsight.profile(torch.nn.Linear(4, 2), torch.ones(1, 4), clock=flopsight.FakeClock())
    >>> headline(flopsight.diff(r, r))
    'No difference: the counts and times are identical.'
    """
    same = d.sameness()
    if not (same.model and same.counts):
        return None
    counts = "counts and memory" if d.a.memory_tracked and d.b.memory_tracked else "counts"
    if same.times == "identical":
        return f"No difference: the {counts} and times are identical."
    if same.metric not in METRICS:  # the step verdict decided: it follows, with its figures
        times = "within the noise" if same.times == "noise" else "changed beyond the noise"
        lead = f"No difference in {counts}" if same.times == "noise" else f"The {counts} are identical"
        return f"{lead}; the {same.metric} time {times} (the verdict below)."
    # the model's per-call latency, tested on its calls
    change = d.total.metrics[same.metric]
    moved = f"{METRICS[same.metric][0]} {format_signed('time', change.delta)} ({format_percent(change.relative)})"
    n, m = same.samples
    tested = f"p={same.p_value:.2g}, {n} vs {m} calls" if same.p_value is not None else ""
    if same.times == "noise":
        return f"No difference in {counts}; times within the noise ({moved}, {tested})."
    if same.times == "untested":
        return (f"No difference in {counts}; times differ ({moved}), but {n} vs {m} calls cannot tell a change "
                "from noise (profile with repeat=N for samples).")
    return f"The {counts} are identical; times changed beyond the noise ({moved}, {tested})."


def refusal(d: ProfileDiff) -> str | None:
    """Why no module is compared (None when they are): the model classes differ."""
    if d.modules_compared:
        return None
    names = [c.figures[:2] for c in d.caveats if c.kind == "modules"][0]
    return (f"not compared: the model classes differ (a {names[0]}, b {names[1]}), and a module path in one model "
            "is not the same module in the other, so no module-level change or cause is given; the totals compare "
            "the whole models. flopsight diff --force (diff(..., force=True)) compares them module by module anyway.")


def _run_value(value: str) -> str:
    return value or "? (not recorded)"


def _header_lines(d: ProfileDiff) -> list[list[str]]:
    """The header's rows: field, a's value, b's value, and ``differs`` where they do."""
    differing = d.differing
    return [[name, _run_value(va), _run_value(vb), "differs" if name in differing else ""]
            for name, va, vb in d.header()]


def _json(d: ProfileDiff, all_modules: bool, gates: Sequence[GateResult]) -> dict:
    """The diff's data (:meth:`~flopsight.analysis.diff.ProfileDiff.to_dict`) with its words:
    the caveats as notes (the differences also as warnings), the headline, why modules are not
    compared, each gate's message, the verdict's text."""
    data = d.to_dict(all_modules, gates)
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key == "caveats":
            out["warnings"] = d.warnings
            out["notes"] = d.notes
        elif key == "sameness":
            out["sameness"] = {**value, "text": headline(d)}
        elif key == "module_level":
            out["module_level"] = {**value, "text": refusal(d)}
        elif key == "gates":
            out["gates"] = [{"gate": g["gate"], "passed": g["passed"], "message": gate_message(r),
                             "tested": g["tested"], "p_value": g["p_value"]} for g, r in zip(value, gates)]
        elif key == "verdict" and d.verdict is not None:  # value: the verdict's to_dict()
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


def _shown_verdict(d: ProfileDiff) -> Verdict | None:
    """The verdict, shown unless the times are identical (it would only say 0 s slower)."""
    return d.verdict if d.verdict is not None and d.sameness().times != "identical" else None


def render_diff_text(d: ProfileDiff, rows: list[ModuleDiff], all_modules: bool, gates: list[GateResult]) -> str:
    """The text format: what each side ran, the warnings, whether anything differs, the totals,
    then the ``rows`` table, then the gates."""
    out = [f"flopsight diff: {d.a.label} -> {d.b.label}", ""]
    out += _table(["run", "a", "b", ""], _header_lines(d), 4)
    if d.caveats:
        out.append("")
    out += [f"{'warning' if c.warns else 'note'}: {caveat_note(c)}" for c in d.caveats]
    line = headline(d)
    if line:
        out += ["", line]
    verdict = _shown_verdict(d)
    if verdict is not None:
        out += ["", "Verdict: " + verdict_text(verdict, d.a.label, d.b.label)]
    out += ["", "Model totals", *_table(["metric", "a", "b", "change", "%", "noise"], _total_lines(d), 1)]
    # modules not compared (the model classes differ): why, and no rows (d.modules is empty)
    out += ["", f"Modules: {_summary(d, all_modules) if d.modules_compared else refusal(d)}"]
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
    out += _md_table(["run", "a", "b"], [[f"**{_md(n)}** (differs)" if x else _md(n), _md(va), _md(vb)]
                                        for n, va, vb, x in _header_lines(d)], 3) + [""]
    out += [f"> **{'warning' if c.warns else 'note'}**: {_md(caveat_note(c))}" for c in d.caveats]
    out += [""] if d.caveats else []
    line = headline(d)
    if line:
        out += [f"**{_md(line)}**", ""]
    verdict = _shown_verdict(d)
    if verdict is not None:
        out += [f"**Verdict**: {_md(verdict_text(verdict, d.a.label, d.b.label))}", ""]
    out += _md_table(["metric", "a", "b", "change", "%", "noise"], [[_md(c) for c in r] for r in _total_lines(d)], 1)
    refused = refusal(d)  # None where the modules are compared
    modules = _summary(d, all_modules) if refused is None else refused
    out += ["", f"**Modules**: {_md(modules)}", ""]
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
