"""Snapshot and restore what a profiled run may change: buffers, RNG, training flags.

Warm-up and counting passes must not leave a trace: BatchNorm running statistics,
counters and caches held in buffers are restored, the RNG is rewound so every pass
draws the same numbers (and dropout or sampling picks the same path), and training
flags set by a front-end are put back.
"""

from __future__ import annotations

import torch
from torch import nn

from .modules import walk

__all__ = ["ModelState"]


def _entries(module: nn.Module) -> dict:
    """A module's buffer slots as a dict (the live one for an eager module). A
    ScriptModule's ``_buffers`` is an ``OrderedDictWrapper`` over the C++ module
    (``keys()`` is a list, no ``clear``): read through its ``items()``."""
    slots = module._buffers
    return slots if isinstance(slots, dict) else dict(slots.items())


def _same_entries(a: dict, b: dict) -> bool:
    return len(a) == len(b) and all(b.get(k, b) is v for k, v in a.items())


def _put_back(module: nn.Module, saved: dict) -> None:
    """Reset a module's buffer slots to ``saved`` (a forward replaced or added buffers)."""
    slots = module._buffers
    if isinstance(slots, dict):
        slots.clear()
        slots.update(saved)
    else:  # a ScriptModule: the slots are fixed at scripting time, only their values change
        for name, value in saved.items():
            slots[name] = value


class ModelState:
    """What ``rewind`` and ``restore`` put back.

    >>> bn = torch.nn.BatchNorm1d(2)
    >>> state = ModelState(bn)
    >>> _ = bn(torch.randn(4, 2))
    >>> state.restore(); int(bn.num_batches_tracked)
    0
    """

    def __init__(self, model: nn.Module):
        self._modules = walk(model)  # not model.modules(): a deep model may be past the recursion limit
        self._training = [m.training for m in self._modules]
        self._buffers = [dict(_entries(m)) for m in self._modules]
        seen: set[int] = set()
        self._values: list[tuple[torch.Tensor, torch.Tensor]] = []
        with torch.no_grad():
            for buffers in self._buffers:
                for b in buffers.values():
                    if b is not None and id(b) not in seen:
                        seen.add(id(b))
                        self._values.append((b, b.detach().clone()))
        self._cpu_rng = torch.get_rng_state()
        self._cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None

    def rewind(self) -> None:
        """Buffers and RNG back to the snapshot (training flags untouched)."""
        for module, buffers in zip(self._modules, self._buffers):
            if not _same_entries(_entries(module), buffers):  # a forward replaced or added buffers
                _put_back(module, buffers)
        with torch.no_grad():
            for live, saved in self._values:
                live.copy_(saved)
        torch.set_rng_state(self._cpu_rng)
        if self._cuda_rng is not None:
            torch.cuda.set_rng_state_all(self._cuda_rng)

    def restore(self) -> None:
        """Everything back to the snapshot, training flags included."""
        self.rewind()
        for module, flag in zip(self._modules, self._training):
            if module.training is not flag:  # nn.Module.__setattr__ is slow: write only what changed
                module.training = flag
