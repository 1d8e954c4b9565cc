"""The profile as plain, serialisable data.

A :class:`ProfileResult` stores, per module path, a :class:`ModuleStats` record: the *self*
cost of each phase (what ran in the module itself, not in its submodules) as a
:class:`~flopsight.result.stats.Stats`, and its per-operator tallies. Inclusive totals come from the
tree view (:mod:`flopsight.result.tree`), so ``module.forward == module.self.forward +
sum(child.forward for child in children)`` holds by construction. Parameters are the
exception: they are stored inclusive, counting each tensor once, because a weight shared by
two submodules would otherwise be summed twice. So are latencies where several steps
(passes) ran: each module's inclusive latency is the median of its own inclusive samples
(``samples.modules``), and medians do not add up.

>>> import torch, flopsight
>>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
>>> result = flopsight.profile(model, (torch.ones(3, 4),), warm_up=0)
>>> result.total.forward.macs, result.module("0").forward.macs, result.total.params
(144, 96, 58)
>>> flopsight.ProfileResult.from_dict(result.to_dict()) == result
True
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .communication import Collective
from .device_usage import DeviceUsage
from .generation import GenerationStats, generation_stats
from .iteration import IterationStats, iteration_stats
from .kernels import KernelSummary
from .memory import MemoryTotals
from .metadata import Metadata
from .records import ModelCall, ModuleStats
from .reporting import renderers, summary_table
from .samples import StepSamples
from .stats import ZERO_STATS, Stats, seconds_from_file, stats_from_dict
from .timeline import Timeline
from .tree import PHASES, ModuleNode, build_tree

__all__ = ["ModuleStats", "ModelCall", "Coverage", "ProfileResult", "load", "SCHEMA_VERSION"]

#: the JSON schema's version (``docs/schema.md``); 3 added ``bytes_moved``, ``device_usage``
#: and ``coverage``. Version 2 files still load (what they lack reads as not measured).
SCHEMA_VERSION = 3
_READABLE_VERSIONS = (2, 3)


@dataclass(frozen=True)
class Coverage:
    """How much of what ran has a formula: distinct operators seen and with a formula, and
    calls, all and without a formula (those are in ``ProfileResult.unsupported_ops``)."""

    ops_seen: int
    ops_with_formula: int
    calls: int
    calls_without_formula: int

    @property
    def fraction(self) -> float:
        """Share of operator calls that were counted by a formula (1.0 when none ran)."""
        return 1.0 - self.calls_without_formula / self.calls if self.calls else 1.0


@dataclass(frozen=True, eq=False)
class ProfileResult:
    """A whole profile: per-module stats, unsupported ops, wall-clock spans and metadata.

    ``spans`` holds the measured wall-clock seconds of each span: ``forward`` (each
    top-level forward call), ``backward`` (each backward pass), ``step`` (each
    ``optimizer.step()``) and ``iteration`` (the whole profiled span), the profiler's own
    overhead subtracted. ``calls`` has one entry per top-level forward call, in order;
    ``root_calls`` are those of the model itself. ``modules`` is read-only (the tree is built
    from it once); a changed profile is a new one (``dataclasses.replace``).
    """

    modules: Mapping[str, ModuleStats]
    unsupported_ops: dict[str, int] = field(default_factory=dict)
    metadata: Metadata = field(default_factory=Metadata)
    spans: dict[str, list[float]] = field(default_factory=dict)
    calls: list[ModelCall] = field(default_factory=list)
    #: what :meth:`collectives` returns, unfiltered
    comms: tuple[Collective, ...] = ()
    #: on rank 0 of a torch.distributed run: every rank's result (index = rank; None for a
    #: rank that sent none in time); empty in one process and on the other ranks
    ranks: tuple[ProfileResult | None, ...] = ()
    #: on rank 0: why a rank has no usable result, by rank: ``"failed: <what raised, where>"``
    #: (it raised inside its profiled span) or ``"not profiling"`` (it never started a profile)
    rank_notes: dict[int, str] = field(default_factory=dict)
    #: memory of the whole span (None when memory was not tracked): see :attr:`memory`
    memory: MemoryTotals | None = None
    #: a CUDA run's GPU utilisation (NVML) and allocator peak; None elsewhere
    device_usage: DeviceUsage | None = None
    #: when each module call, span and collective ran (:mod:`flopsight.result.timeline`); None in
    #: files saved before it was recorded
    timeline: Timeline | None = None
    #: every time figure step by step (or pass by pass) where several were profiled, with
    #: ``first_step`` (:mod:`flopsight.result.samples`); the result's latencies are medians.
    #: None in files saved before it was recorded
    samples: StepSamples | None = None
    #: what ``kernels=True`` measured over the span (:mod:`flopsight.result.kernels`): the
    #: kernels' total and those of no module; each module's are in ``modules[path].kernels``.
    #: None when kernels were not recorded
    kernels: KernelSummary | None = None

    # what __post_init__ sets: the module tree and alias path -> module path; not fields (declared
    # for type checkers only: at run time dataclasses.fields() and replace() do not see them)
    if TYPE_CHECKING:
        _tree: dict[str, ModuleNode] = field(init=False, repr=False)
        _aliases: dict[str, str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if "" not in self.modules:
            raise ValueError("modules: a profile needs a root module stored under the path ''")
        if not isinstance(self.metadata, Metadata):
            raise TypeError(f"metadata: expected a flopsight Metadata, got {type(self.metadata).__name__}")
        if not isinstance(self.modules, MappingProxyType):  # read-only: the tree cannot go stale
            object.__setattr__(self, "modules", MappingProxyType(dict(self.modules)))
        aliases = {a: s.name for s in self.modules.values() if s.aliases for a in _alias_paths(s)}
        object.__setattr__(self, "_tree", _tree(self.modules, self.samples))
        object.__setattr__(self, "_aliases", aliases)

    def updated(self, **changes: Any) -> ProfileResult:
        """A copy with ``changes`` to fields other than ``modules``, sharing this one's module
        tree (``dataclasses.replace`` would build it again: a second pass over every module).

        >>> import torch, flopsight
        >>> r = flopsight.profile(torch.nn.Linear(4, 2), torch.ones(1, 4))
        >>> r.updated(rank_notes={1: "not profiling"}).rank_notes, r.rank_notes
        ({1: 'not profiling'}, {})
        """
        if "modules" in changes:
            raise ValueError("modules: a profile with other modules is a new one; use dataclasses.replace")
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise TypeError(f"changes: ProfileResult has no field {sorted(unknown)[0]!r}")
        if not isinstance(changes.get("metadata", self.metadata), Metadata):
            raise TypeError(f"metadata: expected a flopsight Metadata, got {type(changes['metadata']).__name__}")
        new = copy.copy(self)  # its tree and aliases come along: they depend on the modules (and samples) only
        for name, value in changes.items():
            object.__setattr__(new, name, value)
        if "samples" in changes and _medians(changes["samples"]) != _medians(self.samples):
            object.__setattr__(new, "_tree", _tree(new.modules, new.samples))  # its latencies are the samples'
        return new

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProfileResult):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    # -- tree -----------------------------------------------------------------------
    @property
    def root_calls(self) -> list[ModelCall]:
        """The forward calls of the model itself, in order."""
        return [c for c in self.calls if c.path == ""]

    @property
    def total(self) -> ModuleNode:
        """The root module: totals of the whole model."""
        return self._tree[""]

    def module(self, name: str) -> ModuleNode:
        """The module at path ``name`` (``""`` is the root; an alias path reads its module)."""
        name = self._aliases.get(name, name)
        try:
            return self._tree[name]
        except KeyError:
            close = difflib.get_close_matches(name, list(self.modules), n=3)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise KeyError(f"name: no module at path {name!r} in this profile{hint}") from None

    def walk(self, max_depth: int | None = None) -> Iterator[ModuleNode]:
        """Modules in pre-order (parents before children), optionally down to ``max_depth``."""
        for node in self._tree.values():
            if max_depth is None or node.record.depth <= max_depth:
                yield node

    @property
    def phases(self) -> list[str]:
        """The phases that were measured, in report order."""
        present = {p for s in self.modules.values() for p in s.phases}
        return [p for p in PHASES if p in present]

    def ops(self, phase: str = "forward") -> dict[str, Stats]:
        """Operator name -> total over the whole model for one phase, most FLOPs first."""
        totals: dict[str, Stats] = {}
        for stats in self.modules.values():
            for name, op in stats.ops.get(phase, {}).items():
                totals[name] = totals.get(name, ZERO_STATS) + op
        return dict(sorted(totals.items(), key=lambda kv: (-kv[1].flops, -kv[1].latency, kv[0])))

    @property
    def missing_ranks(self) -> list[int]:
        """Ranks whose result did not arrive in time, for no reason they gave (rank 0 of a
        torch.distributed run); see :attr:`rank_notes` for the ranks that failed or never profiled."""
        return [i for i, r in enumerate(self.ranks) if r is None and i not in self.rank_notes]

    def collectives(self, phase: str | None = None) -> list[Collective]:
        """The collectives this rank issued (one record per module, phase, kind and group
        size; see :mod:`flopsight.result.communication`), optionally of one phase only."""
        if phase is not None and phase not in PHASES:
            raise ValueError(f"phase: expected one of {', '.join(PHASES)} or None, got {phase!r}")
        return [c for c in self.comms if phase is None or c.phase == phase]

    @property
    def coverage(self) -> Coverage:
        """Operators seen, operators with a formula, and the calls without one."""
        calls: dict[str, int] = {}
        for stats in self.modules.values():
            for ops in stats.ops.values():
                for name, op in ops.items():
                    calls[name] = calls.get(name, 0) + op.calls
        unsupported = self.unsupported_ops
        without = sum(unsupported.values())
        seen = set(calls) | set(unsupported)
        return Coverage(len(seen), len(seen - set(unsupported)), max(sum(calls.values()), without), without)

    # -- training and generation views (derived) --------------------------------------
    def phase_total(self, phase: str) -> Stats:
        """Model-wide MACs/FLOPs of ``phase``, with its wall-clock latency and span count
        (for ``recompute``, which has no span of its own: its modules' time)."""
        inc = self.total.inclusive[phase]
        walls = self.spans.get(phase)
        if walls is None:
            return inc
        # several steps: the median of the phase's wall time over them, as for every latency
        median = self.samples.median(phase) if self.samples is not None and self.samples.count > 1 else None
        return Stats(inc.macs, inc.flops, sum(walls) if median is None else median, len(walls))

    @property
    def step(self) -> Stats:
        """The optimizer step(s): FLOPs counted like any ops, latency from the step hooks."""
        return self.phase_total("step")

    @property
    def iteration(self) -> IterationStats:
        """The whole profiled span: per-phase figures, samples/second, FLOPS."""
        return iteration_stats(self)

    @property
    def generation(self) -> GenerationStats | None:
        """Prefill and decode figures of a generate() profile (None for other profiles)."""
        return generation_stats(self)

    # -- serialisation ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (what ``save`` writes and ``from_dict`` reads)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "metadata": self.metadata.to_dict(),
            "unsupported_ops": dict(self.unsupported_ops),
            "spans": {k: list(v) for k, v in self.spans.items()},
            "calls": [{"path": c.path, "stats": c.stats._asdict(), "batch_size": c.batch_size} for c in self.calls],
            "modules": [s.to_dict() for s in self.modules.values()],
            "collectives": [c.to_dict() for c in self.comms],
            "ranks": [r.to_dict() if r is not None else None for r in self.ranks],
            "rank_notes": {str(rank): note for rank, note in sorted(self.rank_notes.items())},
            "memory": self.memory.to_dict() if self.memory is not None else None,
            "device_usage": self.device_usage.to_dict() if self.device_usage is not None else None,
            # derived from the modules' ops (read back from them, not from here): for readers
            # of the file that do not recompute it
            "coverage": dataclasses.asdict(self.coverage),
            "timeline": self.timeline.to_dict(list(self.modules)) if self.timeline is not None else None,
            "samples": self.samples.to_dict() if self.samples is not None else None,
            "kernels": self.kernels.to_dict() if self.kernels is not None else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProfileResult:
        version = data.get("schema_version")
        if version not in _READABLE_VERSIONS:
            raise ValueError(f"data: unsupported flopsight schema_version {version!r} "
                             f"(expected one of {', '.join(map(str, _READABLE_VERSIONS))})")
        modules = {d["name"]: ModuleStats.from_dict(d) for d in data["modules"]}
        return cls(
            modules,
            dict(data.get("unsupported_ops", {})),
            Metadata.from_dict(data.get("metadata", {})),
            spans={k: seconds_from_file(v) for k, v in data.get("spans", {}).items()},
            calls=[ModelCall(c["path"], stats_from_dict(c["stats"]), c.get("batch_size"))
                   for c in data.get("calls", [])],
            comms=tuple(Collective.from_dict(c) for c in data.get("collectives", [])),
            ranks=tuple(cls.from_dict(r) if r is not None else None for r in data.get("ranks", [])),
            rank_notes={int(rank): str(note) for rank, note in (data.get("rank_notes") or {}).items()},
            memory=MemoryTotals.from_dict(data["memory"]) if data.get("memory") else None,
            device_usage=DeviceUsage.from_dict(data["device_usage"]) if data.get("device_usage") else None,
            timeline=Timeline.from_dict(data["timeline"], list(modules)) if data.get("timeline") else None,
            samples=StepSamples.from_dict(data["samples"]) if data.get("samples") else None,
            kernels=KernelSummary.from_dict(data["kernels"]) if data.get("kernels") else None,
        )

    # -- short forms (a console, a notebook) ------------------------------------------
    def __repr__(self) -> str:
        """One line, whatever the model's size: its class, params, MACs, FLOPs, latency and
        coverage (``summary()`` for the layers, ``render()`` for the whole report)."""
        return summary_table().result_repr(self)

    def summary(self, depth: int | None = None, *, max_rows: int = 40, sort: str | None = None,
                collapse: bool = True) -> Any:
        """A one-screen per-layer table (as torchinfo's ``summary`` and fvcore's
        ``flop_count_table`` give): params, forward MACs, FLOPs, latency and share of FLOPs of
        each module, its submodules included (and its measured backward's FLOPs and latency in a
        training profile).

        It is returned, not printed (a :class:`flopsight.renderers.summary_table.ModelSummary`):
        a console or a notebook shows it (as HTML), a script prints it
        (``print(result.summary())``); ``.rows`` holds its figures.

        Args:
            depth: the deepest modules shown (the root is 0); None: the deepest depth that fits
                in ``max_rows``, or every depth when sorting.
            max_rows: at most this many rows; a last line says how many more there were.
            sort: ``"flops"``, ``"macs"``, ``"params"`` or ``"latency"``: the modules below the
                root ranked by that figure, largest first, named by their paths; None: tree order.
            collapse: a run of identical siblings (``layer.0`` to ``layer.11``) as one row,
                ``12 x BertLayer``, its figures summed.

        >>> import torch, flopsight
        >>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        >>> table = flopsight.profile(model, torch.ones(3, 4), clock=flopsight.FakeClock()).summary(sort="macs")
        >>> [(row.path, row.macs) for row in table.rows]
        [('', 144), ('0', 96), ('2', 48), ('1', 0)]
        """
        return summary_table().summary(self, depth, max_rows=max_rows, sort=sort, collapse=collapse)

    def _repr_html_(self) -> str:
        """What a notebook shows for the result: the summary table, as HTML."""
        return summary_table().result_html(self)

    def render(self, fmt: str = "text", **options: Any) -> str:
        """The profile as ``fmt``: ``"text"`` (DeepSpeed's report), ``"json"``, ``"csv"``,
        ``"md"``, ``"html"`` or ``"trace"`` (Chrome trace); ``options`` are the report's
        (see :mod:`flopsight.renderers`)."""
        return renderers().render(self, fmt, **options)  # a thin call: the data model imports no renderer

    def save(self, path: str | os.PathLike, fmt: str | None = None, *, force: bool = False, **options: Any) -> None:
        """Write the profile to ``path`` (its folder created when missing) in ``fmt``, by
        default the format its extension names (``.json``, ``.csv``, ``.md``, ``.html``,
        ``.trace.json``; the text report for ``.txt``, ``.log``, ``.out`` or no ending; any
        other ending is an error that lists these). The write is atomic; an existing file
        that is not a report is refused unless ``force``. :func:`flopsight.load` reads a
        ``.json`` back."""
        renderers().write(self, path, fmt, force=force, **options)


def _medians(samples: StepSamples | None) -> dict[str, dict[str, float]]:
    return samples.module_medians() if samples is not None else {}


def _tree(modules: Mapping[str, ModuleStats], samples: StepSamples | None) -> dict[str, ModuleNode]:
    """The module tree; where several steps ran, each inclusive latency is the median of the
    module's inclusive samples (``docs/conventions/timing.md``), not a sum of medians."""
    return build_tree(modules, _medians(samples))


def _alias_paths(stats: ModuleStats) -> list[str]:
    prefix = f"{stats.parent}." if stats.parent else ""
    return [prefix + a for a in stats.aliases]


def load(path: str | os.PathLike) -> ProfileResult:
    """Read a profile written by :meth:`ProfileResult.save` as JSON. A file that is not one
    is a ValueError naming the file and what is wrong with it (truncated, not text, not a
    profile, from a newer flopsight).

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
    ...     _ = f.write("[1, 2, 3]")
    >>> load(f.name)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: ....json: not a flopsight profile (a JSON list, not an object with "schema_version" and "modules")
    """
    name = os.fspath(path)
    with open(name, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{name}: not a flopsight profile (binary data, not JSON text)") from None
    if not text.strip():
        raise ValueError(f"{name}: not a flopsight profile (the file is empty)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        # cut short: the parser ran out of text (mid-string, or where a value or bracket was due)
        at_end = e.pos >= len(text.rstrip()) - 1 or e.msg.startswith("Unterminated")
        what = "truncated: the JSON ends early" if at_end else f"not valid JSON ({e.msg} at line {e.lineno})"
        raise ValueError(f"{name}: not a flopsight profile ({what})") from None
    if not isinstance(data, dict) or "schema_version" not in data or "modules" not in data:
        kinds: dict[type, str] = {list: "a JSON list", str: "a JSON string"}
        kind = kinds.get(type(data), "JSON without them" if isinstance(data, dict) else f"a JSON {type(data).__name__}")
        raise ValueError(f'{name}: not a flopsight profile ({kind}, not an object with "schema_version" and "modules")')
    version = data.get("schema_version")
    if isinstance(version, int) and version > SCHEMA_VERSION:
        writer = (data.get("metadata") or {}).get("flopsight_version") or "a newer flopsight"
        raise ValueError(f"{name}: written by flopsight {writer}, schema {version}; this flopsight reads schema "
                         f"{SCHEMA_VERSION} and older: upgrade flopsight to read it")
    try:
        return ProfileResult.from_dict(data)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{name}: not a flopsight profile that this flopsight can read ({e})") from None
