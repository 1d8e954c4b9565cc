"""Several profiles ranked by step (or pass) time, fastest first, in tiers that the verdict's
significance test tells apart: the ranking's ``<`` and the verdict's "significant" are one
test, computed once (:func:`rank`; docs/diff.md).

Each pair's :class:`~.verdict.Verdict` is computed once and kept: the prose about any two of
the profiles uses the verdict the ranking used. Sorted by their median step, a profile starts
a new tier only when it is significantly slower than every profile placed before it; one
that is not told apart from some profile in an earlier tier merges the tiers from that one
on. So any two profiles in different tiers differ significantly. Within a tier, two profiles
can still differ on their own when a third lies between them, told apart from neither:
:attr:`Ranking.apart` names such pairs, so that a text can say so.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from ...result.profile_result import ProfileResult
from .stats import DEFAULT_ALPHA
from .verdict import Verdict, verdict

__all__ = ["Ranking", "rank"]


@dataclass(frozen=True)
class Ranking:
    """``tiers``: the profiles' keys, fastest tier first (each tier fastest first);
    ``verdicts``: the verdict of every ordered pair ``(a, b)`` (why b differs from a)."""

    tiers: tuple[tuple[Hashable, ...], ...]
    verdicts: Mapping[tuple[Hashable, Hashable], Verdict]

    def verdict(self, a: Hashable, b: Hashable) -> Verdict:
        """Why ``b``'s step differs from ``a``'s: the verdict the ranking used."""
        try:
            return self.verdicts[a, b]
        except KeyError:
            raise KeyError(f"a, b: expected two different keys of the ranked profiles, got {a!r}, {b!r}") from None

    def tier(self, key: Hashable) -> int:
        """The index of ``key``'s tier (0: the fastest)."""
        return next(i for i, t in enumerate(self.tiers) if key in t)

    @property
    def apart(self) -> tuple[tuple[Hashable, Hashable], ...]:
        """Pairs in one tier that the test tells apart on their own (faster first): a profile
        between them is told apart from neither."""
        return tuple((x, y) for t in self.tiers for i, x in enumerate(t) for y in t[i + 1:]
                     if self.verdicts[x, y].step.significant)


def rank(results: Mapping[Hashable, ProfileResult], alpha: float = DEFAULT_ALPHA) -> Ranking:
    """``results`` (key -> a profile of several steps or passes) in tiers, fastest first."""
    if len(results) < 2:
        raise ValueError(f"results: expected at least two profiles to rank, got {len(results)}")
    verdicts = {}
    for a, ra in results.items():
        for b, rb in results.items():
            if a != b:
                v = verdict(ra, rb, alpha)
                if v is None:
                    short = a if ra.samples is None or ra.samples.count < 2 else b
                    raise ValueError(f"results: {short!r} holds fewer than 2 steps (or passes): its noise is "
                                     "unknown and it cannot be ranked; profile several (steps=N)")
                verdicts[a, b] = v
    # every pair has a verdict, so every profile holds two wall times or more: each has a median
    median = {k: m for k, r in results.items()
              if r.samples is not None and (m := r.samples.median("wall")) is not None}
    tiers: list[list[Hashable]] = []
    for key in sorted(results, key=lambda k: median[k]):  # sorted() is stable: ties keep the given order
        # the earliest tier holding a profile this one is not told apart from
        merge = next((i for i, t in enumerate(tiers) if any(not verdicts[k, key].step.significant for k in t)), None)
        if merge is None:
            tiers.append([key])
        else:
            tiers[merge:] = [[k for t in tiers[merge:] for k in t] + [key]]
    return Ranking(tuple(tuple(t) for t in tiers), verdicts)
