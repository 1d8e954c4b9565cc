"""Diff of two profiles, keyed by module path, with gates for CI (docs/diff.md).

:func:`diff` compares two results (or saved ``.json`` profiles): per module the change in
parameters, MACs, FLOPs, latency and memory, under a header of what each side ran;
:meth:`ProfileDiff.check` turns gates such as ``"flops>+1%"`` into failures, exact on counts
and noise-aware on times. One file per concern: :mod:`.compare` (the comparison), :mod:`.header`
(what each side ran, what differs), :mod:`.sameness` (is there any difference), :mod:`.gates`
(the gate language and deciding a gate), :mod:`.stats` (the noise test), :mod:`.metrics` (what
is compared); the text, Markdown and JSON of a diff and the gates' messages are the
renderers' (:mod:`flopsight.renderers.diff_renderer`).

>>> import torch, flopsight
>>> clock = flopsight.FakeClock()
>>> narrow = flopsight.profile(torch.nn.Linear(4, 2), torch.ones(1, 4), clock=clock)
>>> wide = flopsight.profile(torch.nn.Linear(4, 3), torch.ones(1, 4), clock=clock)
>>> d = flopsight.diff(narrow, wide)
>>> d.total["params"].a, d.total["params"].b, d.total["flops"].delta  # 10 -> 15; 2*4*1 MACs + 1 bias add per output
(10, 15, 9)
>>> for failure in d.check(["params>+40%", "flops>+1K"]):
...     print(failure)
params>+40%: params of the model rose 10 -> 15 (+5, +50%), beyond +40%
"""

from .compare import DIFF_FORMATS, DIFF_SCHEMA_VERSION, Caveat, Change, ModuleDiff, ProfileDiff, Side, diff
from .gates import GATE_GRAMMAR, GATE_METRICS, Gate, GateResult, parse_gate, parse_gates
from .header import RUN_FIELDS
from .metrics import METRICS, TIME_METRICS, metric_kind
from .sameness import Sameness
from .stats import DEFAULT_ALPHA, mann_whitney_p, testable, two_sided_p

__all__ = ["diff", "ProfileDiff", "ModuleDiff", "Change", "Side", "Caveat", "Gate", "GateResult", "parse_gate",
           "parse_gates", "mann_whitney_p", "METRICS", "GATE_METRICS", "DIFF_FORMATS", "DIFF_SCHEMA_VERSION",
           "DEFAULT_ALPHA", "GATE_GRAMMAR", "TIME_METRICS", "metric_kind", "testable", "two_sided_p", "RUN_FIELDS",
           "Sameness"]
