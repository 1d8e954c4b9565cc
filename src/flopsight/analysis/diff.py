"""Diff of two profiles, keyed by module path, with gates for CI (docs/diff.md).

:func:`diff` compares two results (or saved ``.json`` profiles): per module the change in
parameters, MACs, FLOPs, latency and memory; :meth:`ProfileDiff.check` turns gates such as
``"flops>+1%"`` into failures, exact on counts and noise-aware on times.

>>> import torch, flopsight
>>> clock = flopsight.FakeClock()
>>> narrow = flopsight.profile(torch.nn.Linear(4, 2), torch.ones(1, 4), clock=clock)
>>> wide = flopsight.profile(torch.nn.Linear(4, 3), torch.ones(1, 4), clock=clock)
>>> d = flopsight.diff(narrow, wide)
>>> d.total["params"].a, d.total["params"].b, d.total["flops"].delta  # 10 -> 15; 2*4*1 MACs + 1 bias add per output
(10, 15, 9)
>>> for failure in d.check(["params>+40%", "flops>+1K"]):
...     print(failure)
params>+40%: params of the model rose 10 -> 15 (+5, +50%), beyond +40%
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import statistics
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Iterable, Sequence

from ..result.profile_result import ProfileResult, load
from ..result.tree import PHASES, ModuleNode
from ..renderers.numbers import bytes_to_string, duration_to_string, number_to_string

__all__ = ["diff", "ProfileDiff", "ModuleDiff", "Change", "Side", "Gate", "GateResult", "parse_gate",
           "parse_gates", "mann_whitney_p", "METRICS", "GATE_METRICS", "DIFF_FORMATS", "DIFF_SCHEMA_VERSION",
           "DEFAULT_ALPHA"]

#: Version of the dict :meth:`ProfileDiff.to_dict` returns (the ``json`` format).
DIFF_SCHEMA_VERSION = 1
#: What :meth:`ProfileDiff.render` writes.
DIFF_FORMATS = ("text", "md", "json")
#: Significance level of the noise test on latencies.
DEFAULT_ALPHA = 0.05

#: metric -> (label, kind): kind "count" (exact), "time" (seconds per call, noisy), "bytes" (exact)
METRICS = {
    "params": ("params", "count"),
    "trainable": ("trainable params", "count"),
    "macs": ("MACs", "count"),
    "flops": ("FLOPs", "count"),
    "fwd_latency": ("fwd latency", "time"),
    "bwd_latency": ("bwd latency", "time"),
    "latency": ("latency", "time"),
    "memory": ("peak memory", "bytes"),
    "activations": ("activations", "bytes"),
}
#: The metrics a gate may name.
GATE_METRICS = ("params", "macs", "flops", "latency", "fwd_latency", "bwd_latency", "memory", "activations")
_TIME_METRICS = ("fwd_latency", "bwd_latency", "latency")
_COUNT_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_TIME_UNITS = {"s": Fraction(1), "ms": Fraction(1, 10**3), "us": Fraction(1, 10**6), "µs": Fraction(1, 10**6)}
GATE_GRAMMAR = (
    "<metric>[@<module path>]<op><threshold>: metric one of " + ", ".join(GATE_METRICS) + "; op > or <; "
    "threshold a signed percentage (+1%, -5%) or an absolute number (+2M for counts and bytes with "
    "K/M/G/T, +2ms for latencies with s/ms/us), e.g. flops>+1% or latency@encoder.layer.0>+0.5ms"
)


# -- the change of one figure ----------------------------------------------------------
@dataclass(frozen=True)
class Change:
    """One figure in ``a`` and in ``b`` (None: not measured there, e.g. memory not tracked).

    >>> Change(200, 150).delta, Change(200, 150).relative, Change(0, 5).relative
    (-50, -0.25, inf)
    """

    a: float | None
    b: float | None

    @property
    def delta(self) -> float | None:
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def relative(self) -> float | None:
        """``delta / |a|``; ``±inf`` from 0 to something, 0.0 from 0 to 0, None when unmeasured."""
        d = self.delta
        if d is None:
            return None
        if self.a == 0:
            return 0.0 if d == 0 else math.copysign(math.inf, d)
        return d / abs(self.a)

    @property
    def changed(self) -> bool:
        return self.a != self.b


@dataclass(frozen=True)
class ModuleDiff:
    """One module path: its status (``added``, ``removed``, ``changed`` or ``unchanged``:
    counts and type only, since latencies always move a little), its type on each side, and
    a :class:`Change` per metric of :data:`METRICS` (``diff_row["flops"]``)."""

    path: str
    status: str
    type_a: str | None
    type_b: str | None
    depth: int
    metrics: dict[str, Change]

    def __getitem__(self, metric: str) -> Change:
        if metric not in self.metrics:
            raise KeyError(f"metric: expected one of {', '.join(METRICS)}, got {metric!r}")
        return self.metrics[metric]

    @property
    def changed(self) -> bool:
        return self.status != "unchanged"


@dataclass(frozen=True)
class Side:
    """What one profile brings to the diff: its label (the file it was read from, else
    ``"a"``/``"b"``), model, timed forward calls and backward passes, whether it tracked
    memory, and its per-call latency samples by time metric."""

    label: str
    model: str
    device: str
    dtype: str
    forward_calls: int
    backward_passes: int
    memory_tracked: bool
    samples: dict[str, list[float]] = field(default_factory=dict)


# -- gates --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Gate:
    """A parsed gate: fail when ``metric`` (of the model, or of module ``path``) changes
    beyond ``value`` in the direction of ``op``; ``value`` in percent when ``relative``,
    else in the metric's unit (count, bytes, seconds)."""

    text: str
    metric: str
    path: str | None
    op: str
    value: Fraction
    relative: bool

    def threshold(self) -> str:
        """The threshold as written back: ``+1%``, ``+2 ms``, ``-1.5 M``."""
        if self.relative:
            return format_percent(float(self.value) / 100)
        return format_signed(_kind(self.metric), float(self.value))


_GATE = re.compile(
    r"^\s*(?P<metric>[A-Za-z_]+)(?:@(?P<path>[^<>\s]+))?\s*(?P<op>[<>])\s*"
    r"(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<unit>%|[KMGT]|ms|us|µs|s)?\s*$"
)


def parse_gate(text: str) -> Gate:
    """Parse ``<metric>[@<path>]<op><threshold>``; a malformed gate raises ValueError naming
    it and the grammar.

    >>> g = parse_gate("flops@encoder.layer.0>+1.5%")
    >>> g.metric, g.path, g.op, g.value, g.relative
    ('flops', 'encoder.layer.0', '>', Fraction(3, 2), True)
    >>> parse_gate("latency<-2ms").value
    Fraction(-1, 500)
    >>> parse_gate("flop>1%")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: gate 'flop>1%': unknown metric 'flop' (did you mean 'flops'?); expected <metric>[@<module path>]...
    """
    if not isinstance(text, str):
        raise TypeError(f"gate: expected a string such as 'flops>+1%', got {type(text).__name__}")
    m = _GATE.match(text)
    if m is None:
        raise ValueError(f"gate {text!r}: not understood; expected {GATE_GRAMMAR}")
    metric, unit = m["metric"].lower(), m["unit"] or ""
    if metric not in GATE_METRICS:
        close = difflib.get_close_matches(metric, GATE_METRICS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"gate {text!r}: unknown metric {metric!r}{hint}; expected {GATE_GRAMMAR}")
    number = Fraction(m["number"])
    if unit == "%":
        return Gate(text, metric, m["path"], m["op"], number, True)
    return Gate(text, metric, m["path"], m["op"], number * _unit_scale(text, metric, unit, number), False)


def _unit_scale(text: str, metric: str, unit: str, number: Fraction) -> Fraction:
    """The factor an absolute threshold's unit stands for, checked against the metric's kind."""
    if _kind(metric) == "time":
        if unit in _TIME_UNITS:
            return _TIME_UNITS[unit]
        if unit == "" and number == 0:
            return Fraction(1)
        raise ValueError(f"gate {text!r}: a latency threshold needs a time unit (s, ms, us) or %; "
                         f"expected {GATE_GRAMMAR}")
    if unit in _COUNT_UNITS:
        return Fraction(_COUNT_UNITS[unit])
    raise ValueError(f"gate {text!r}: {metric} is not a time; use a count suffix (K, M, G, T) or %; "
                     f"expected {GATE_GRAMMAR}")


def parse_gates(gates: str | Iterable[str]) -> list[Gate]:
    """Every gate parsed (one string is one gate), so a typo fails before anything is compared."""
    if isinstance(gates, str):
        gates = [gates]
    return [g if isinstance(g, Gate) else parse_gate(g) for g in gates]


@dataclass(frozen=True)
class GateResult:
    """A gate's outcome: ``passed``, a readable ``message``, and for a latency gate whether
    the noise test could run (``tested``) and its one-sided ``p_value``."""

    gate: Gate
    passed: bool
    message: str
    tested: bool | None = None
    p_value: float | None = None

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        return {"gate": self.gate.text, "passed": self.passed, "message": self.message,
                "tested": self.tested, "p_value": self.p_value}


# -- the noise test -----------------------------------------------------------------------
#: Largest n*m for which the exact distribution of U is computed (beyond: normal approximation).
_EXACT_LIMIT = 400


def mann_whitney_p(x: Sequence[float], y: Sequence[float]) -> float:
    """One-sided Mann-Whitney U test: the p-value of ``y`` tending to be larger than ``x``.

    Exact when there are no ties and ``len(x) * len(y) <= 400``, else the normal
    approximation with tie and continuity corrections.

    >>> mann_whitney_p([1, 2, 3, 4], [5, 6, 7, 8])  # 1 arrangement in C(8, 4) = 70
    0.014285714285714285
    >>> mann_whitney_p([5, 6, 7, 8], [1, 2, 3, 4])
    1.0
    """
    n, m = len(x), len(y)
    if not n or not m:
        raise ValueError("x, y: the test needs at least one sample on each side")
    ranks = _ranks([*x, *y])
    u = sum(ranks[n:]) - m * (m + 1) / 2  # pairs with y above x, ties counting half
    ties = _tie_sizes([*x, *y])
    if not ties and n * m <= _EXACT_LIMIT:
        counts = _u_distribution(n, m)
        return sum(counts[round(u):]) / sum(counts)
    return _normal_upper_tail(u, n, m, ties)


def _ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties sharing their average rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def _tie_sizes(values: list[float]) -> list[int]:
    counts: dict[float, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return [c for c in counts.values() if c > 1]


def _u_distribution(n: int, m: int) -> list[int]:
    """How many of the C(n+m, n) orderings give U = 0, 1, ..., n*m (no ties).

    The largest value is an x (adding no pair) or a y (above all i x's: i pairs), so
    f(i, j) = f(i-1, j) + q^i f(i, j-1), the coefficients of a Gaussian binomial.
    """
    prev = [[1] for _ in range(m + 1)]  # f(0, j): one ordering, U = 0
    for i in range(1, n + 1):
        cur = [[1]]  # f(i, 0)
        for j in range(1, m + 1):
            shifted = [0] * i + cur[j - 1]
            size = max(len(prev[j]), len(shifted))
            cur.append([(prev[j][k] if k < len(prev[j]) else 0) + (shifted[k] if k < len(shifted) else 0)
                        for k in range(size)])
        prev = cur
    return prev[m]


def _normal_upper_tail(u: float, n: int, m: int, ties: list[int]) -> float:
    total = n + m
    variance = n * m / 12 * ((total + 1) - sum(t**3 - t for t in ties) / (total * (total - 1)))
    if variance <= 0:  # every value equal: no evidence either way
        return 1.0
    z = (u - n * m / 2 - 0.5) / math.sqrt(variance)
    return 0.5 * math.erfc(z / math.sqrt(2))


def _testable(n: int, m: int, alpha: float) -> bool:
    """Whether any ordering of n and m samples could be significant: the smallest exact
    p-value, 1 / C(n+m, n), must be below ``alpha``."""
    return n > 0 and m > 0 and 1 / math.comb(n + m, n) < alpha


# -- building the diff ------------------------------------------------------------------
def diff(a: ProfileResult | str | os.PathLike, b: ProfileResult | str | os.PathLike) -> "ProfileDiff":
    """Compare profile ``a`` (before) with ``b`` (after): results or saved ``.json`` files.

    Counts are the totals each result holds (profile the same calls on both sides);
    latencies are per call: a module's time per forward call of the model (backward: per
    backward pass), the model's from its timed spans. See docs/diff.md.
    """
    ra, la = _as_result(a, "a")
    rb, lb = _as_result(b, "b")
    sa, sb = _side(ra, la), _side(rb, lb)
    paths = _merged_paths(ra, rb)
    total = _row("", ra, rb, sa, sb, model=True)
    modules = {p: _row(p, ra, rb, sa, sb) for p in paths if p}
    return ProfileDiff(sa, sb, total, modules, _notes(ra, rb, sa, sb))


def _as_result(value: Any, arg: str) -> tuple[ProfileResult, str]:
    if isinstance(value, ProfileResult):
        return value, arg
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{arg}: expected a ProfileResult or the path of a saved .json profile, "
                        f"got {type(value).__name__}")
    path = os.fspath(value)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{arg}: no such file {path!r}")
    try:
        return load(path), path
    except (ValueError, KeyError, TypeError, AttributeError) as e:  # JSON, but not a profile
        raise ValueError(f"{arg}: {path!r} is not a flopsight profile JSON ({e})") from None


def _side(result: ProfileResult, label: str) -> Side:
    forward = list(result.spans.get("forward", ()))
    backward = list(result.spans.get("backward", ()))
    samples = {"fwd_latency": forward, "bwd_latency": backward, "latency": _iteration_samples(forward, backward)}
    meta = result.metadata
    return Side(label, meta.model, meta.device, meta.dtype, len(forward), len(backward),
                result.memory is not None, samples)


def _iteration_samples(forward: list[float], backward: list[float]) -> list[float]:
    """Per-call forward + backward: calls paired in order when each had a backward pass,
    the forward calls when none had; none when they cannot be paired (accumulation)."""
    if not backward:
        return forward
    if len(forward) == len(backward):
        return [f + b for f, b in zip(forward, backward)]
    return []


def _merged_paths(a: ProfileResult, b: ProfileResult) -> list[str]:
    """Every path of either profile in tree order: b's layout, a's removed modules after
    their preceding sibling in a."""
    def children(path: str) -> list[str]:
        in_a = a.modules[path].children if path in a.modules else ()
        in_b = b.modules[path].children if path in b.modules else ()
        return _merge_order(list(in_b), list(in_a))

    out, stack = [], [""]
    while stack:
        path = stack.pop()
        out.append(path)
        stack.extend(reversed(children(path)))
    return out


def _merge_order(first: list[str], second: list[str]) -> list[str]:
    """``first``, with each item only in ``second`` inserted after its predecessor there.

    >>> _merge_order(["x", "z"], ["x", "y", "z", "w"])
    ['x', 'y', 'z', 'w']
    """
    merged, seen, previous = list(first), set(first), None
    for item in second:
        if item not in seen:
            merged.insert(merged.index(previous) + 1 if previous is not None else 0, item)
            seen.add(item)
        previous = item
    return merged


def _figures(node: ModuleNode, result: ProfileResult, side: Side, model: bool) -> dict[str, float | None]:
    """A module's figures: counts over all phases, latencies per call, memory (None untracked)."""
    fwd = node.forward.latency / max(side.forward_calls, 1)
    # recompute (activation checkpointing) runs inside the backward pass: it is backward time
    bwd = (node.backward.latency + node.recompute.latency) / max(side.backward_passes, 1)
    total = fwd + bwd
    if model:  # the model's timed spans: medians, robust to a slow first call (what gates decide on)
        fwd, bwd, total = (_median(side.samples[m], v) for m, v in
                           (("fwd_latency", fwd), ("bwd_latency", bwd), ("latency", total)))
    figures: dict[str, float | None] = {
        "params": node.params,
        "trainable": node.params_trainable,
        "macs": sum(node.inclusive[p].macs for p in PHASES),
        "flops": sum(node.inclusive[p].flops for p in PHASES),
        "fwd_latency": fwd,
        "bwd_latency": bwd,
        "latency": total,
    }
    figures.update(_memory_figures(node, result, model))
    return figures


def _median(samples: list[float], otherwise: float) -> float:
    return statistics.median(samples) if samples else otherwise


def _memory_figures(node: ModuleNode, result: ProfileResult, model: bool) -> dict[str, int | None]:
    if result.memory is None:
        return {"memory": None, "activations": None}
    if model:
        return {"memory": result.memory.peak, "activations": result.memory.activations}
    mem = node.memory  # None for a module that allocated nothing
    return {"memory": max(mem.peak, mem.peak_backward) if mem else 0, "activations": mem.activations if mem else 0}


def _absent(result: ProfileResult) -> dict[str, float | None]:
    """A module missing from a profile costs nothing there (memory stays unknown if untracked)."""
    untracked = result.memory is None
    return {m: None if untracked and m in ("memory", "activations") else 0 for m in METRICS}


def _row(path: str, a: ProfileResult, b: ProfileResult, sa: Side, sb: Side, model: bool = False) -> ModuleDiff:
    na = a.module(path) if path in a.modules else None
    nb = b.module(path) if path in b.modules else None
    fa = _figures(na, a, sa, model) if na is not None else _absent(a)
    fb = _figures(nb, b, sb, model) if nb is not None else _absent(b)
    metrics = {m: Change(fa[m], fb[m]) for m in METRICS}
    type_a, type_b = (na.type_name if na else None), (nb.type_name if nb else None)
    if na is None or nb is None:
        status = "added" if na is None else "removed"
    elif type_a != type_b or any(c.changed for m, c in metrics.items() if _kind(m) != "time"):
        status = "changed"
    else:
        status = "unchanged"
    return ModuleDiff(path, status, type_a, type_b, (na or nb).depth, metrics)


def _notes(a: ProfileResult, b: ProfileResult, sa: Side, sb: Side) -> list[str]:
    """What a reader must know before trusting the figures."""
    notes = []
    if (sa.forward_calls, sa.backward_passes) != (sb.forward_calls, sb.backward_passes):
        notes.append(f"a timed {sa.forward_calls} forward call(s) and {sa.backward_passes} backward pass(es), "
                     f"b {sb.forward_calls} and {sb.backward_passes}: counts are totals over each profile, "
                     "latencies per call")
    if (sa.device, sa.dtype) != (sb.device, sb.dtype):
        notes.append(f"a ran on {sa.device} in {sa.dtype or '?'}, b on {sb.device} in {sb.dtype or '?'}")
    if sa.memory_tracked != sb.memory_tracked:
        which = "a" if sa.memory_tracked else "b"
        notes.append(f"memory was tracked in {which} only (profile both with memory=True)")
    if a.ranks or b.ranks:
        notes.append("the figures are rank 0's own; the other ranks' results are not compared")
    return notes


def _kind(metric: str) -> str:
    return METRICS[metric][1]


# -- the diff -------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProfileDiff:
    """Two profiles compared: ``total`` (the model), ``modules`` (path -> :class:`ModuleDiff`
    in tree order, the root left out), the two :class:`Side` s and ``notes``."""

    a: Side
    b: Side
    total: ModuleDiff
    modules: dict[str, ModuleDiff]
    notes: list[str] = field(default_factory=list)

    def module(self, path: str) -> ModuleDiff:
        """The row of module ``path`` (``""``: the model totals)."""
        if path == "":
            return self.total
        if path not in self.modules:
            raise KeyError(f"path: {self._no_module(path)}")
        return self.modules[path]

    def _no_module(self, path: str) -> str:
        close = difflib.get_close_matches(path, list(self.modules), n=3)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        return f"no module {path!r} in either profile{hint}"

    @property
    def changed(self) -> list[ModuleDiff]:
        """Modules added, removed, or with a count or type that differs."""
        return [m for m in self.modules.values() if m.changed]

    @property
    def added(self) -> list[str]:
        return [p for p, m in self.modules.items() if m.status == "added"]

    @property
    def removed(self) -> list[str]:
        return [p for p, m in self.modules.items() if m.status == "removed"]

    # -- gates ----------------------------------------------------------------------------
    def evaluate(self, gates: str | Iterable[str | Gate], alpha: float = DEFAULT_ALPHA) -> list[GateResult]:
        """Every gate's outcome, passed or not. All gates are parsed and their module paths
        checked first: a malformed gate or unknown path raises ValueError before any comparison."""
        alpha = _check_alpha(alpha)
        parsed = parse_gates(gates)
        for gate in parsed:
            if gate.path is not None and gate.path not in self.modules:
                raise ValueError(f"gate {gate.text!r}: {self._no_module(gate.path)}")
        return [self._evaluate(gate, alpha) for gate in parsed]

    def check(self, gates: str | Iterable[str | Gate], alpha: float = DEFAULT_ALPHA) -> list[GateResult]:
        """The gates that fail (an empty list when all pass), each with a readable message."""
        return [r for r in self.evaluate(gates, alpha) if not r.passed]

    def _evaluate(self, gate: Gate, alpha: float) -> GateResult:
        change = self.module(gate.path or "").metrics[gate.metric]
        subject = f"{METRICS[gate.metric][0]} of " + (f"module {gate.path!r}" if gate.path else "the model")
        if change.a is None or change.b is None:
            where = "a" if change.a is None else "b"
            return GateResult(gate, False, f"{gate.text}: cannot compare {subject}: not measured in {where} "
                                           "(memory needs memory=True)")
        if _kind(gate.metric) == "time":
            return self._time_gate(gate, change, subject, alpha)
        beyond = _beyond(gate, change.a, change.b)
        return GateResult(gate, not beyond, _gate_message(gate, subject, change.a, change.b, beyond))

    def _time_gate(self, gate: Gate, change: Change, subject: str, alpha: float) -> GateResult:
        xs, ys = (self.a.samples[gate.metric], self.b.samples[gate.metric]) if gate.path is None else ([], [])
        if not _testable(len(xs), len(ys), alpha):
            beyond = _beyond(gate, change.a, change.b)
            why = ("no per-call samples are kept for a module" if gate.path is not None else
                   f"{len(xs)} vs {len(ys)} timed calls cannot show significance at alpha={alpha:g}")
            note = f"; could not be tested for noise: {why} (see docs/diff.md)"
            return GateResult(gate, not beyond, _gate_message(gate, subject, change.a, change.b, beyond) + note,
                              tested=False)
        ma, mb = statistics.median(xs), statistics.median(ys)
        beyond = _beyond(gate, ma, mb)
        p = _shifted_test(gate, xs, ys)
        failed = beyond and p < alpha
        verdict = ("significant" if p < alpha else "not significant") + \
            f" (one-sided Mann-Whitney U against a moved by {gate.threshold()}, p={p:.3g}, alpha={alpha:g})"
        message = _gate_message(gate, subject, ma, mb, beyond, median=f"median of {len(xs)} vs {len(ys)} calls")
        if beyond:
            message += (", and " if failed else ", but ") + verdict
        return GateResult(gate, not failed, message, tested=True, p_value=p)

    # -- output ----------------------------------------------------------------------------
    def to_dict(self, all_modules: bool = False, gates: Sequence[GateResult] = ()) -> dict[str, Any]:
        """The diff as a JSON-ready dict (the ``json`` format; documented in docs/diff.md)."""
        rows = self.modules.values() if all_modules else self.changed
        return {
            "flopsight_diff": DIFF_SCHEMA_VERSION,
            "a": _side_dict(self.a),
            "b": _side_dict(self.b),
            "notes": list(self.notes),
            "units": {m: {"count": "count", "time": "seconds per call", "bytes": "bytes"}[k]
                      for m, (_, k) in METRICS.items()},
            "total": {**_row_dict(self.total), "noise": self._noise()},
            "modules": [_row_dict(r) for r in rows],
            "summary": {"modules": len(self.modules), "changed": len(self.changed), "added": len(self.added),
                        "removed": len(self.removed)},
            "gates": [g.to_dict() for g in gates],
        }

    def _noise(self) -> dict[str, Any]:
        """Per time metric of the model: samples, medians and the two-sided p-value of any shift."""
        out = {}
        for metric in _TIME_METRICS:
            xs, ys = self.a.samples[metric], self.b.samples[metric]
            tested = _testable(len(xs), len(ys), DEFAULT_ALPHA)
            out[metric] = {
                "samples": [len(xs), len(ys)],
                "median": [statistics.median(xs) if xs else None, statistics.median(ys) if ys else None],
                "p_value": _two_sided(xs, ys) if tested else None,
            }
        return out

    def render(self, fmt: str = "text", *, all_modules: bool = False, gates: Sequence[GateResult] = ()) -> str:
        """The diff as ``"text"``, ``"md"`` (Markdown tables for a pull request) or ``"json"``;
        changed modules only unless ``all_modules``; ``gates``: results of :meth:`evaluate` to
        report beside it."""
        if fmt not in DIFF_FORMATS:
            raise ValueError(f"fmt: expected one of {', '.join(DIFF_FORMATS)}, got {fmt!r}")
        if fmt == "json":
            return json.dumps(self.to_dict(all_modules, gates), indent=1, allow_nan=False) + "\n"
        from ..renderers.diff_renderer import render_diff_markdown, render_diff_text

        rows = list(self.modules.values()) if all_modules else self.changed
        return (render_diff_markdown if fmt == "md" else render_diff_text)(self, rows, all_modules, list(gates))


def _check_alpha(alpha: Any) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise ValueError(f"alpha: expected a significance level between 0 and 1, got {alpha!r}")
    return float(alpha)


def _beyond(gate: Gate, a: float, b: float) -> bool:
    """Whether the change a -> b passes the gate's threshold in its direction (exactly:
    fractions, so a count never fails or passes by rounding)."""
    delta = Fraction(b) - Fraction(a)
    if not gate.relative:
        change: Fraction | float = delta
    elif a == 0:  # from nothing: beyond any percentage
        change = math.copysign(math.inf, delta) if delta else 0
    else:
        change = delta / abs(Fraction(a)) * 100
    return change > gate.value if gate.op == ">" else change < gate.value


def _shifted_test(gate: Gate, xs: list[float], ys: list[float]) -> float:
    """One-sided p-value that b's calls lie beyond a's moved by the threshold (scaled for a
    percentage, shifted for a time): 'slower by more than 10%' is tested, not just 'slower'."""
    t = float(gate.value)
    moved = [x * (1 + t / 100) for x in xs] if gate.relative else [x + t for x in xs]
    return mann_whitney_p(moved, ys) if gate.op == ">" else mann_whitney_p(ys, moved)


def _two_sided(xs: list[float], ys: list[float]) -> float:
    return min(1.0, 2 * min(mann_whitney_p(xs, ys), mann_whitney_p(ys, xs)))


#: (op, beyond the threshold) -> how a message says it
_VERDICTS = {(">", True): "beyond", (">", False): "within", ("<", True): "below", ("<", False): "not below"}


def _gate_message(gate: Gate, subject: str, a: float, b: float, beyond: bool, median: str = "") -> str:
    """``flops>+1%: FLOPs of the model rose 840 -> 1.67 K (+832, +99%), beyond +1%``."""
    kind, change = _kind(gate.metric), Change(a, b)
    per = " per call" if kind == "time" else ""
    if change.delta:
        moved = f"{'rose' if change.delta > 0 else 'fell'} {format_value(kind, a)} -> {format_value(kind, b)}{per}"
        details = [median, format_signed(kind, change.delta), format_percent(change.relative)]
    else:
        moved, details = f"stayed at {format_value(kind, a)}{per}", [median]
    detail = ", ".join(x for x in details if x)
    return (f"{gate.text}: {subject} {moved}" + (f" ({detail})" if detail else "")
            + f", {_VERDICTS[gate.op, beyond]} {gate.threshold()}")


def _side_dict(side: Side) -> dict[str, Any]:
    return {"label": side.label, "model": side.model, "device": side.device, "dtype": side.dtype,
            "forward_calls": side.forward_calls, "backward_passes": side.backward_passes,
            "memory_tracked": side.memory_tracked}


def _row_dict(row: ModuleDiff) -> dict[str, Any]:
    def finite(x: float | None) -> float | None:
        return x if x is None or math.isfinite(x) else None

    return {"path": row.path, "status": row.status, "type_a": row.type_a, "type_b": row.type_b,
            "metrics": {m: {"a": c.a, "b": c.b, "delta": c.delta, "relative": finite(c.relative)}
                        for m, c in row.metrics.items()}}


# -- values in messages and tables ----------------------------------------------------------------------
def format_value(kind: str, v: float | None) -> str:
    if v is None:
        return "n/a"
    if kind == "time":
        return duration_to_string(v)
    if kind == "bytes":
        return bytes_to_string(v)
    return number_to_string(v).strip()


def format_signed(kind: str, d: float | None) -> str:
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
