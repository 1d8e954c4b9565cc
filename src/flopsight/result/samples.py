"""Several steps (or passes) of one profile: each time figure's value in every one of them,
and its median and spread.

A profile of ``steps=N`` training steps (``repeat=N`` passes) keeps, per step, the step's
wall time and its parts (``figures``) and each module's latency per phase (``modules``).
Counts do not vary between steps and are a single step's. How the spread is defined is in
``docs/conventions/timing.md``: the interquartile range from 5 samples on, the range
below, and ``±`` is half its width.

>>> s = spread([10.0, 11.0, 12.0, 30.0])  # 4 samples: min-max
>>> s.median, s.low, s.high, s.kind, s.plus_minus
(11.5, 10.0, 30.0, 'min-max', 10.0)
>>> spread([1.0, 2.0, 3.0, 4.0, 5.0]).kind, spread([1.0, 2.0, 3.0, 4.0, 5.0]).plus_minus
('IQR', 1.0)
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .stats import seconds_from_file

__all__ = ["Spread", "spread", "StepSamples", "NOISE_THRESHOLD", "IQR_FROM"]

#: a figure whose spread (``±``, half its width) exceeds this share of its median is noisy
NOISE_THRESHOLD = 0.10
#: from this many samples on the spread is the interquartile range; below, min to max
IQR_FROM = 5


@dataclass(frozen=True)
class Spread:
    """A time figure over its samples: ``median``, the spread from ``low`` to ``high``
    (``kind`` ``"IQR"`` or ``"min-max"``) and the number of samples ``n``."""

    median: float
    low: float
    high: float
    kind: str
    n: int

    @property
    def plus_minus(self) -> float:
        """Half the spread's width: the figure is ``median ± plus_minus``."""
        return (self.high - self.low) / 2

    @property
    def relative(self) -> float:
        """``plus_minus`` as a share of the median (0 for a zero median)."""
        return self.plus_minus / self.median if self.median > 0 else 0.0

    @property
    def noisy(self) -> bool:
        """One sample (its noise unknown) or a spread above :data:`NOISE_THRESHOLD` of the median."""
        return self.n < 2 or self.relative > NOISE_THRESHOLD


def spread(values: Sequence[float]) -> Spread:
    """The median of ``values`` and their spread: the interquartile range (quartiles by
    the inclusive method) from :data:`IQR_FROM` values on, else min to max.

    >>> spread([3.0])
    Spread(median=3.0, low=3.0, high=3.0, kind='min-max', n=1)
    """
    if not values:
        raise ValueError("values: a spread needs at least one sample")
    xs = sorted(values)
    if len(xs) >= IQR_FROM:
        q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
        return Spread(statistics.median(xs), q1, q3, "IQR", len(xs))
    return Spread(statistics.median(xs), xs[0], xs[-1], "min-max", len(xs))


@dataclass(frozen=True)
class StepSamples:
    """What each profiled step (``unit`` ``"step"``) or pass (``"pass"``) measured, in order.

    ``figures`` maps a figure to its value in each: ``"wall"`` (the step's or pass's wall
    time), the phases' wall times (``"forward"``, ``"backward"``, ``"step"``) and, for a
    training step, the anatomy's parts (``"anatomy.<part>"``). ``modules`` maps a module
    path to each phase's latency per step, its submodules' included, and ``compute`` maps it
    to its own ops' time per step, every phase's, collectives left out (its share of the
    anatomy's compute: :func:`~.iteration.compute_by_module`); both kept where several steps
    ran. ``first_step`` is True when the first profiled
    step was the first the process ran (its one-time costs are in it).

    >>> s = StepSamples("step", {"wall": (0.2, 0.3, 0.25)})
    >>> s.count, s.spread("wall").median
    (3, 0.25)
    >>> StepSamples.from_dict(s.to_dict()) == s
    True
    """

    unit: str
    figures: Mapping[str, tuple[float, ...]]
    modules: Mapping[str, Mapping[str, tuple[float, ...]]] = field(default_factory=dict)
    first_step: bool = False
    compute: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    @property
    def count(self) -> int:
        """How many steps (or passes) were profiled."""
        return len(self.figures.get("wall", ()))

    def __repr__(self) -> str:
        # short: a training profile keeps every module's latency per phase and step
        return (f"StepSamples(unit={self.unit!r}, count={self.count}, figures={list(self.figures)!r}, "
                f"modules={len(self.modules)}, first_step={self.first_step!r})")

    def spread(self, figure: str = "wall") -> Spread | None:
        """The spread of ``figure`` (None when it was not measured)."""
        values = self.figures.get(figure)
        return spread(values) if values else None

    def module(self, path: str, phase: str) -> tuple[float, ...]:
        """Module ``path``'s latency in ``phase`` (its submodules' included), step by step
        (empty when not measured)."""
        return tuple(self.modules.get(path, {}).get(phase, ()))

    def median(self, figure: str = "wall") -> float | None:
        """The median of ``figure`` over the steps (None when it was not measured): what
        the result reports for it (``docs/conventions/timing.md``)."""
        values = self.figures.get(figure)
        return statistics.median(values) if values else None

    def module_medians(self) -> dict[str, dict[str, float]]:
        """Per module path and phase, the median of its inclusive latency over the steps:
        the one place a result's module latencies come from when several steps ran (medians
        do not add up, so a parent's is not the sum of its children's).

        >>> s = StepSamples("pass", {"wall": (1.0, 9.0, 2.0)}, {"": {"forward": (1.0, 9.0, 2.0)}})
        >>> s.module_medians()
        {'': {'forward': 2.0}}
        """
        if self.count < 2:
            return {}
        return {path: {phase: statistics.median(values) for phase, values in phases.items() if values}
                for path, phases in self.modules.items()}

    def to_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "count": self.count, "first_step": self.first_step,
                "figures": {k: list(v) for k, v in self.figures.items()},
                "modules": {p: {ph: list(v) for ph, v in phases.items()} for p, phases in self.modules.items()},
                # only where several steps ran (files of one step stay as they were)
                **({"compute": {p: list(v) for p, v in self.compute.items()}} if self.compute else {})}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepSamples:
        # null (the meta device's times) reads as 0
        return cls(str(d.get("unit", "step")),
                   {k: tuple(seconds_from_file(v)) for k, v in d.get("figures", {}).items()},
                   {p: {ph: tuple(seconds_from_file(v)) for ph, v in phases.items()}
                    for p, phases in d.get("modules", {}).items()},
                   bool(d.get("first_step", False)),
                   {p: tuple(seconds_from_file(v)) for p, v in d.get("compute", {}).items()})
