"""The noise test on latencies: the Mann-Whitney U test, and the questions a diff asks of it.

Pure Python (no scipy): exact for small samples without ties, else the normal approximation.
Why this test and how gates use it is in docs/diff.md.

>>> mann_whitney_p([1, 2, 3], [4, 5, 6, 7])  # y above x in 1 of C(7, 3) = 35 orderings
0.02857142857142857
>>> testable(3, 3, 0.05), testable(3, 4, 0.05)  # the best p of 3 vs 3 calls is 1/20, never below 0.05
(False, True)
>>> two_sided_p([1, 2, 3], [4, 5, 6, 7])
0.05714285714285714
>>> shift([1, 2, 3, 4, 5], [11, 12, 13, 14, 15])  # y - x: 10, within 7 to 13 at 95%
(10, 7, 13)
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence

__all__ = ["DEFAULT_ALPHA", "mann_whitney_p", "two_sided_p", "testable", "shift"]

#: Significance level of the noise test on latencies.
DEFAULT_ALPHA = 0.05
#: Largest n*m for which the exact distribution of U is computed (beyond: normal approximation).
_EXACT_LIMIT = 400


def mann_whitney_p(x: Sequence[float], y: Sequence[float]) -> float:
    """One-sided Mann-Whitney U test: the p-value of ``y`` tending to be larger than ``x``.

    Exact when there are no ties and ``len(x) * len(y) <= 400``, else the normal
    approximation with tie and continuity corrections.

    >>> mann_whitney_p([1, 2, 3, 4], [5, 6, 7, 8])  # 1 arrangement in C(8, 4) = 70
    0.014285714285714285
    >>> mann_whitney_p([5, 6, 7, 8], [1, 2, 3, 4])
    1.0
    """
    n, m = len(x), len(y)
    if not n or not m:
        raise ValueError("x, y: the test needs at least one sample on each side")
    ranks = _ranks([*x, *y])
    u = sum(ranks[n:]) - m * (m + 1) / 2  # pairs with y above x, ties counting half
    ties = _tie_sizes([*x, *y])
    if not ties and n * m <= _EXACT_LIMIT:
        counts = _u_distribution(n, m)
        return sum(counts[round(u):]) / sum(counts)
    return _normal_upper_tail(u, n, m, ties)


def two_sided_p(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The p-value of a shift either way between ``xs`` and ``ys`` (twice the smaller one-sided one)."""
    return min(1.0, 2 * min(mann_whitney_p(xs, ys), mann_whitney_p(ys, xs)))


def testable(n: int, m: int, alpha: float) -> bool:
    """Whether any ordering of n and m samples could be significant: the smallest exact
    p-value, 1 / C(n+m, n), must be below ``alpha``."""
    return n > 0 and m > 0 and 1 / math.comb(n + m, n) < alpha


def shift(xs: Sequence[float], ys: Sequence[float], alpha: float = DEFAULT_ALPHA) -> tuple[float, float, float]:
    """How far ``ys`` lie above ``xs``: the Hodges-Lehmann estimate (the median of the
    ``len(xs) * len(ys)`` differences ``y - x``) and its distribution-free ``1 - alpha``
    interval (Moses'): the k-th smallest and the k-th largest difference, k the largest
    count with ``P(U <= k - 1) <= alpha / 2`` under the Mann-Whitney U distribution. The
    interval leaves out 0 exactly when the two-sided test's p is at most ``alpha`` (ties
    aside): one test for the estimate and its significance. Too few samples for any such k:
    the interval is unbounded, ``(-inf, inf)``.

    >>> shift([1.0, 2.0, 3.0], [2.0, 3.0, 4.0])  # 3 vs 3: no 95% interval exists
    (1.0, -inf, inf)
    """
    if not xs or not ys:
        raise ValueError("xs, ys: a shift needs at least one sample on each side")
    diffs = sorted(y - x for x in xs for y in ys)
    k = _interval_rank(len(xs), len(ys), alpha)
    estimate = statistics.median(diffs)
    if k < 1:
        return estimate, -math.inf, math.inf
    return estimate, diffs[k - 1], diffs[len(diffs) - k]


def _interval_rank(n: int, m: int, alpha: float) -> int:
    """The largest k with ``P(U <= k - 1) <= alpha / 2`` (0: none): exact for
    ``n * m <= 400``, else from the normal approximation.

    >>> _interval_rank(5, 5, 0.05)  # P(U <= 2) = 4/252 = 0.016, P(U <= 3) = 7/252 = 0.028
    3
    """
    if n * m <= _EXACT_LIMIT:
        counts = _u_distribution(n, m)
        total, below = sum(counts), 0  # below: how many orderings give U <= u - 1
        for u, c in enumerate(counts):
            if (below + c) / total > alpha / 2:
                return u
            below += c
        return len(counts)
    z = statistics.NormalDist().inv_cdf(1 - alpha / 2)
    return max(int(math.floor(n * m / 2 - z * math.sqrt(n * m * (n + m + 1) / 12))), 0)


def _ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties sharing their average rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def _tie_sizes(values: list[float]) -> list[int]:
    counts: dict[float, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return [c for c in counts.values() if c > 1]


@functools.lru_cache(maxsize=64)
def _u_distribution(n: int, m: int) -> tuple[int, ...]:
    """How many of the C(n+m, n) orderings give U = 0, 1, ..., n*m (no ties); kept per (n, m):
    a verdict tests its step and each part and module on the same counts of steps.

    The largest value is an x (adding no pair) or a y (above all i x's: i pairs), so
    f(i, j) = f(i-1, j) + q^i f(i, j-1), the coefficients of a Gaussian binomial.
    """
    prev = [[1] for _ in range(m + 1)]  # f(0, j): one ordering, U = 0
    for i in range(1, n + 1):
        cur = [[1]]  # f(i, 0)
        for j in range(1, m + 1):
            shifted = [0] * i + cur[j - 1]
            size = max(len(prev[j]), len(shifted))
            cur.append([(prev[j][k] if k < len(prev[j]) else 0) + (shifted[k] if k < len(shifted) else 0)
                        for k in range(size)])
        prev = cur
    return tuple(prev[m])


def _normal_upper_tail(u: float, n: int, m: int, ties: list[int]) -> float:
    total = n + m
    variance = n * m / 12 * ((total + 1) - sum(t**3 - t for t in ties) / (total * (total - 1)))
    if variance <= 0:  # every value equal: no evidence either way
        return 1.0
    z = (u - n * m / 2 - 0.5) / math.sqrt(variance)
    return 0.5 * math.erfc(z / math.sqrt(2))
