"""Why is B slower than A: a step-time (or pass-time) difference explained by the step's
anatomy, the collectives and the modules, ranked by contribution, and only where the
samples make it significant (docs/diff.md).

Each side is a profile of several steps (``steps=N``) or passes (``repeat=N``) whose
``result.samples`` hold each step's wall time and anatomy. The figures compared are each
side's *median step*'s (:func:`~flopsight.result.iteration.at_median`: the step of median
wall time, the mean of the two middle ones for an even count), what ``result.iteration``
reports, so the verdict's figures are the report's, and the parts' changes add up to the
step's change.
The step's change is significant when both hold: it is larger than the combined spread,
``sqrt(a.plus_minus² + b.plus_minus²)`` (:mod:`flopsight.result.samples`), and, where the
counts of samples allow, the two-sided Mann-Whitney test puts it below ``alpha``. A part of
the anatomy whose change is larger than its own combined spread is a cause; the others
stayed within their noise. The communication part is told by collective kind (the median
step's calls, bytes and exposed time) and the compute parts by the modules that moved most.

>>> from flopsight.result.samples import StepSamples
>>> a = StepSamples("step", {"wall": (1.0, 1.1, 0.9, 1.0, 1.05)})
>>> b = StepSamples("step", {"wall": (2.0, 2.1, 1.9, 2.0, 2.05)})
>>> d = step_difference(a, b)
>>> round(d.delta, 6), d.significant
(1.0, True)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...result.iteration import at_median
from ...result.profile_result import ProfileResult
from ...result.samples import StepSamples, spread
from .stats import DEFAULT_ALPHA, testable, two_sided_p

__all__ = ["Difference", "Cause", "CollectiveChange", "ModuleChange", "Verdict", "verdict", "step_difference",
           "UNSPLIT"]

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
#: a step's wall time and its anatomy's sum agree to this share of it when nothing is unsplit
#: (the anatomy's sums are exact up to the floats' last bits)
_SPLIT_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Difference:
    """A figure's change from a to b: ``a`` and ``b`` (each side's median step's value),
    ``delta`` (b - a), ``noise`` (the combined spread over all the steps), ``p_value`` (None
    where too few samples to test, and for the anatomy's parts) and whether it is
    ``significant``."""

    a: float
    b: float
    noise: float
    p_value: float | None
    significant: bool

    @property
    def delta(self) -> float:
        return self.b - self.a

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "delta": self.delta, "noise": self.noise, "p_value": self.p_value,
                "significant": self.significant}


def _difference(xs: Sequence[float], ys: Sequence[float], wa: Sequence[float], wb: Sequence[float], alpha: float,
                test: bool = True) -> Difference:
    """The change from ``xs`` to ``ys`` in the median steps (by the walls ``wa`` and ``wb``):
    significant when beyond the combined spread of all of ``xs`` and ``ys`` and, with
    ``test``, where the counts allow, below ``alpha`` in the two-sided Mann-Whitney test."""
    sa, sb = spread(xs), spread(ys)
    noise = math.hypot(sa.plus_minus, sb.plus_minus)
    p = two_sided_p(xs, ys) if test and testable(len(xs), len(ys), alpha) else None
    a, b = at_median(xs, wa), at_median(ys, wb)
    beyond = abs(b - a) > noise and len(xs) > 1 and len(ys) > 1
    return Difference(a, b, noise, p, beyond and (p is None or p < alpha))


def step_difference(a: StepSamples, b: StepSamples, figure: str = "wall",
                    alpha: float = DEFAULT_ALPHA) -> Difference:
    """The change of ``figure`` (default: the step's wall time) from a's median step to b's."""
    return _difference(tuple(a.figures[figure]), tuple(b.figures[figure]), a.figures["wall"], b.figures["wall"],
                       alpha)


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
    """A module whose own latency (all phases, median over the steps) moved."""

    path: str
    type_name: str
    delta: float


@dataclass(frozen=True)
class Cause:
    """A part of the step (``"compute"``, ``"framework"``, ``"communication"``, ``"other"``,
    ``"profiler"``, :data:`UNSPLIT`; ``"modules"`` for passes) and how it moved;
    ``collectives`` (communication) and ``modules`` (compute) tell it."""

    part: str
    difference: Difference
    collectives: tuple[CollectiveChange, ...] = ()
    modules: tuple[ModuleChange, ...] = ()


@dataclass(frozen=True)
class Verdict:
    """Why b's step differs from a's: the ``step`` difference; ``parts``, every part of the
    anatomy with its difference (their deltas add up to the step's); ``causes``, the parts
    that moved beyond their own noise, largest first; ``unchanged``, the parts within it; ``unit`` is ``"step"`` or
    ``"pass"``; ``samples`` the count per side."""

    unit: str
    samples: tuple[int, int]
    step: Difference
    causes: tuple[Cause, ...] = ()
    unchanged: tuple[str, ...] = ()
    #: the cause whose change is largest in the step's direction (None when the step did not
    #: change significantly, or no part moved beyond its own noise that way)
    largest_cause: str | None = None
    parts: Mapping[str, Difference] | None = None

    @property
    def wide_noise(self) -> bool:
        """The combined spread is as wide as the faster side's step (``2 × noise`` at least
        its median step): these steps cannot tell apart a change smaller than a step."""
        faster = min(self.step.a, self.step.b)
        return faster > 0 and 2 * self.step.noise >= faster

    def to_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "samples": list(self.samples), "step": self.step.to_dict(),
                "parts": {p: d.to_dict() for p, d in (self.parts or {}).items()},
                "causes": [{"part": c.part, **c.difference.to_dict(),
                            "collectives": [{"kind": k.kind, "calls": list(k.calls),
                                             "bytes_per_call": list(k.bytes_per_call), "exposed": list(k.exposed)}
                                            for k in c.collectives],
                            "modules": [{"path": m.path, "type": m.type_name, "delta": m.delta} for m in c.modules]}
                           for c in self.causes],
                "unchanged": list(self.unchanged), "largest_cause": self.largest_cause,
                "wide_noise": self.wide_noise}


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
    """Whether the median step's anatomy splits all of its wall time (what it leaves,
    ``rest``, only the floats' last bits)."""
    return abs(at_median(rest, walls)) <= _SPLIT_TOLERANCE * abs(at_median(walls, walls))


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


def _modules(a: ProfileResult, b: ProfileResult, top: int = 3) -> tuple[ModuleChange, ...]:
    """The ``top`` modules whose own forward and backward time moved most (median steps' medians)."""
    def own(r: ProfileResult) -> dict[str, tuple[str, float]]:
        return {p: (s.type_name, sum(x.latency for ph, x in s.phases.items() if ph != "step"))
                for p, s in r.modules.items()}

    oa, ob = own(a), own(b)
    changes = [ModuleChange(p or "<root>", (ob.get(p) or oa[p])[0], ob.get(p, ("", 0.0))[1] - oa.get(p, ("", 0.0))[1])
               for p in sorted(set(oa) | set(ob))]
    return tuple(sorted(changes, key=lambda m: -abs(m.delta))[:top])


def verdict(a: ProfileResult, b: ProfileResult, alpha: float = DEFAULT_ALPHA) -> Verdict | None:
    """Why ``b``'s step (or pass) time differs from ``a``'s; None unless both sides hold
    several samples (one sample's noise is unknown; older files hold none)."""
    sa, sb = a.samples, b.samples
    if sa is None or sb is None or len(sa.figures.get("wall", ())) < 2 or len(sb.figures.get("wall", ())) < 2:
        return None
    wa, wb = sa.figures["wall"], sb.figures["wall"]
    step = _difference(wa, wb, wa, wb, alpha)
    pa, pb = _part_samples(sa), _part_samples(sb)
    parts: dict[str, Difference] = {}
    for part in [p for p in pa if p in pb]:
        xs, ys = pa[part], pb[part]
        if part == "profiler" and not any(xs) and not any(ys):
            continue  # no profiler time on either side (a fake clock's, an older file's): nothing to say
        if part == UNSPLIT and _split(xs, wa) and _split(ys, wb):
            continue  # the median steps' anatomies add up to them: the other parts add up to the step's change
        # a part moved when its change is beyond its own spread: the step's test already said
        # whether anything changed
        parts[part] = _difference(xs, ys, wa, wb, alpha, test=False)
    causes, unchanged = [], []
    for part, d in parts.items():
        if not d.significant:
            unchanged.append(part)
            continue
        causes.append(Cause(part, d, _collectives(a, b) if part == "communication" else (),
                            _modules(a, b) if part == "compute" else ()))
    if not parts and step.significant:  # passes: no anatomy, the modules tell it
        causes.append(Cause("modules", step, modules=_modules(a, b)))
    causes.sort(key=lambda c: -abs(c.difference.delta))
    # the largest cause: a part beyond its own noise that moved the step's way (never an unchanged one)
    toward = [c for c in causes if c.difference.delta * step.delta > 0] if step.significant else []
    largest = max(toward, key=lambda c: abs(c.difference.delta)).part if toward else None
    return Verdict(sa.unit, (sa.count, sb.count), step, tuple(causes), tuple(unchanged), largest, parts or None)
