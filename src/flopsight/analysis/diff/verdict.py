"""Why is B slower than A: a step-time (or pass-time) difference explained by the step's
anatomy, the collectives and the modules, ranked by contribution, and only where the
samples make it significant (docs/diff.md).

Each side is a profile of several steps (``steps=N``) or passes (``repeat=N``) whose
``result.samples`` hold each step's wall time and anatomy. A difference is significant when
both hold: it is larger than the combined spread, ``sqrt(a.plus_minus² + b.plus_minus²)``
(:mod:`flopsight.result.samples`), and, where the counts of samples allow, the two-sided
Mann-Whitney test puts it below ``alpha``. A part of the anatomy that moved beyond its own
noise is a cause; the communication part is told by collective kind (the median step's
calls, bytes and exposed time) and the compute parts by the modules that moved most.

>>> from flopsight.result.samples import StepSamples
>>> a = StepSamples("step", {"wall": (1.0, 1.1, 0.9, 1.0, 1.05)})
>>> b = StepSamples("step", {"wall": (2.0, 2.1, 1.9, 2.0, 2.05)})
>>> d = step_difference(a, b)
>>> round(d.delta, 6), d.significant
(1.0, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...result.profile_result import ProfileResult
from ...result.samples import StepSamples, spread
from .stats import DEFAULT_ALPHA, testable, two_sided_p

__all__ = ["Difference", "Cause", "CollectiveChange", "ModuleChange", "Verdict", "verdict", "step_difference"]

#: the anatomy's parts as the verdict groups them: compute (the three phases' ops) is one
_PARTS = {"compute": ("anatomy.forward", "anatomy.backward", "anatomy.step"),
          "framework": ("anatomy.framework",),
          "communication": ("anatomy.communication",),
          "other": ("anatomy.other",),
          # the profiler's own time left in the phases (never a part of the user's; absent in older files)
          "profiler": ("anatomy.profiler",)}


@dataclass(frozen=True)
class Difference:
    """A figure's change from a to b: the medians ``a`` and ``b``, ``delta`` (b - a),
    ``noise`` (the combined spread), ``p_value`` (None where too few samples to test) and
    whether it is ``significant``."""

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


def _difference(xs: tuple[float, ...], ys: tuple[float, ...], alpha: float, test: bool = True) -> Difference:
    """The change from ``xs`` to ``ys``: significant when beyond the combined spread and, with
    ``test``, where the counts allow, below ``alpha`` in the Mann-Whitney test."""
    sa, sb = spread(xs), spread(ys)
    noise = math.hypot(sa.plus_minus, sb.plus_minus)
    p = two_sided_p(xs, ys) if testable(len(xs), len(ys), alpha) else None
    beyond = abs(sb.median - sa.median) > noise and len(xs) > 1 and len(ys) > 1
    return Difference(sa.median, sb.median, noise, p, beyond and (not test or p is None or p < alpha))


def step_difference(a: StepSamples, b: StepSamples, figure: str = "wall",
                    alpha: float = DEFAULT_ALPHA) -> Difference:
    """The change of ``figure`` (default: the step's wall time) from a's samples to b's."""
    return _difference(tuple(a.figures[figure]), tuple(b.figures[figure]), alpha)


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
    """A part of the step (``"compute"``, ``"framework"``, ``"communication"``, ``"other"``, ``"profiler"``)
    and how it moved; ``collectives`` (communication) and ``modules`` (compute) tell it."""

    part: str
    difference: Difference
    collectives: tuple[CollectiveChange, ...] = ()
    modules: tuple[ModuleChange, ...] = ()


@dataclass(frozen=True)
class Verdict:
    """Why b's step differs from a's: the ``step`` difference and its ``causes``, the
    significant parts, largest first; ``unchanged`` names the parts that did not move
    beyond their noise; ``unit`` is ``"step"`` or ``"pass"``; ``samples`` the count per side."""

    unit: str
    samples: tuple[int, int]
    step: Difference
    causes: tuple[Cause, ...] = ()
    unchanged: tuple[str, ...] = ()
    #: the part whose median moved most in the step's direction (None when the step did not
    #: change significantly)
    largest_cause: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "samples": list(self.samples), "step": self.step.to_dict(),
                "causes": [{"part": c.part, **c.difference.to_dict(),
                            "collectives": [{"kind": k.kind, "calls": list(k.calls),
                                             "bytes_per_call": list(k.bytes_per_call), "exposed": list(k.exposed)}
                                            for k in c.collectives],
                            "modules": [{"path": m.path, "type": m.type_name, "delta": m.delta} for m in c.modules]}
                           for c in self.causes],
                "unchanged": list(self.unchanged), "largest_cause": self.largest_cause}


def _part_samples(samples: StepSamples, keys: tuple[str, ...]) -> tuple[float, ...] | None:
    if not all(k in samples.figures for k in keys):
        return None
    return tuple(sum(vals) for vals in zip(*(samples.figures[k] for k in keys)))


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
    step = step_difference(sa, sb, "wall", alpha)
    causes, unchanged, moved = [], [], {}
    for part, keys in _PARTS.items():
        xs, ys = _part_samples(sa, keys), _part_samples(sb, keys)
        if xs is None or ys is None or (part == "profiler" and not any(xs) and not any(ys)):
            continue  # not measured, or no profiler time on either side: nothing to say
        # the step's test already said whether anything changed: a part is a cause when it
        # moved beyond its own spread
        d = _difference(xs, ys, alpha, test=False)
        moved[part] = d.delta
        if not d.significant:
            unchanged.append(part)
            continue
        causes.append(Cause(part, d, _collectives(a, b) if part == "communication" else (),
                            _modules(a, b) if part == "compute" else ()))
    if not moved and step.significant:  # passes: no anatomy, the modules tell it
        causes.append(Cause("modules", step, modules=_modules(a, b)))
        moved["modules"] = step.delta
    causes.sort(key=lambda c: -abs(c.difference.delta))
    largest = max(moved, key=lambda p: moved[p] * math.copysign(1, step.delta)) if moved and step.significant \
        else None
    return Verdict(sa.unit, (sa.count, sb.count), step, tuple(causes), tuple(unchanged), largest)
