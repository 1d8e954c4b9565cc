"""The module tree of a result, as a read-only view with inclusive values.

Results store each module's *self* cost (:class:`~flopsight.result.ModuleStats`); the tree
adds each module's submodules to it once, when the view is built, so
``node.forward == node.self.forward + sum(child.forward for child in children)`` holds by
construction and nothing can go stale (the stored records are immutable). One exception:
where several steps (passes) were profiled, each inclusive latency is the median of the
module's own inclusive samples (``latencies``), and medians do not add up.

>>> from flopsight.result.stats import Stats
>>> p = Phases({"forward": Stats(macs=3, calls=1)})
>>> p.forward.macs, p.backward.macs
(3, 0)
>>> p.fowrard
Traceback (most recent call last):
...
AttributeError: no phase 'fowrard' (did you mean 'forward'?); phases are forward, backward, recompute, step
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from typing import Any

from .memory import ModuleMemory
from .records import ModuleStats
from .stats import ZERO_STATS, Stats

__all__ = ["PHASES", "Phases", "ModuleNode", "build_tree"]

#: Phases in the order reports show them.
PHASES = ("forward", "backward", "recompute", "step")


class Phases(Mapping):
    """Read-only phase -> :class:`Stats`; a phase that never ran reads as zeros, a name
    that is not a phase raises (a typo must not read zeros)."""

    __slots__ = ("_phases",)

    def __init__(self, phases: Mapping[str, Stats]):
        self._phases = phases  # not copied: the records it comes from are never written to

    def __getitem__(self, name: str) -> Stats:
        if name not in PHASES:
            raise KeyError(_not_a_phase(name))
        return self._phases.get(name, ZERO_STATS)

    def __getattr__(self, name: str) -> Stats:
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in PHASES:
            raise AttributeError(_not_a_phase(name), name=name, obj=None)
        return self._phases.get(name, ZERO_STATS)

    def __iter__(self) -> Iterator[str]:
        return iter(self._phases)

    def __len__(self) -> int:
        return len(self._phases)

    def __repr__(self) -> str:
        return f"Phases({self._phases!r})"


def _not_a_phase(name: str) -> str:
    close = difflib.get_close_matches(name, PHASES, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"no phase {name!r}{hint}; phases are {', '.join(PHASES)}"


class ModuleNode:
    """One module of the tree: its stored record, self and inclusive costs per phase.

    Attributes of the record (``name``, ``type_name``, ``depth``, ``parent``, ``children``,
    ``params``, ``params_trainable``, ``extra_repr``, ``shared_with``, ``aliases``,
    ``ignored``) read through; a name that is neither raises with the closest one:

    >>> node = build_tree({"": ModuleStats("", "Linear", 0, None, (), 10, 10)})[""]
    >>> node.fowrard
    Traceback (most recent call last):
    ...
    AttributeError: a module has no attribute 'fowrard' (did you mean 'forward'?)
    """

    __slots__ = ("record", "self", "inclusive", "ran", "_activations", "_peak_backward", "_temporaries", "_kernel_time")

    def __init__(self, record: ModuleStats, inclusive: Mapping[str, Stats], ran: bool):
        self.record = record
        self.self = Phases(record.phases)  #: cost of the module's own code, per phase
        self.inclusive = Phases(inclusive)  #: with all its submodules
        #: True if the module or a submodule was called (a ModuleList runs through its children)
        self.ran = ran
        # inclusive once built: its subtree's saved activations, the highest backward peak in it
        self._activations = record.memory.activations if record.memory else 0
        self._peak_backward = record.memory.peak_backward if record.memory else 0
        self._temporaries = record.memory.temporaries if record.memory else 0
        self._kernel_time = record.kernel_time if record.kernels else {}

    def __getattr__(self, name: str) -> Any:  # delegates to the record: any ModuleStats field
        try:
            return getattr(self.record, name)
        except AttributeError:
            # obj=None: the message already suggests, so Python (3.12+) adds no second suggestion
            raise AttributeError(_no_attribute(name), name=name, obj=None) from None

    @property
    def forward(self) -> Stats:
        return self.inclusive.forward

    @property
    def backward(self) -> Stats:
        return self.inclusive.backward

    @property
    def recompute(self) -> Stats:
        """The forward re-run during backward by activation checkpointing."""
        return self.inclusive.recompute

    @property
    def step(self) -> Stats:
        return self.inclusive.step

    @property
    def calls(self) -> int:
        """How many times the module's forward was called."""
        return self.self.forward.calls

    @property
    def memory(self) -> ModuleMemory | None:
        """Its memory (None when memory was not tracked): saved activations of its whole
        forward (submodules included), and its forward and backward peaks."""
        if not self.record.memory:
            return None
        return ModuleMemory(self._activations, self.record.memory.peak, self._peak_backward, self._temporaries)

    @property
    def kernel_time(self) -> dict[str, float]:
        """Per phase, the device seconds of the kernels it and its submodules launched
        (``kernels=True``; empty otherwise): see :mod:`flopsight.result.kernels`. Its own
        kernels, by name, are in ``record.kernels``."""
        return self._kernel_time

    @property
    def params_frozen(self) -> int:
        return self.record.params - self.record.params_trainable

    def __repr__(self) -> str:
        return f"ModuleNode({self.record.name!r}, {self.record.type_name}, forward={self.forward!r})"


def _no_attribute(name: str) -> str:
    names = [n for n in dir(ModuleNode) if not n.startswith("_")] + list(ModuleStats._fields)
    close = difflib.get_close_matches(name, names, n=1)
    return f"a module has no attribute {name!r}" + (f" (did you mean {close[0]!r}?)" if close else "")


def build_tree(modules: Mapping[str, ModuleStats],
               latencies: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, ModuleNode]:
    """A :class:`ModuleNode` per path; ``modules`` must be in pre-order (parents first).
    ``latencies`` (path -> phase -> seconds; :meth:`~.samples.StepSamples.module_medians`)
    are inclusive latencies measured as such, which replace the sums where given."""
    nodes: dict[str, ModuleNode] = {}
    latencies = latencies or {}
    # children come after their parent in pre-order, so a reversed walk is post-order
    for record in reversed(list(modules.values())):
        own = record.phases
        ran = any(s[3] for s in own.values())
        measured = latencies.get(record.name)
        if not record.children:
            nodes[record.name] = ModuleNode(record, _with_latencies(own, measured) if measured else own, ran)
            continue
        acc = {phase: list(s) for phase, s in own.items()}
        activations = record.memory.activations if record.memory else 0
        peak_backward = record.memory.peak_backward if record.memory else 0
        temporaries = record.memory.temporaries if record.memory else 0
        kernel_time = dict(record.kernel_time) if record.kernels else {}
        for child in record.children:
            node = nodes[child]
            ran = ran or node.ran
            activations += node._activations
            peak_backward = max(peak_backward, node._peak_backward)
            temporaries = max(temporaries, node._temporaries)
            for phase, seconds in node._kernel_time.items():
                kernel_time[phase] = kernel_time.get(phase, 0.0) + seconds
            for phase, sub in node.inclusive._phases.items():
                # a child's calls are its own: inclusive calls stay the module's
                mine = acc.get(phase)
                if mine is None:
                    acc[phase] = [sub[0], sub[1], sub[2], 0]
                else:
                    mine[0] += sub[0]
                    mine[1] += sub[1]
                    mine[2] += sub[2]
        inclusive = {p: Stats._make(v) for p, v in acc.items()}  # v: [macs, flops, latency, calls]
        node = nodes[record.name] = ModuleNode(record, _with_latencies(inclusive, measured) if measured else inclusive,
                                               ran)
        node._activations = activations
        node._peak_backward = peak_backward
        node._temporaries = temporaries
        node._kernel_time = kernel_time
    return dict(reversed(list(nodes.items())))


def _with_latencies(phases: Mapping[str, Stats], latencies: Mapping[str, float]) -> dict[str, Stats]:
    """``phases`` with each latency that ``latencies`` gives for its phase."""
    return {p: s._replace(latency=latencies[p]) if p in latencies else s for p, s in phases.items()}
