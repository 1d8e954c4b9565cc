"""The profile as plain, serialisable data.

A :class:`ProfileResult` holds, per module path, the *self* cost of each phase (what ran
in the module itself, not in its submodules) and derives inclusive totals from them, so
``module.forward == module.self.forward + sum(child.forward for child in children)``
holds by construction. Parameters are the exception: they are stored inclusive, counting
each tensor once, because a weight shared by two submodules would otherwise be summed
twice.

>>> import torch, flopsight
>>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
>>> result = flopsight.profile(model, (torch.ones(3, 4),), warm_up=0)
>>> result.total.forward.macs, result.module("0").forward.macs, result.total.params
(144, 96, 58)
>>> flopsight.ProfileResult.from_dict(result.to_dict()) == result
True
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:  # the derived views live in analysis/, which imports this module
    from .analysis.training import GenerationStats, IterationStats

__all__ = ["PhaseStats", "OpStats", "CallStats", "PhaseSet", "ModuleStats", "ProfileResult", "load", "SCHEMA_VERSION"]

SCHEMA_VERSION = 1

#: Phases in the order reports show them.
PHASES = ("forward", "backward", "recompute", "step")


@dataclass
class PhaseStats:
    """Cost of one module in one phase: MACs, FLOPs, latency (seconds) and call count."""

    macs: int = 0
    flops: int = 0
    latency: float = 0.0
    calls: int = 0

    @property
    def flops_per_second(self) -> float:
        """Achieved FLOP/s (0 when no time was measured)."""
        return self.flops / self.latency if self.latency > 0 else 0.0


@dataclass
class OpStats:
    """One operator's tally: calls, MACs, FLOPs and the time spent executing it."""

    name: str
    calls: int = 0
    macs: int = 0
    flops: int = 0
    latency: float = 0.0


@dataclass
class CallStats:
    """One forward call of the model itself (generate() makes one per token)."""

    macs: int = 0
    flops: int = 0
    latency: float = 0.0
    batch_size: int | None = None


class PhaseSet:
    """Read-only phase -> :class:`PhaseStats` view; a phase that never ran reads as zeros.

    >>> PhaseSet({"forward": PhaseStats(macs=3)}).forward.macs, PhaseSet({}).backward.macs
    (3, 0)
    """

    __slots__ = ("_phases",)

    def __init__(self, phases: dict[str, PhaseStats]):
        self._phases = phases

    def __getattr__(self, name: str) -> PhaseStats:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._phases.get(name, PhaseStats())

    def __getitem__(self, name: str) -> PhaseStats:
        return self._phases.get(name, PhaseStats())

    def __iter__(self) -> Iterator[str]:
        return iter(self._phases)

    def __repr__(self) -> str:
        return f"PhaseSet({self._phases!r})"


@dataclass
class ModuleStats:
    """Everything measured for one module path.

    ``name`` is the state_dict-style path (``""`` for the root). ``self_phases`` and
    ``self_ops`` are stored; ``.forward`` and the other phase properties are inclusive
    totals derived by the owning :class:`ProfileResult`.
    """

    name: str
    type_name: str
    depth: int
    parent: str | None
    children: list[str]
    params: int
    params_trainable: int
    extra_repr: str = ""
    shared_with: list[str] = field(default_factory=list)
    ignored: bool = False
    self_phases: dict[str, PhaseStats] = field(default_factory=dict)
    self_ops: dict[str, dict[str, OpStats]] = field(default_factory=dict)
    _inclusive: dict[str, PhaseStats] = field(default_factory=dict, compare=False, repr=False)
    _ran: bool = field(default=False, compare=False, repr=False)

    @property
    def self(self) -> PhaseSet:
        """Self cost per phase (excluding submodules)."""
        return PhaseSet(self.self_phases)

    @property
    def inclusive(self) -> PhaseSet:
        """Inclusive cost per phase (this module and all its submodules)."""
        return PhaseSet(self._inclusive)

    @property
    def forward(self) -> PhaseStats:
        return self.inclusive.forward

    @property
    def backward(self) -> PhaseStats:
        return self.inclusive.backward

    @property
    def recompute(self) -> PhaseStats:
        """The forward re-run during backward by activation checkpointing."""
        return self.inclusive.recompute

    @property
    def calls(self) -> int:
        """How many times the module's forward was called."""
        return self.self.forward.calls

    @property
    def params_frozen(self) -> int:
        return self.params - self.params_trainable

    @property
    def ran(self) -> bool:
        """True if the module or any submodule was called (containers like ModuleList are
        never called themselves but run through their children)."""
        return self._ran


@dataclass
class ProfileResult:
    """A whole profile: per-module stats, unsupported ops, wall-clock spans and metadata.

    ``spans`` holds the measured wall-clock seconds of each span: ``forward`` (each
    top-level forward call), ``backward`` (each backward pass), ``step`` (each
    ``optimizer.step()``) and ``iteration`` (the whole profiled span), the profiler's own
    overhead subtracted. ``root_calls`` has one entry per forward call of the model.
    """

    modules: dict[str, ModuleStats]
    unsupported_ops: dict[str, int] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    spans: dict[str, list[float]] = field(default_factory=dict)
    root_calls: list[CallStats] = field(default_factory=list)

    def __post_init__(self) -> None:
        if "" not in self.modules:
            raise ValueError("modules: a profile needs a root module stored under the path ''")
        self._derive_inclusive()

    # -- tree -----------------------------------------------------------------------
    def _derive_inclusive(self) -> None:
        # children come after their parent in pre-order, so a reversed walk is post-order
        for stats in reversed(list(self.modules.values())):
            inclusive: dict[str, PhaseStats] = {}
            ran = False
            for phase, own in stats.self_phases.items():
                inclusive[phase] = PhaseStats(own.macs, own.flops, own.latency, own.calls)
                ran = ran or own.calls > 0
            for child in stats.children:
                ran = ran or self.modules[child]._ran
                for phase, sub in self.modules[child]._inclusive.items():
                    acc = inclusive.setdefault(phase, PhaseStats())
                    acc.macs += sub.macs
                    acc.flops += sub.flops
                    acc.latency += sub.latency
            stats._inclusive = inclusive
            stats._ran = ran

    @property
    def total(self) -> ModuleStats:
        """The root module's stats: totals of the whole model."""
        return self.modules[""]

    def module(self, name: str) -> ModuleStats:
        """Stats of the module at path ``name`` (``""`` is the root)."""
        try:
            return self.modules[name]
        except KeyError:
            close = difflib.get_close_matches(name, list(self.modules), n=3)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise KeyError(f"name: no module at path {name!r} in this profile{hint}") from None

    def walk(self, max_depth: int | None = None) -> Iterator[ModuleStats]:
        """Modules in pre-order (parents before children), optionally down to ``max_depth``."""
        for stats in self.modules.values():
            if max_depth is None or stats.depth <= max_depth:
                yield stats

    @property
    def phases(self) -> list[str]:
        """The phases that were measured, in report order."""
        present = {p for s in self.modules.values() for p in s.self_phases}
        return [p for p in PHASES if p in present] + sorted(present - set(PHASES))

    def ops(self, phase: str = "forward") -> list[OpStats]:
        """Per-operator totals over the whole model for one phase, most FLOPs first."""
        totals: dict[str, OpStats] = {}
        for stats in self.modules.values():
            for name, op in stats.self_ops.get(phase, {}).items():
                acc = totals.setdefault(name, OpStats(name))
                acc.calls += op.calls
                acc.macs += op.macs
                acc.flops += op.flops
                acc.latency += op.latency
        return sorted(totals.values(), key=lambda o: (-o.flops, -o.latency, o.name))

    # -- training and generation views (derived) --------------------------------------
    def phase_total(self, phase: str) -> PhaseStats:
        """Model-wide MACs/FLOPs of ``phase``, with its wall-clock latency and span count
        (for ``recompute``, which has no span of its own: its modules' time)."""
        inc = self.total.inclusive[phase]
        walls = self.spans.get(phase)
        latency, calls = (sum(walls), len(walls)) if walls is not None else (inc.latency, inc.calls)
        return PhaseStats(inc.macs, inc.flops, latency, calls)

    @property
    def step(self) -> PhaseStats:
        """The optimizer step(s): FLOPs counted like any ops, latency from the step hooks."""
        return self.phase_total("step")

    @property
    def iteration(self) -> "IterationStats":
        """The whole profiled span: per-phase figures, samples/second, FLOPS."""
        from .analysis.training import iteration_stats

        return iteration_stats(self)

    @property
    def generation(self) -> "GenerationStats | None":
        """Prefill and decode figures of a generate() profile (None for other profiles)."""
        from .analysis.training import generation_stats

        return generation_stats(self)

    # -- serialisation ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (what ``save`` writes and ``from_dict`` reads)."""
        modules = []
        for s in self.modules.values():
            d = asdict(s)
            d.pop("_inclusive")
            d.pop("_ran")
            d["self_ops"] = {ph: [asdict(o) for o in ops.values()] for ph, ops in s.self_ops.items()}
            modules.append(d)
        return {
            "schema_version": SCHEMA_VERSION,
            "metadata": self.metadata,
            "unsupported_ops": dict(self.unsupported_ops),
            "spans": {k: list(v) for k, v in self.spans.items()},
            "root_calls": [asdict(c) for c in self.root_calls],
            "modules": modules,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ProfileResult":
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(f"data: unsupported flopsight schema_version {version!r} (expected {SCHEMA_VERSION})")
        modules = {}
        for d in data["modules"]:
            d = dict(d)
            d["self_phases"] = {ph: PhaseStats(**v) for ph, v in d["self_phases"].items()}
            d["self_ops"] = {ph: {o["name"]: OpStats(**o) for o in ops} for ph, ops in d["self_ops"].items()}
            modules[d["name"]] = ModuleStats(**d)
        return cls(
            modules,
            dict(data.get("unsupported_ops", {})),
            dict(data.get("metadata", {})),
            spans={k: list(v) for k, v in data.get("spans", {}).items()},
            root_calls=[CallStats(**c) for c in data.get("root_calls", [])],
        )

    def save(self, path: str | os.PathLike) -> None:
        """Write the profile as JSON to ``path``."""
        _check_parent_dir(path, "path")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, indent=1)
            f.write("\n")


def load(path: str | os.PathLike) -> ProfileResult:
    """Read a profile written by :meth:`ProfileResult.save`."""
    with open(path, encoding="utf-8") as f:
        return ProfileResult.from_dict(json.load(f))


def _check_parent_dir(path: str | os.PathLike, arg: str) -> None:
    parent = os.path.dirname(os.path.abspath(os.fspath(path)))
    if not os.path.isdir(parent):
        raise FileNotFoundError(f"{arg}: directory {parent!r} does not exist")
