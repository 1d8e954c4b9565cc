"""``--repeat auto``, the command line's default: enough timed calls for a latency with its
spread, within about two seconds.

At least :data:`MIN_REPEAT` timed calls (three samples give a median and a range), and more
while they fit in :data:`BUDGET_S` seconds in all, up to :data:`MAX_REPEAT` (each timed call
also costs the profiler's bookkeeping, and a tiny model would otherwise make thousands). The
time of one call comes from an untimed call made after the warm-up
(:func:`flopsight.cli.run.seconds_per_call`). An explicit ``--repeat N`` wins; the meta
device, where nothing runs on hardware, keeps one pass. No torch here: the parser reads it.

>>> planned_repeat(0.5), planned_repeat(0.1), planned_repeat(1e-4), planned_repeat(5.0)
(4, 20, 30, 3)
>>> planned_repeat(None)   # not measured (--warm-up 0: no call may precede the timed ones)
3
"""

from __future__ import annotations

import math

__all__ = ["MIN_REPEAT", "BUDGET_S", "MAX_REPEAT", "planned_repeat", "AUTO_HELP"]

#: the fewest timed calls ``auto`` makes
MIN_REPEAT = 3
#: seconds the timed calls may take in all, beyond the minimum's
BUDGET_S = 2.0
#: the most timed calls ``auto`` makes
MAX_REPEAT = 30

#: what --help says of ``auto``
AUTO_HELP = (f"auto: at least {MIN_REPEAT}, more while they fit in about {BUDGET_S:g} s (at most {MAX_REPEAT}), "
             "timed from one untimed call after the warm-up; 1 on the meta device")


def planned_repeat(seconds_per_call: float | None, *, minimum: int = MIN_REPEAT, budget: float = BUDGET_S,
                   maximum: int = MAX_REPEAT) -> int:
    """How many timed calls fit in ``budget`` seconds at ``seconds_per_call`` each, at least
    ``minimum`` and at most ``maximum``; ``minimum`` when the time is unknown (None).

    >>> planned_repeat(0.25), planned_repeat(0.0)   # 2 s / 0.25 s = 8; a call too fast to time: the most
    (8, 30)
    """
    if seconds_per_call is None:
        return minimum
    if not seconds_per_call > 0:
        return maximum
    fits = math.floor(budget / seconds_per_call + 1e-9)  # 2.0 / 0.5 is 4, whatever the rounding
    return max(minimum, min(maximum, fits))
