"""Two profiles compared module by module: :func:`diff` and the records it returns.

:class:`ProfileDiff` holds, per module path, a :class:`Change` per metric of
:data:`~.metrics.METRICS` (counts over all phases, latencies per call, memory), the two
:class:`Side` s with what each ran (:mod:`.header`) and the caveats a reader needs: every
difference between the runs, and when the model classes differ, why modules are not compared
(unless ``force``). :meth:`ProfileDiff.sameness` says whether there is any difference at all
(:mod:`.sameness`). Gates are decided in :mod:`.gates`, the text is written by
:mod:`flopsight.renderers.diff_renderer`.

>>> import torch, flopsight
>>> clock = flopsight.FakeClock()
>>> d = diff(flopsight.profile(torch.nn.Linear(4, 2), torch.ones(1, 4), clock=clock),
...          flopsight.profile(torch.nn.Linear(4, 3), torch.ones(1, 4), clock=clock))
>>> d.total["macs"], d.total.status, d.modules  # a bare Linear: the model is its only module
(Change(a=8, b=12), 'changed', {})
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import math
import os
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ...result.profile_result import ProfileResult, load
from ...result.reporting import renderers
from ...result.tree import PHASES, ModuleNode
from .gates import Gate, GateResult, check_alpha, evaluate_gate, parse_gates
from .header import RUN_FIELDS, differences, model_names, run_fields, same_model, unrecorded
from .metrics import METRICS, TIME_METRICS, metric_kind
from .sameness import Sameness, sameness
from .stats import DEFAULT_ALPHA, testable, two_sided_p
from .verdict import Verdict, verdict

__all__ = ["diff", "ProfileDiff", "ModuleDiff", "Change", "Side", "Caveat", "DIFF_FORMATS", "DIFF_SCHEMA_VERSION"]

#: Version of the dict :meth:`ProfileDiff.to_dict` returns (the ``json`` format); 2 added the
#: header, the warnings, ``module_level`` and ``sameness``.
DIFF_SCHEMA_VERSION = 2
#: What :meth:`ProfileDiff.render` writes.
DIFF_FORMATS = ("text", "md", "json")


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
        if d is None or self.a is None:  # (delta is None without a)
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
    memory, its per-call latency samples by time metric, and what it ran (``run``: the
    header's fields, :data:`~.header.RUN_FIELDS`, ``""`` where not recorded)."""

    label: str
    model: str
    device: str
    dtype: str
    forward_calls: int
    backward_passes: int
    memory_tracked: bool
    samples: dict[str, list[float]] = field(default_factory=dict)
    #: per module path, its per-call latency samples by time metric (profiles of several
    #: steps or passes: one sample each); empty otherwise
    module_samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    #: the header's fields of this side's run (model, inputs, dtype, device, backend, versions)
    run: dict[str, str] = field(default_factory=dict)
    #: the model's class with its module ("" where not recorded)
    model_class: str = ""


# -- building the diff ------------------------------------------------------------------
def diff(a: ProfileResult | str | os.PathLike, b: ProfileResult | str | os.PathLike, *,
         force: bool = False) -> ProfileDiff:
    """Compare profile ``a`` (before) with ``b`` (after): results or saved ``.json`` files.

    Counts are the totals each result holds (profile the same calls on both sides);
    latencies are per call: a module's time per forward call of the model (backward: per
    backward pass), the model's from its timed spans. Every difference between the two runs
    (model, inputs, dtype, device, backend, torch, flopsight) is a caveat. When the model
    classes differ, a module path in one is not the same module in the other: only the totals
    are compared, no module rows or module causes, unless ``force``. See docs/diff.md.
    """
    if not isinstance(force, bool):
        raise TypeError(f"force: expected True or False, got {type(force).__name__}")
    ra, la = _as_result(a, "a")
    rb, lb = _as_result(b, "b")
    sa, sb = _side(ra, la), _side(rb, lb)
    total = _row("", ra, rb, sa, sb, model=True)
    compared = force or same_model(ra.metadata, rb.metadata)
    modules = {p: _row(p, ra, rb, sa, sb) for p in _merged_paths(ra, rb) if p} if compared else {}
    v = verdict(ra, rb)
    if v is not None and not compared:
        v = _without_modules(v)
    return ProfileDiff(sa, sb, total, modules, _caveats(ra, rb, sa, sb, force), v, modules_compared=compared)


def _without_modules(v: Verdict) -> Verdict:
    """The verdict with no module named: the step's parts only (its ``modules`` cause, which
    passes without an anatomy would have, is dropped)."""
    causes = tuple(dataclasses.replace(c, modules=()) for c in v.causes if c.part != "modules")
    minor = tuple(dataclasses.replace(c, modules=()) for c in v.minor)
    largest = None if v.largest_cause == "modules" else v.largest_cause
    return dataclasses.replace(v, causes=causes, minor=minor, largest_cause=largest)


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
    meta = result.metadata
    steps = result.samples
    if steps is None or steps.count < 2:
        samples = {"fwd_latency": forward, "bwd_latency": backward, "latency": _iteration_samples(forward, backward)}
        return Side(label, meta.model, meta.device, meta.dtype, len(forward), len(backward),
                    result.memory is not None, samples, run=run_fields(meta), model_class=meta.model_class)
    # several steps (or passes): one sample per step, per call of the step
    nf, nb = max(len(forward), 1), max(len(backward), 1)
    samples = _per_call(steps.figures.get("forward") or steps.figures["wall"], steps.figures.get("backward", ()),
                        nf, nb)
    modules = {path: _per_call(phases.get("forward", ()),
                               [b + r for b, r in itertools.zip_longest(phases.get("backward", ()),
                                                                        phases.get("recompute", ()), fillvalue=0.0)],
                               nf, nb)
               for path, phases in steps.modules.items()}
    return Side(label, meta.model, meta.device, meta.dtype, len(forward), len(backward),
                result.memory is not None, samples, modules, run=run_fields(meta), model_class=meta.model_class)


def _per_call(fwd_steps: Iterable[float], bwd_steps: Iterable[float], forward_calls: int,
              backward_passes: int) -> dict[str, list[float]]:
    """Per time metric, one sample per step: its forward time over its forward calls, its
    backward time over its backward passes, and their sum (the forward alone without one)."""
    fwd = [v / forward_calls for v in fwd_steps]
    bwd = [v / backward_passes for v in bwd_steps]
    return {"fwd_latency": fwd, "bwd_latency": bwd, "latency": [f + b for f, b in zip(fwd, bwd)] if bwd else fwd}


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
    node = na if na is not None else nb
    if node is None:  # (the paths compared are those of either profile)
        raise ValueError(f"path: {path!r} is a module of neither profile")
    fa = _figures(na, a, sa, model) if na is not None else _absent(a)
    fb = _figures(nb, b, sb, model) if nb is not None else _absent(b)
    metrics = {m: Change(fa[m], fb[m]) for m in METRICS}
    type_a, type_b = (na.type_name if na else None), (nb.type_name if nb else None)
    if na is None or nb is None:
        status = "added" if na is None else "removed"
    elif type_a != type_b or any(c.changed for m, c in metrics.items() if metric_kind(m) != "time"):
        status = "changed"
    else:
        status = "unchanged"
    return ModuleDiff(path, status, type_a, type_b, node.depth, metrics)


#: the caveats that are differences between the two runs (warnings); the others are notes
WARNING_KINDS = ("differs", "modules", "calls", "memory")


class Caveat(NamedTuple):
    """Something a reader must know before trusting a diff's figures (its words are the
    renderer's: ``ProfileDiff.notes``). ``kind``: ``"differs"``, the runs differ in a field
    of the header (``figures``: the field, a's value, b's); ``"modules"``, the model classes
    differ (a's, b's, and whether ``force`` compared their modules anyway); ``"calls"``, the
    profiles timed different numbers of forward calls or backward passes (a's calls and
    passes, b's); ``"memory"``, memory was tracked in one only (``"a"`` or ``"b"``);
    ``"unrecorded"``, one side records header fields the other does not (the side, then the
    fields); ``"ranks"``, a result holds other ranks' results, which are not compared. The
    kinds of :data:`WARNING_KINDS` are warnings, the others notes."""

    kind: str
    figures: tuple = ()

    @property
    def warns(self) -> bool:
        """Whether this is a difference between the runs (a warning), not only a note."""
        return self.kind in WARNING_KINDS


def _caveats(a: ProfileResult, b: ProfileResult, sa: Side, sb: Side, force: bool) -> tuple[Caveat, ...]:
    """What a reader must know before trusting the figures: first every difference of the runs."""
    caveats = []
    ma, mb = a.metadata, b.metadata
    for name in differences(ma, mb):
        if name == "model":
            caveats.append(Caveat("modules", (*model_names(ma, mb), force)))
        else:
            caveats.append(Caveat("differs", (name, sa.run[name], sb.run[name])))
    for side, this, other in (("a", ma, mb), ("b", mb, ma)):
        # a field only the other side records: that difference could not be checked
        missing = [f for f in unrecorded(this) if f not in unrecorded(other)]
        if missing:
            caveats.append(Caveat("unrecorded", (side, *missing)))
    if (sa.forward_calls, sa.backward_passes) != (sb.forward_calls, sb.backward_passes):
        caveats.append(Caveat("calls", (sa.forward_calls, sa.backward_passes, sb.forward_calls, sb.backward_passes)))
    if sa.memory_tracked != sb.memory_tracked:
        caveats.append(Caveat("memory", ("a" if sa.memory_tracked else "b",)))
    if a.ranks or b.ranks:
        caveats.append(Caveat("ranks"))
    return tuple(caveats)


# -- the diff -------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProfileDiff:
    """Two profiles compared: ``total`` (the model), ``modules`` (path -> :class:`ModuleDiff`
    in tree order, the root left out; empty when ``modules_compared`` is False: the model
    classes differ), the two :class:`Side` s and the :class:`Caveat` s."""

    a: Side
    b: Side
    total: ModuleDiff
    modules: dict[str, ModuleDiff]
    caveats: tuple[Caveat, ...] = ()
    #: why b's step (or pass) time differs from a's (None without samples on both sides)
    verdict: Verdict | None = None
    #: False when the model classes differ and ``force`` was not given: no module is compared
    modules_compared: bool = True

    def __repr__(self) -> str:
        # one line, as ProfileResult's: the full tables are render_diff's
        changed = sum(m.changed for m in self.modules.values())
        flops = self.total.metrics["flops"].relative
        modules = f"{changed} of {len(self.modules)} modules changed" if self.modules_compared \
            else "modules not compared"
        warned = len(self.warnings)
        return (f"<ProfileDiff {self.a.model} -> {self.b.model}: FLOPs "
                f"{'n/a' if flops is None else f'{flops:+.2%}'}, {modules}, "
                f"{warned} warning{'' if warned == 1 else 's'}>")

    @property
    def notes(self) -> list[str]:
        """The caveats as a reader is told them (the renderers word them), warnings first."""
        return [renderers().render(c) for c in self.caveats]

    @property
    def warnings(self) -> list[str]:
        """The caveats that are differences between the two runs (inputs, dtype, model...), in words."""
        return [renderers().render(c) for c in self.caveats if c.warns]

    @property
    def forced(self) -> bool:
        """Whether ``force`` compared the modules of two different model classes."""
        return any(c.kind == "modules" for c in self.caveats) and self.modules_compared

    def header(self) -> list[tuple[str, str, str]]:
        """Both sides' run, field by field: ``(field, a's value, b's value)`` in the order of
        :data:`~.header.RUN_FIELDS` (``""`` where a file does not record it)."""
        rows = []
        for name in RUN_FIELDS:
            va, vb = self.a.run.get(name, ""), self.b.run.get(name, "")
            if name == "model" and va == vb and self.a.model_class and self.b.model_class \
                    and self.a.model_class != self.b.model_class:
                va, vb = self.a.model_class, self.b.model_class  # two classes of one name
            rows.append((name, va, vb))
        return rows

    @property
    def differing(self) -> list[str]:
        """The header fields in which the two runs differ."""
        return [c.figures[0] for c in self.caveats if c.kind == "differs"] + \
            (["model"] if any(c.kind == "modules" for c in self.caveats) else [])

    def sameness(self, alpha: float = DEFAULT_ALPHA) -> Sameness:
        """Whether the profiles differ: in counts and memory (exact), and in times (beyond the
        noise at ``alpha``); see :mod:`.sameness`."""
        return sameness(self, check_alpha(alpha))

    def module(self, path: str) -> ModuleDiff:
        """The row of module ``path`` (``""``: the model totals)."""
        if path == "":
            return self.total
        if not self.modules_compared:
            raise ValueError(f"path: {self._refused()}")
        if path not in self.modules:
            raise KeyError(f"path: {self._no_module(path)}")
        return self.modules[path]

    def _refused(self) -> str:
        ca = next(c for c in self.caveats if c.kind == "modules")
        return (f"modules are not compared: the model classes differ ({ca.figures[0]} vs {ca.figures[1]}); "
                "pass force=True (flopsight diff --force) to compare them module by module anyway")

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
        alpha = check_alpha(alpha)
        parsed = parse_gates(gates)
        for gate in parsed:
            if gate.path is not None and not self.modules_compared:
                raise ValueError(f"gate {gate.text!r}: {self._refused()}")
            if gate.path is not None and gate.path not in self.modules:
                raise ValueError(f"gate {gate.text!r}: {self._no_module(gate.path)}")
        return [self._evaluate(gate, alpha) for gate in parsed]

    def check(self, gates: str | Iterable[str | Gate], alpha: float = DEFAULT_ALPHA) -> list[GateResult]:
        """The gates that fail (an empty list when all pass), each with a readable message."""
        return [r for r in self.evaluate(gates, alpha) if not r.passed]

    def _evaluate(self, gate: Gate, alpha: float) -> GateResult:
        change = self.module(gate.path or "").metrics[gate.metric]
        # a module has samples where several steps were profiled on both sides (one per step);
        # else one total per profile, compared as it is
        if gate.path is None:
            calls = (self.a.samples.get(gate.metric, []), self.b.samples.get(gate.metric, []))
        else:
            calls = (self.a.module_samples.get(gate.path, {}).get(gate.metric, []),
                     self.b.module_samples.get(gate.path, {}).get(gate.metric, []))
        return evaluate_gate(gate, change.a, change.b, alpha, calls)

    # -- output ----------------------------------------------------------------------------
    def rows(self, all_modules: bool = False) -> list[ModuleDiff]:
        """The module rows a report lists: the changed ones, or every one in tree order."""
        return list(self.modules.values()) if all_modules else self.changed

    def noise(self) -> dict[str, dict[str, Any]]:
        """Per time metric of the model: samples on each side, their medians, and the two-sided
        p-value of any shift (None when so few calls could never show one)."""
        out = {}
        for metric in TIME_METRICS:
            xs, ys = self.a.samples[metric], self.b.samples[metric]
            tested = testable(len(xs), len(ys), DEFAULT_ALPHA)
            out[metric] = {
                "samples": [len(xs), len(ys)],
                "median": [statistics.median(xs) if xs else None, statistics.median(ys) if ys else None],
                "p_value": two_sided_p(xs, ys) if tested else None,
            }
        return out

    def to_dict(self, all_modules: bool = False, gates: Sequence[GateResult] = ()) -> dict[str, Any]:
        """The diff as a JSON-ready dict of data (the ``json`` format adds the words: the
        notes, the verdict's text and each gate's message; docs/diff.md)."""
        same, differing = self.sameness(), self.differing
        return {
            "flopsight_diff": DIFF_SCHEMA_VERSION,
            "a": _side_dict(self.a),
            "b": _side_dict(self.b),
            "header": [{"field": name, "a": va, "b": vb, "differs": name in differing}
                       for name, va, vb in self.header()],
            "caveats": [{"kind": c.kind, "figures": list(c.figures), "warning": c.warns} for c in self.caveats],
            "module_level": {"compared": self.modules_compared, "forced": self.forced},
            "sameness": {"counts": same.counts, "times": same.times, "no_difference": same.none},
            "units": {m: {"count": "count", "time": "seconds per call", "bytes": "bytes"}[k]
                      for m, (_, k) in METRICS.items()},
            "total": {**_row_dict(self.total), "noise": self.noise()},
            "modules": [_row_dict(r) for r in self.rows(all_modules)],
            "summary": {"modules": len(self.modules), "changed": len(self.changed), "added": len(self.added),
                        "removed": len(self.removed)},
            "gates": [g.to_dict() for g in gates],
            "verdict": self.verdict.to_dict() if self.verdict is not None else None,
        }

    def render(self, fmt: str = "text", *, all_modules: bool = False, gates: Sequence[GateResult] = ()) -> str:
        """The diff as ``"text"``, ``"md"`` (Markdown tables for a pull request) or ``"json"``;
        changed modules only unless ``all_modules``; ``gates``: results of :meth:`evaluate` to
        report beside it (written by :func:`flopsight.renderers.diff_renderer.render_diff`)."""
        # a thin call: analysis never imports the layer above it
        return renderers().render(self, fmt, all_modules=all_modules, gates=gates)


def _side_dict(side: Side) -> dict[str, Any]:
    return {"label": side.label, "model": side.model, "model_class": side.model_class, "device": side.device,
            "dtype": side.dtype, "forward_calls": side.forward_calls, "backward_passes": side.backward_passes,
            "memory_tracked": side.memory_tracked}


def _row_dict(row: ModuleDiff) -> dict[str, Any]:
    def finite(x: float | None) -> float | None:
        return x if x is None or math.isfinite(x) else None

    return {"path": row.path, "status": row.status, "type_a": row.type_a, "type_b": row.type_b,
            "metrics": {m: {"a": c.a, "b": c.b, "delta": c.delta, "relative": finite(c.relative)}
                        for m, c in row.metrics.items()}}
