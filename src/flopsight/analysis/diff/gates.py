"""The gate language (``"flops>+1%"``, ``"latency@encoder>+2ms"``) and how a gate is decided.

A gate fails when a figure of the diff moves beyond its threshold: exactly (in fractions) for
counts and bytes, and for the model's latencies only when the calls show it beyond the noise
(a one-sided Mann-Whitney U test, :mod:`.stats`). A :class:`GateResult` holds the figures that
decided it; its readable message is rendered by the renderers (see docs/diff.md).

>>> g = parse_gate("latency>+10%")
>>> g.metric, g.path, g.op, g.value, g.relative
('latency', None, '>', Fraction(10, 1), True)
>>> _beyond(parse_gate("flops>+831"), 840, 1672), _beyond(parse_gate("flops>+832"), 840, 1672)
(True, False)
"""

from __future__ import annotations

import difflib
import math
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ...result.reporting import renderers
from .metrics import metric_kind
from .stats import DEFAULT_ALPHA, mann_whitney_p, testable

__all__ = ["GATE_METRICS", "GATE_GRAMMAR", "Gate", "GateResult", "parse_gate", "parse_gates", "evaluate_gate",
           "check_alpha"]

#: The metrics a gate may name.
GATE_METRICS = ("params", "macs", "flops", "latency", "fwd_latency", "bwd_latency", "memory", "activations")
_COUNT_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_TIME_UNITS = {"s": Fraction(1), "ms": Fraction(1, 10**3), "us": Fraction(1, 10**6), "µs": Fraction(1, 10**6)}
GATE_GRAMMAR = (
    "<metric>[@<module path>]<op><threshold>: metric one of " + ", ".join(GATE_METRICS) + "; op > or <; "
    "threshold a signed percentage (+1%, -5%) or an absolute number (+2M for counts and bytes with "
    "K/M/G/T, +2ms for latencies with s/ms/us), e.g. flops>+1% or latency@encoder.layer.0>+0.5ms"
)


@dataclass(frozen=True)
class Gate:
    """A parsed gate: fail when ``metric`` (of the model, or of module ``path``) changes
    beyond ``value`` in the direction of ``op``; ``value`` in percent when ``relative``,
    else in the metric's unit (count, bytes, seconds)."""

    text: str
    metric: str
    path: str | None
    op: str
    value: Fraction
    relative: bool


_GATE = re.compile(
    r"^\s*(?P<metric>[A-Za-z_]+)(?:@(?P<path>[^<>\s]+))?\s*(?P<op>[<>])\s*"
    r"(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<unit>%|[KMGT]|ms|us|µs|s)?\s*$"
)


def parse_gate(text: str) -> Gate:
    """Parse ``<metric>[@<path>]<op><threshold>``; a malformed gate raises ValueError naming
    it and the grammar.

    >>> g = parse_gate("flops@encoder.layer.0>+1.5%")
    >>> g.metric, g.path, g.op, g.value, g.relative
    ('flops', 'encoder.layer.0', '>', Fraction(3, 2), True)
    >>> parse_gate("latency<-2ms").value
    Fraction(-1, 500)
    >>> parse_gate("flop>1%")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: gate 'flop>1%': unknown metric 'flop' (did you mean 'flops'?); expected <metric>[@<module path>]...
    """
    if not isinstance(text, str):
        raise TypeError(f"gate: expected a string such as 'flops>+1%', got {type(text).__name__}")
    m = _GATE.match(text)
    if m is None:
        raise ValueError(f"gate {text!r}: not understood; expected {GATE_GRAMMAR}")
    metric, unit = m["metric"].lower(), m["unit"] or ""
    if metric not in GATE_METRICS:
        close = difflib.get_close_matches(metric, GATE_METRICS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"gate {text!r}: unknown metric {metric!r}{hint}; expected {GATE_GRAMMAR}")
    number = Fraction(m["number"])
    if unit == "%":
        return Gate(text, metric, m["path"], m["op"], number, True)
    return Gate(text, metric, m["path"], m["op"], number * _unit_scale(text, metric, unit, number), False)


def _unit_scale(text: str, metric: str, unit: str, number: Fraction) -> Fraction:
    """The factor an absolute threshold's unit stands for, checked against the metric's kind."""
    if metric_kind(metric) == "time":
        if unit in _TIME_UNITS:
            return _TIME_UNITS[unit]
        if unit == "" and number == 0:
            return Fraction(1)
        raise ValueError(f"gate {text!r}: a latency threshold needs a time unit (s, ms, us) or %; "
                         f"expected {GATE_GRAMMAR}")
    if unit in _COUNT_UNITS:
        return Fraction(_COUNT_UNITS[unit])
    raise ValueError(f"gate {text!r}: {metric} is not a time; use a count suffix (K, M, G, T) or %; "
                     f"expected {GATE_GRAMMAR}")


def parse_gates(gates: str | Iterable[str | Gate]) -> list[Gate]:
    """Every gate parsed (one string is one gate), so a typo fails before anything is compared.

    >>> [g.text for g in parse_gates("flops>+1%")]
    ['flops>+1%']
    """
    if isinstance(gates, str):
        gates = [gates]
    return [g if isinstance(g, Gate) else parse_gate(g) for g in gates]


def check_alpha(alpha: Any) -> float:
    """``alpha`` as a float, or ValueError unless it is a significance level between 0 and 1."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise ValueError(f"alpha: expected a significance level between 0 and 1, got {alpha!r}")
    return float(alpha)


@dataclass(frozen=True)
class GateResult:
    """A gate's outcome: ``passed``, and the figures that decided it.

    ``a`` and ``b`` are the figures compared (None where not measured; for a latency gate that
    was tested, the medians of the calls), ``beyond`` whether ``a -> b`` passes the threshold in
    the gate's direction (None when it could not be compared). For a latency gate, ``tested``
    says whether the noise test could run, ``p_value`` is its one-sided p-value, ``samples``
    the calls on each side and ``alpha`` the level it was held to; for counts ``tested`` is None.

    ``message`` (also ``str(result)``) is the readable text, rendered by the renderers from
    these figures.

    >>> import flopsight, torch
    >>> clock = flopsight.FakeClock()
    >>> d = flopsight.diff(flopsight.profile(torch.nn.Linear(4, 2), torch.ones(1, 4), clock=clock),
    ...                    flopsight.profile(torch.nn.Linear(4, 3), torch.ones(1, 4), clock=clock))
    >>> (r,) = d.evaluate(["macs>+100%"])
    >>> r.passed, r.a, r.b, r.beyond, r.tested
    (True, 8, 12, False, None)
    >>> r.message
    'macs>+100%: MACs of the model rose 8 -> 12 (+4, +50%), within +100%'
    """

    gate: Gate
    passed: bool
    tested: bool | None = None
    p_value: float | None = None
    a: float | None = None
    b: float | None = None
    beyond: bool | None = None
    samples: tuple[int, int] = (0, 0)
    alpha: float = DEFAULT_ALPHA

    @property
    def measured(self) -> bool:
        """Whether both sides measured the figure (memory needs ``memory=True``)."""
        return self.a is not None and self.b is not None

    @property
    def significant(self) -> bool | None:
        """Whether the noise test showed the change beyond the threshold (None: not tested)."""
        return None if self.p_value is None else self.p_value < self.alpha

    @property
    def message(self) -> str:
        # the renderers' gate_message, a thin call: analysis never imports the layer above it
        return renderers().render(self)

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        """The outcome as data (the diff's JSON adds its ``message``)."""
        return {"gate": self.gate.text, "passed": self.passed, "tested": self.tested, "p_value": self.p_value}


def evaluate_gate(gate: Gate, a: float | None, b: float | None, alpha: float,
                  calls: tuple[Sequence[float], Sequence[float]] = ((), ())) -> GateResult:
    """Decide ``gate`` on its figure, ``a`` before and ``b`` after (None: not measured on that
    side), with ``calls`` the per-call latencies on each side for a latency gate (none for a
    module: it keeps one total per profile). ``alpha`` must be checked (:func:`check_alpha`).

    >>> r = evaluate_gate(parse_gate("latency>+10%"), 0.010, 0.012, 0.05)
    >>> r.passed, r.beyond, r.tested, r.samples  # no calls to test: a point comparison
    (False, True, False, (0, 0))
    """
    if a is None or b is None:  # memory untracked on a side: never a silent pass
        return GateResult(gate, False, a=a, b=b, alpha=alpha)
    if metric_kind(gate.metric) == "time":
        return _time_gate(gate, a, b, alpha, *calls)
    beyond = _beyond(gate, a, b)
    return GateResult(gate, not beyond, a=a, b=b, beyond=beyond, alpha=alpha)


def _time_gate(gate: Gate, a: float, b: float, alpha: float, xs: Sequence[float], ys: Sequence[float]) -> GateResult:
    """A latency gate: on the medians of the calls, failing only when the calls show the change
    beyond the threshold at ``alpha``; a point comparison of ``a`` and ``b`` when too few calls
    could never show it."""
    samples = (len(xs), len(ys))
    if not testable(len(xs), len(ys), alpha):
        beyond = _beyond(gate, a, b)
        return GateResult(gate, not beyond, tested=False, a=a, b=b, beyond=beyond, samples=samples, alpha=alpha)
    ma, mb = statistics.median(xs), statistics.median(ys)
    beyond = _beyond(gate, ma, mb)
    p = _shifted_test(gate, xs, ys)
    return GateResult(gate, not (beyond and p < alpha), tested=True, p_value=p, a=ma, b=mb, beyond=beyond,
                      samples=samples, alpha=alpha)


def _beyond(gate: Gate, a: float, b: float) -> bool:
    """Whether the change a -> b passes the gate's threshold in its direction (exactly:
    fractions, so a count never fails or passes by rounding)."""
    delta = Fraction(b) - Fraction(a)
    if not gate.relative:
        change: Fraction | float = delta
    elif a == 0:  # from nothing: beyond any percentage
        change = math.copysign(math.inf, delta) if delta else 0
    else:
        change = delta / abs(Fraction(a)) * 100
    return change > gate.value if gate.op == ">" else change < gate.value


def _shifted_test(gate: Gate, xs: Sequence[float], ys: Sequence[float]) -> float:
    """One-sided p-value that b's calls lie beyond a's moved by the threshold (scaled for a
    percentage, shifted for a time): 'slower by more than 10%' is tested, not just 'slower'."""
    t = float(gate.value)
    moved = [x * (1 + t / 100) for x in xs] if gate.relative else [x + t for x in xs]
    return mann_whitney_p(moved, ys) if gate.op == ">" else mann_whitney_p(ys, moved)
