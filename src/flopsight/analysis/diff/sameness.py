"""Is there any difference? A diff's answer before its tables: counts exactly, times against their noise.

Counts and memory are exact: they are the same or they are not. Times always move a little, so
"no difference" in times means either identical figures (the same file twice) or a change the
samples cannot tell from noise: the step verdict's decision where both sides hold several steps
or passes (:mod:`.verdict`), else the two-sided Mann-Whitney test of the model's per-call
latencies at ``alpha``. With too few samples to test (one call each) the times are
``untested``: a difference there is neither confirmed nor ruled out.

>>> import torch, flopsight
>>> clock = flopsight.FakeClock()
>>> r = flopsight.profile(torch.nn.Linear(4, 2), torch.ones(1, 4), clock=clock)
>>> flopsight.diff(r, r).sameness()
Sameness(model=True, counts=True, times='identical', metric='fwd_latency', p_value=None, samples=(1, 1))
>>> flopsight.diff(r, r).sameness().none
True
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .metrics import metric_kind
from .stats import testable, two_sided_p

__all__ = ["Sameness", "sameness", "TIMES"]

#: what ``Sameness.times`` can say
TIMES = ("identical", "noise", "untested", "changed")


class Sameness(NamedTuple):
    """Whether two profiles differ. ``model``: the same model class; ``counts``: every count
    and memory figure of the model and of each module is equal, none added or removed;
    ``times``: ``"identical"``, ``"noise"`` (a change within the noise), ``"untested"`` (too
    few samples to tell) or ``"changed"`` (beyond the noise); ``metric``, ``p_value`` and
    ``samples``: the time figure that decided it (``"step"`` or ``"pass"`` where the step
    verdict did; ``p_value`` None where untested)."""

    model: bool
    counts: bool
    times: str
    metric: str
    p_value: float | None
    samples: tuple[int, int]

    @property
    def none(self) -> bool:
        """No difference: the same model, the same counts, and times identical or within the noise."""
        return self.model and self.counts and self.times in ("identical", "noise")


def _counts_equal(d: Any) -> bool:
    rows = [d.total, *d.modules.values()]
    return all(r.type_a == r.type_b and not any(c.changed for m, c in r.metrics.items() if metric_kind(m) != "time")
               for r in rows)


def _time_metrics(d: Any) -> list[str]:
    """The model's time figures that were measured: the forward's alone for inference."""
    if d.a.backward_passes or d.b.backward_passes:
        return ["fwd_latency", "bwd_latency", "latency"]
    return ["fwd_latency"]


def _p_value(xs: list[float], ys: list[float], alpha: float) -> float | None:
    """The two-sided p-value of a shift between the samples; None where none could be significant."""
    return two_sided_p(xs, ys) if testable(len(xs), len(ys), alpha) else None


def sameness(d: Any, alpha: float) -> Sameness:
    """The :class:`Sameness` of diff ``d`` (a :class:`~.compare.ProfileDiff`: compare imports this module, so
    not named in the annotation), times judged at significance level ``alpha``."""
    model = not any(c.kind == "modules" for c in d.caveats)
    counts = _counts_equal(d)
    metrics = _time_metrics(d)
    key = metrics[-1]  # the per-call latency (forward + backward where there is a backward)
    samples = (len(d.a.samples.get(key, ())), len(d.b.samples.get(key, ())))
    if all(not d.total.metrics[m].changed and d.a.samples.get(m) == d.b.samples.get(m) for m in metrics):
        return Sameness(model, counts, "identical", key, None, samples)
    if d.verdict is not None:  # several steps or passes on each side: the verdict has decided
        step = d.verdict.step
        return Sameness(model, counts, "changed" if step.significant else "noise", d.verdict.unit, step.p_value,
                        d.verdict.samples)
    ps = {m: _p_value(d.a.samples.get(m, []), d.b.samples.get(m, []), alpha) for m in metrics}
    if any(p is not None and p < alpha for p in ps.values()):
        times = "changed"
    elif any(p is None for p in ps.values()):
        times = "untested"
    else:
        times = "noise"
    return Sameness(model, counts, times, key, ps[key], samples)

