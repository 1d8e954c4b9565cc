"""Operators that make the host wait for the device: on CUDA each one synchronises, so the
GPU's queue drains and the host's next launches come late. Listed per module and phase from
the counted operators (the same on every device), so a CPU profile already names them.
Indexing with a boolean mask also waits, inside ``aten.index``; it is not listed, since the
operator's name does not say which kind of index it was given.

>>> import torch, flopsight
>>> class Router(torch.nn.Module):
...     def forward(self, x):
...         keep = x.nonzero()                               # its size depends on the values
...         return keep.sum() / max(float(x.max()), 1.0)     # float(tensor): .item()
>>> [(s.path, s.op, s.calls) for s in host_syncs(flopsight.profile(Router(), torch.randn(8)))]
[('', 'aten._local_scalar_dense', 1), ('', 'aten.nonzero', 1)]
"""

from __future__ import annotations

from dataclasses import dataclass

from ..result.profile_result import ProfileResult
from ..result.tree import PHASES

__all__ = ["SYNC_OPS", "HostSync", "host_syncs"]

#: op -> why it waits: its output's size or value depends on the device's results
SYNC_OPS = {
    "aten._local_scalar_dense": ".item(), float(t), bool(t) or int(t): a value read back",
    "aten.nonzero": "nonzero: the output's size",
    "aten.masked_select": "the output's size",
    "aten._unique2": "unique: the output's size",
    "aten.unique_dim": "unique: the output's size",
    "aten.unique_consecutive": "the output's size",
    "aten.repeat_interleave": "without output_size: the output's size",
    "aten.is_nonzero": "a tensor's truth value",
    "aten.equal": "a Python bool",
}


@dataclass(frozen=True)
class HostSync:
    """``calls`` calls of ``op`` in module ``path``'s own code, in ``phase``, and ``why`` it waits."""

    path: str
    phase: str
    op: str
    calls: int
    why: str


def host_syncs(result: ProfileResult) -> list[HostSync]:
    """Every syncing operator the result counted, module by module in pre-order, then by
    phase and name."""
    found = []
    for stats in result.modules.values():
        for phase in PHASES:
            for op, s in sorted(stats.ops.get(phase, {}).items()):
                why = SYNC_OPS.get(op)
                if why is not None and s.calls:
                    found.append(HostSync(stats.name, phase, op, s.calls, why))
    return found
