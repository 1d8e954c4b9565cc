"""Why is B slower than A: a step-time (or pass-time) difference explained by the step's
anatomy, the collectives and the modules, ranked by contribution, and only where the
samples make it significant (docs/diff.md).

Each side is a profile of several steps (``steps=N``) or passes (``repeat=N``) whose
``result.samples`` hold each step's wall time and anatomy. Every change, the step's and
each part's, is one statistic: the Hodges-Lehmann shift from a's steps to b's (the median
of every difference between a step of b and a step of a) with its distribution-free 95%
interval (:func:`.stats.shift`); a change is significant when its interval leaves out zero,
which for the step is the two-sided Mann-Whitney test at ``alpha``. A part whose interval
holds zero is unchanged, whatever its medians say; one beyond it is a cause, unless the step
changed significantly and the part by less than :data:`MATERIAL` of it: then it is minor,
told with its change but not as a cause (ZeRO-3's own copies, a few hundred microseconds of
ops in a step ten milliseconds slower, do not explain it). The
communication part is told by collective kind (the median step's calls, bytes and exposed
time); the compute part by the modules whose own ops' time moved most, each by the same
statistic, and by what they leave of the part's change (``rest``), so that what is listed
adds up to the part's change. The parts' changes are each their own estimate: they need not
add up to the step's.

>>> from flopsight.result.samples import StepSamples
>>> a = StepSamples("step", {"wall": (1.0, 1.1, 0.9, 1.0, 1.05)})
>>> b = StepSamples("step", {"wall": (2.0, 2.1, 1.9, 2.0, 2.05)})
>>> d = step_difference(a, b)
>>> round(d.delta, 6), round(d.low, 6), round(d.high, 6), d.significant
(1.0, 0.9, 1.1, True)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...result.profile_result import ProfileResult
from ...result.samples import StepSamples
from .stats import DEFAULT_ALPHA, shift, testable, two_sided_p

__all__ = ["Difference", "Cause", "CollectiveChange", "ModuleChange", "Verdict", "verdict", "step_difference",
           "UNSPLIT", "MATERIAL"]

#: the anatomy's parts as the verdict groups them: compute (the three phases' ops) is one
_PARTS = {"compute": ("anatomy.forward", "anatomy.backward", "anatomy.step"),
          "framework": ("anatomy.framework",),
          "communication": ("anatomy.communication",),
          "other": ("anatomy.other",),
          # the profiler's own time left in the phases (never a part of the user's; absent in older files)
          "profiler": ("anatomy.profiler",)}
#: the part that holds what a step's anatomy does not split of its wall time: none in a
#: ``Profiler``'s steps (their anatomy adds up to the step); DeepSpeed's engine profiler
#: reports latencies of a step timed apart from the counted one whose anatomy it is
UNSPLIT = "unsplit"
#: a part that moved beyond its own noise explains a significant change of the step only if
#: it moved by this share of the step's change at least; one that moved less is minor
MATERIAL = 0.1
#: a step's wall time and its anatomy's sum agree to this share of it when nothing is unsplit
#: (the anatomy's sums are exact up to the floats' last bits)
_SPLIT_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Difference:
    """A figure's change from a to b: ``a`` and ``b``, each side's median over its steps;
    ``delta``, the Hodges-Lehmann shift from a's steps to b's, and ``low`` to ``high``, its 95%
    interval (unbounded with too few steps); ``p_value``, the two-sided Mann-Whitney test's
    (the step's; None for the anatomy's parts); ``significant``: the interval leaves out 0."""

    a: float
    b: float
    delta: float
    low: float
    high: float
    p_value: float | None = None

    @property
    def significant(self) -> bool:
        return self.low > 0 or self.high < 0

    @property
    def noise(self) -> float:
        """Half the interval's width (infinite when it is unbounded)."""
        return (self.high - self.low) / 2

    def to_dict(self) -> dict[str, Any]:
        finite = math.isfinite(self.low) and math.isfinite(self.high)  # JSON has no infinity
        return {"a": self.a, "b": self.b, "delta": self.delta, "low": self.low if finite else None,
                "high": self.high if finite else None, "noise": self.noise if finite else None,
                "p_value": self.p_value, "significant": self.significant}


def _difference(xs: Sequence[float], ys: Sequence[float], alpha: float, test: bool = False) -> Difference:
    """The change from ``xs`` to ``ys`` (:func:`.stats.shift`); ``test``: with the
    Mann-Whitney test's p-value too, where the counts allow."""
    delta, low, high = shift(xs, ys, alpha)
    p = two_sided_p(xs, ys) if test and testable(len(xs), len(ys), alpha) else None
    return Difference(statistics.median(xs), statistics.median(ys), delta, low, high, p)


def step_difference(a: StepSamples, b: StepSamples, figure: str = "wall",
                    alpha: float = DEFAULT_ALPHA) -> Difference:
    """The change of ``figure`` (default: the step's wall time) from a's steps to b's."""
    return _difference(tuple(a.figures[figure]), tuple(b.figures[figure]), alpha, test=True)


@dataclass(frozen=True)
class CollectiveChange:
    """One collective kind in each side's median step: calls, bytes per call and exposed seconds."""

    kind: str
    calls: tuple[int, int]
    bytes_per_call: tuple[int, int]
    exposed: tuple[float, float]

    @property
    def delta(self) -> float:
        return self.exposed[1] - self.exposed[0]


@dataclass(frozen=True)
class ModuleChange:
    """A module whose own ops' time (every phase's) moved: its shift (:class:`Difference`'s)."""

    path: str
    type_name: str
    delta: float


@dataclass(frozen=True)
class Cause:
    """A part of the step (``"compute"``, ``"framework"``, ``"communication"``, ``"other"``,
    ``"profiler"``, :data:`UNSPLIT`; ``"modules"`` for passes) and how it moved;
    ``collectives`` (communication) and ``modules`` (compute) tell it; ``rest``: what the
    modules listed leave of its change (the other modules' and the optimizer's), so that
    they and it add up to it (None when no module is listed)."""

    part: str
    difference: Difference
    collectives: tuple[CollectiveChange, ...] = ()
    modules: tuple[ModuleChange, ...] = ()
    rest: float | None = None


@dataclass(frozen=True)
class Verdict:
    """Why b's step differs from a's: the ``step`` difference; ``parts``, every part of the
    anatomy with its difference; ``causes``, the parts whose interval leaves out zero,
    largest first (where the step changed significantly, those that moved by
    :data:`MATERIAL` of its change at least); ``minor``, those beyond their own noise that
    moved less; ``unchanged``, the others; ``unit`` is ``"step"`` or ``"pass"``;
    ``samples`` the count per side."""

    unit: str
    samples: tuple[int, int]
    step: Difference
    causes: tuple[Cause, ...] = ()
    unchanged: tuple[str, ...] = ()
    #: the cause whose change is largest in the step's direction (None when the step did not
    #: change significantly, or no part moved beyond its own noise that way)
    largest_cause: str | None = None
    parts: Mapping[str, Difference] | None = None
    minor: tuple[Cause, ...] = ()

    @property
    def wide_noise(self) -> bool:
        """The combined spread is as wide as the faster side's step (``2 × noise`` at least
        its median step): these steps cannot tell apart a change smaller than a step."""
        faster = min(self.step.a, self.step.b)
        return faster > 0 and self.step.high - self.step.low >= faster

    def to_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "samples": list(self.samples), "step": self.step.to_dict(),
                "parts": {p: d.to_dict() for p, d in (self.parts or {}).items()},
                "causes": [_cause_dict(c) for c in self.causes], "minor": [_cause_dict(c) for c in self.minor],
                "unchanged": list(self.unchanged), "largest_cause": self.largest_cause,
                "wide_noise": self.wide_noise}


def _cause_dict(c: Cause) -> dict[str, Any]:
    return {"part": c.part, **c.difference.to_dict(),
            "collectives": [{"kind": k.kind, "calls": list(k.calls), "bytes_per_call": list(k.bytes_per_call),
                             "exposed": list(k.exposed)} for k in c.collectives],
            "modules": [{"path": m.path, "type": m.type_name, "delta": m.delta} for m in c.modules],
            "rest": c.rest}


def _part_samples(samples: StepSamples) -> dict[str, tuple[float, ...]]:
    """Each part's seconds per step (none without an anatomy); a file from before the
    profiler part has none of it (0 in every step); :data:`UNSPLIT`, what each step's
    anatomy leaves of its wall time."""
    figures, n = samples.figures, samples.count
    if not all(k in figures for keys in _PARTS.values() for k in keys if k != "anatomy.profiler"):
        return {}
    parts = {part: tuple(math.fsum(vals) for vals in zip(*(figures.get(k, (0.0,) * n) for k in keys)))
             for part, keys in _PARTS.items()}
    parts[UNSPLIT] = tuple(w - math.fsum(vals) for w, vals in zip(figures["wall"], zip(*parts.values())))
    return parts


def _split(rest: Sequence[float], walls: Sequence[float]) -> bool:
    """Whether every step's anatomy splits all of its wall time (what it leaves, ``rest``,
    only the floats' last bits)."""
    return all(abs(r) <= _SPLIT_TOLERANCE * abs(w) for r, w in zip(rest, walls))


def _collectives(a: ProfileResult, b: ProfileResult) -> tuple[CollectiveChange, ...]:
    def by_kind(r: ProfileResult) -> dict[str, list]:
        out: dict[str, list] = {}
        for c in r.collectives():
            k = out.setdefault(c.kind, [0, 0, 0.0])
            k[0] += c.count
            k[1] += c.bytes
            k[2] += c.exposed
        return out

    ka, kb = by_kind(a), by_kind(b)
    changes = []
    for kind in sorted(set(ka) | set(kb)):
        (na, ba, ea), (nb, bb, eb) = ka.get(kind, [0, 0, 0.0]), kb.get(kind, [0, 0, 0.0])
        changes.append(CollectiveChange(kind, (na, nb), (ba // na if na else 0, bb // nb if nb else 0), (ea, eb)))
    return tuple(sorted(changes, key=lambda c: -abs(c.delta)))


def _own_latencies(r: ProfileResult) -> dict[str, tuple[float, ...]]:
    """Per module, its own latency in each pass: its phases' latency less its children's,
    where it and they ran in every pass (what the passes' verdict lists)."""
    samples = r.samples
    n = samples.count if samples is not None else 0
    inclusive = {p: [math.fsum(v) for v in zip(*phases.values())]
                 for p, phases in (samples.modules if samples is not None else {}).items()
                 if phases and all(len(v) == n for v in phases.values())}
    own = {}
    for path, values in inclusive.items():
        kids = r.modules[path].children if path in r.modules else ()
        if all(k in inclusive for k in kids):
            own[path] = tuple(v - math.fsum(inclusive[k][i] for k in kids) for i, v in enumerate(values))
    return own


def _modules(a: ProfileResult, b: ProfileResult, change: float, alpha: float, passes: bool = False,
             top: int = 3) -> tuple[tuple[ModuleChange, ...], float | None]:
    """The ``top`` modules whose own time moved most in the way of ``change``, each by its
    shift over the steps (a module of one side only has none on the other), and what they
    leave of ``change`` (None: no module's time was sampled, as in a file from before the
    samples held it). A step's compute: the modules' own ops' time; ``passes`` (no anatomy):
    their own latency."""
    ca: Mapping[str, tuple[float, ...]]
    cb: Mapping[str, tuple[float, ...]]
    if passes:
        ca, cb = _own_latencies(a), _own_latencies(b)
    else:
        ca, cb = a.samples.compute if a.samples else {}, b.samples.compute if b.samples else {}
    if not ca or not cb:
        return (), None
    na, nb = len(next(iter(ca.values()))), len(next(iter(cb.values())))
    moved = [(p, _difference(ca.get(p, (0.0,) * na), cb.get(p, (0.0,) * nb), alpha).delta)
             for p in sorted(set(ca) | set(cb))]
    listed = sorted((m for m in moved if m[1] * change > 0), key=lambda m: -abs(m[1]))[:top]
    types = {p: m.type_name for p, m in (*a.modules.items(), *b.modules.items())}
    modules = tuple(ModuleChange(p or "<root>", types.get(p, ""), d) for p, d in listed)
    return modules, change - math.fsum(d for _, d in listed)


def verdict(a: ProfileResult, b: ProfileResult, alpha: float = DEFAULT_ALPHA) -> Verdict | None:
    """Why ``b``'s step (or pass) time differs from ``a``'s; None unless both sides hold
    several samples (one sample's noise is unknown; older files hold none)."""
    sa, sb = a.samples, b.samples
    if sa is None or sb is None or len(sa.figures.get("wall", ())) < 2 or len(sb.figures.get("wall", ())) < 2:
        return None
    wa, wb = sa.figures["wall"], sb.figures["wall"]
    step = _difference(wa, wb, alpha, test=True)
    pa, pb = _part_samples(sa), _part_samples(sb)
    parts: dict[str, Difference] = {}
    for part in [p for p in pa if p in pb]:
        xs, ys = pa[part], pb[part]
        if part == "profiler" and not any(xs) and not any(ys):
            continue  # no profiler time on either side (a fake clock's, an older file's): nothing to say
        if part == UNSPLIT and _split(xs, wa) and _split(ys, wb):
            continue  # every step's anatomy adds up to it: nothing is left unsplit
        parts[part] = _difference(xs, ys, alpha)
    causes: list[Cause] = []
    minor: list[Cause] = []
    unchanged: list[str] = []
    for part, d in parts.items():
        if not d.significant:
            unchanged.append(part)
            continue
        modules, rest = _modules(a, b, d.delta, alpha) if part == "compute" else ((), None)
        cause = Cause(part, d, _collectives(a, b) if part == "communication" else (), modules, rest)
        small = step.significant and abs(d.delta) < MATERIAL * abs(step.delta)
        (minor if small else causes).append(cause)
    if not parts and step.significant:  # passes: no anatomy, the modules tell it
        modules, rest = _modules(a, b, step.delta, alpha, passes=True)
        causes.append(Cause("modules", step, modules=modules, rest=rest))
    causes.sort(key=lambda c: -abs(c.difference.delta))
    minor.sort(key=lambda c: -abs(c.difference.delta))
    # the largest cause: a part beyond its own noise that moved the step's way (never an unchanged one)
    toward = [c for c in causes if c.difference.delta * step.delta > 0] if step.significant else []
    largest = max(toward, key=lambda c: abs(c.difference.delta)).part if toward else None
    return Verdict(sa.unit, (sa.count, sb.count), step, tuple(causes), tuple(unchanged), largest, parts or None,
                   tuple(minor))
