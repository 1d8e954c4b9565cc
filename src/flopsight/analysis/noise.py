"""How far a profile's times can be trusted: the spread of its step (or pass) time over the
samples, and whether the first profiled step was the process's first.

>>> import torch, flopsight
>>> r = flopsight.profile(torch.nn.Linear(4, 2), torch.ones(1, 4), repeat=3, clock=flopsight.FakeClock())
>>> n = noise_figures(r)
>>> n.figure, n.unit, n.count, n.spread.kind, n.wide
('fwd latency', 'pass', 3, 'min-max', False)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..result.profile_result import ProfileResult
from ..result.samples import Spread
from .report_figures import is_training

__all__ = ["NoiseFigures", "noise_figures"]


@dataclass(frozen=True)
class NoiseFigures:
    """The time a profile's noise is judged on: ``figure`` (its name in the report), measured
    over ``count`` ``unit``\\ s (``"step"`` or ``"pass"``) with ``spread`` (None for one
    sample, whose noise is unknown); ``first_step``: the first of them was the first step the
    process ran (or, for passes, no warm-up call ran before)."""

    figure: str
    unit: str
    count: int
    spread: Spread | None
    first_step: bool

    @property
    def noisy(self) -> bool:
        """One sample, or a spread above 10% of the median: the report says so."""
        return self.spread is None or self.spread.noisy

    @property
    def wide(self) -> bool:
        """A spread as wide as the figure itself (``2 × ±`` at least its median, as the diff's
        verdict judges ``wide_noise``): no difference smaller than a whole step could show;
        the report says so plainly, with what to do (more steps, a quieter machine)."""
        s = self.spread
        return s is not None and s.median > 0 and 2 * s.plus_minus >= s.median


def noise_figures(result: ProfileResult) -> NoiseFigures | None:
    """The noise of ``result``'s step or pass time (None on the meta device, where nothing
    runs on hardware)."""
    if result.metadata.device_type == "meta":
        return None
    samples = result.samples
    training = is_training(result)
    if training:
        figure = "step time"
    elif result.generation is not None:
        figure = "generate() time"
    elif result.metadata.method in (None, "forward"):
        figure = "fwd latency"
    else:
        figure = f"{result.metadata.method}() time"
    unit = samples.unit if samples is not None else ("step" if training else "pass")
    count = samples.count if samples is not None else 1
    spread = samples.spread("wall") if samples is not None and count > 1 else None
    return NoiseFigures(figure, unit, count, spread, samples.first_step if samples is not None else False)
