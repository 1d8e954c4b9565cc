"""The step verdict (:class:`~flopsight.analysis.diff.verdict.Verdict`) and a ranking of
profiles (:class:`~flopsight.analysis.diff.ranking.Ranking`) in words: a renderer only
formats what the analysis found, so a ranking's ``<`` and a verdict's "significant" are one
test's, and the modules named under a part add up to its change with what they leave.

>>> from flopsight.analysis.diff.verdict import Difference, Verdict
>>> step = Difference(0.5, 0.75, 0.25, 0.1875, 0.3125)  # +250 ms, its interval leaves out 0: significant
>>> within = Difference(0.25, 0.375, 0.125, -0.125, 0.375)  # +125 ms, its interval holds 0
>>> v = Verdict("step", (5, 5), step, (), ("compute", "other"), None, {"compute": within, "other": within})
>>> verdict_text(v, "a", "b")
"b's step is 250 ms slower than a's (95% interval +187.5 ms to +312.5 ms, 5 vs 5 steps): no part moved \
beyond its own noise the step's way (slower); within their own noise: +125 ms compute, +125 ms other"
"""

from __future__ import annotations

import math

from ..analysis.diff.ranking import Ranking
from ..analysis.diff.verdict import MATERIAL, UNSPLIT, Cause, CollectiveChange, Difference, Verdict
from .numbers import bytes_to_string, duration_to_string

__all__ = ["verdict_text", "ranking_text", "RANKING_LEGEND"]

#: each part's name in a sentence
_LABELS = {"compute": "compute", "framework": "framework and hooks", "communication": "exposed communication",
           "other": "other", "profiler": "profiler", UNSPLIT: "not split by the anatomy", "modules": "in the modules"}
#: what the ranking's signs mean
RANKING_LEGEND = ("<: each one after it significantly slower than each one before, by the verdict's test; "
                  "≈: not told apart")


def _signed(seconds: float) -> str:
    return ("+" if seconds >= 0 else "-") + duration_to_string(abs(seconds))


def _calls(k: CollectiveChange) -> str:
    """``10 calls vs 1, 124 KB each``, or ``2 calls of 124 KB vs 1 of 8 B`` when their sizes differ."""
    (na, nb), (ba, bb) = k.calls, k.bytes_per_call
    if ba == bb or not na or not nb:
        return f"{na} calls vs {nb}, {bytes_to_string(bb or ba)} each"
    return f"{na} calls of {bytes_to_string(ba)} vs {nb} of {bytes_to_string(bb)}"


def _interval(d: Difference) -> str:
    """``95% interval +1 ms to +3 ms``, or why there is none."""
    if d.low == -math.inf or d.high == math.inf:
        return "too few steps for a 95% interval"
    return f"95% interval {_signed(d.low)} to {_signed(d.high)}"


def _cause_text(c: Cause) -> str:
    d = c.difference.delta
    if c.part == "communication":
        # the median steps' calls of each kind that changed (their exposed times overlap: the
        # part's figure is what the rank waited for in all)
        kinds = [f"{k.kind}: {_calls(k)}" for k in c.collectives
                 if k.calls[0] != k.calls[1] or k.bytes_per_call[0] != k.bytes_per_call[1]]
        return f"{_signed(d)} exposed communication" + (f" ({'; '.join(kinds[:3])})" if kinds else "")
    if c.part == "framework":
        return f"{_signed(d)} framework and hooks (module and autograd hooks, parameter management, Python between ops)"
    if c.part == "other":
        return f"{_signed(d)} other (data loading, loss, idle)"
    if c.part == "profiler":
        return f"{_signed(d)} profiler (flopsight's own time left in the phases, not the model's)"
    if c.part == UNSPLIT:
        return f"{_signed(d)} not split by the anatomy (latencies timed apart from the counted step)"
    moved = [f"{m.path} ({m.type_name}) {_signed(m.delta)}" if m.type_name else f"{m.path} {_signed(m.delta)}"
             for m in c.modules]
    if moved and c.rest is not None:
        moved[-1] += f"; the rest {_signed(c.rest)}"  # so that what is listed adds up to the part's change
    return f"{_signed(d)} {_LABELS[c.part]}" + (f" (most in {', '.join(moved)})" if moved else "")


def _share(fraction: float) -> str:
    """``a tenth of``, or ``5% of``: a share in words."""
    return "a tenth of" if fraction == 0.1 else f"{fraction:.0%} of"


def _within(parts: dict[str, Difference], names: tuple[str, ...]) -> str:
    """The parts within their own noise, each with its change (so that every part's change is
    told and they add up), then those that did not move at all: ``compute and other unchanged``."""
    moved = [p for p in names if parts[p].delta != 0]
    still = [p for p in names if parts[p].delta == 0]
    said = ["within their own noise: " + ", ".join(f"{_signed(parts[p].delta)} {_LABELS[p]}" for p in moved)
            if moved else "",
            (", ".join(still[:-1]) + " and " + still[-1] if len(still) > 1 else still[0]) + " unchanged"
            if still else ""]
    return "; ".join(x for x in said if x)


def _too_noisy(v: Verdict, a: str, b: str) -> str:
    """The plain warning when the spread is as wide as the step, and what to do."""
    s, units = v.step, "passes" if v.unit == "pass" else f"{v.unit}s"
    faster, median = (a, s.a) if s.a <= s.b else (b, s.b)
    if s.low == -math.inf or s.high == math.inf:
        return f". Too few {units} to tell anything: profile at least 4 on each side"
    return (f". Too noisy to tell much: the change's 95% interval ({_signed(s.low)} to {_signed(s.high)}) is as "
            f"wide as {faster}'s whole {v.unit} ({duration_to_string(median)}): only a change beyond it can show; "
            f"profile more {units} or on a quieter machine (no other work on its cores)")


def verdict_text(v: Verdict, a: str = "A", b: str = "B") -> str:
    """The verdict in one sentence: how much slower or faster b's step is, with its 95%
    interval; where significant, the parts that moved beyond their own noise (their
    intervals leave out zero), largest first, then the others with their changes; a plain
    warning where the interval is as wide as the step."""
    s = v.step
    units = "passes" if v.unit == "pass" else f"{v.unit}s"
    way = "slower" if s.delta >= 0 else "faster"
    head = (f"{b}'s {v.unit} is {duration_to_string(abs(s.delta))} {way} than {a}'s "
            f"({_interval(s)}, {v.samples[0]} vs {v.samples[1]} {units})")
    parts = dict(v.parts or {})
    if not s.significant:
        text = head + ": within the noise, not significant"
        if v.causes:  # parts that moved beyond their own noise, and (with the others) cancelled out
            within = _within(parts, tuple(v.unchanged))
            text += "; beyond their own noise, though: " + ", ".join(_cause_text(c) for c in v.causes) + \
                (("; " if within.startswith("within") else ", ") + within if within else "")
    else:
        said = ", ".join(_cause_text(c) for c in v.causes)
        if v.largest_cause is None and parts:  # never name a part within its noise as the cause
            said = "; ".join(x for x in (f"no part moved beyond its own noise the step's way ({way})", said) if x)
        if v.minor:  # beyond their own noise, too small to explain the step's change: told, not causes
            minor = ", ".join(_cause_text(c) for c in v.minor)
            said = "; ".join(x for x in (said, f"beyond their own noise but under {_share(MATERIAL)} the step's "
                                               f"change (not causes): {minor}") if x)
        within = _within(parts, tuple(v.unchanged))
        sep = ": " if not said else "; " if within.startswith("within") or v.minor else ", "
        text = head + (": " + said if said else "") + (sep + within if within else "")
    return text + (_too_noisy(v, a, b) if v.wide_noise else "")


def ranking_text(r: Ranking, name=str) -> str:
    """``ZeRO-0 ≈ ZeRO-1 < ZeRO-3``: the tiers, fastest first (``name``: a key's name); where
    two profiles of one tier differ on their own (a third links them, told apart from
    neither), a note names them, so that ``≈`` never hides a difference the test found."""
    text = " < ".join(" ≈ ".join(name(k) for k in tier) for tier in r.tiers)
    apart = [f"{name(x)} < {name(y)}" for x, y in r.apart]
    return text + (f" (of these, told apart on their own: {', '.join(apart)})" if apart else "")
