"""The report model: what a report shows, as typed, immutable sections of numbers and records.

A :class:`Report` is made of a result and one :class:`~.report_options.ReportOptions`; its
sections, in the order the text report prints them: the
summary (:class:`~.report_figures.SummaryFigures`: training, generation, anatomy,
communication, coverage), ranks, memory, device usage, efficiency and the transformer
check, the aggregated per-depth profile, the module tree with each line's figures, the
operator tables; and what Markdown (per-phase totals, top modules and operators) and CSV
(a row per module and phase, per operator) tabulate. Renderers word and lay out these
records; they compute nothing.

>>> import torch, flopsight
>>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
>>> report = Report(flopsight.profile(model, torch.ones(1, 4), clock=flopsight.FakeClock()))
>>> report.summary.fwd.macs, [(e.level, e.key, e.type_name) for e in report.tree.entries if isinstance(e, TreeEntry)]
(32, [(0, None, 'Sequential'), (1, '0', 'Linear'), (1, '1', 'ReLU')])
>>> [d.macs for d in report.aggregated.forward]
[[('Sequential', 32)], [('Linear', 32)]]
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property

from ..result.communication import Collective
from ..result.device_usage import DeviceUsage
from ..result.iteration import IterationStats
from ..result.memory import Buffer, MemoryTotals, ModuleMemory
from ..result.profile_result import ProfileResult
from ..result.stats import Stats
from .added_work import AddedWork, added_work
from .aggregate import (
    DepthSummary,
    OpRow,
    by_depth_and_type,
    has_bytes,
    inclusive_bytes,
    inclusive_op_time,
    inclusive_ops,
    merge_ops,
    model_ops,
    top_ops,
)
from .busy import Busy, busy
from .collapse import View, child_views, root_view, signatures, subtree_sizes, walk_views
from .derived import derived
from .efficiency import Efficiency, efficiency
from .experts import ExpertLayer, expert_figures
from .job import JobFigures, job_figures
from .kernel_profile import DeviceBusy, KernelProfile, device_busy, kernel_profile
from .noise import NoiseFigures, noise_figures
from .pipeline import PipelineFigures, pipeline_figures
from .ranks import RankFigures, rank_figures
from .report_figures import (
    ModuleFigures,
    SummaryFigures,
    combined_figures,
    is_training,
    module_figures,
    share,
    summary_figures,
)
from .report_options import ReportOptions
from .syncs import HostSync, host_syncs
from .transformer_estimate import TransformerCheck, transformer_check

__all__ = [
    "Report",
    "EfficiencySection",
    "AggregatedProfile",
    "TreeEntry",
    "TreeAlias",
    "TreeEnd",
    "ModuleTree",
    "OperatorShare",
    "OperatorTable",
    "OperatorEntry",
    "OperatorProfile",
    "ops_timed_apart",
    "PhaseTable",
    "RankedModule",
    "ModuleRow",
    "OperatorRow",
    "efficiency_section",
    "aggregated_profile",
    "module_tree",
    "operator_profile",
    "phase_table",
    "top_modules",
    "module_rows",
    "operator_rows",
]


# -- efficiency ---------------------------------------------------------------------------
@dataclass(frozen=True)
class EfficiencySection:
    """The efficiency figures against the peak used (:class:`~.efficiency.Efficiency`).
    ``explain_missing_peak``: without a peak, whether to say why (on an accelerator the
    table does not know, or for a peak given that has no figure for the dtype; on the CPU
    and the meta device no peak is the rule, not news)."""

    efficiency: Efficiency
    explain_missing_peak: bool


def efficiency_section(result: ProfileResult, peak=None, dtype: str | None = None) -> EfficiencySection:
    """The efficiency section against ``peak`` (as :func:`~.efficiency.efficiency` takes it)."""
    return EfficiencySection(efficiency(result, peak, dtype=dtype),
                             result.metadata.device_type not in ("cpu", "meta") or peak is not None)


# -- aggregated profile ---------------------------------------------------------------------
@dataclass(frozen=True)
class AggregatedProfile:
    """The top ``top_modules`` module types per depth: by params, forward MACs and latency,
    and for a training report (``backward`` not None) by backward MACs and latency, depth by
    depth beside ``forward``."""

    top_modules: int
    forward: tuple[DepthSummary, ...]
    backward: tuple[DepthSummary, ...] | None


def aggregated_profile(result: ProfileResult, options: ReportOptions) -> AggregatedProfile:
    depth, top = options.module_depth, options.top_modules
    forward = tuple(by_depth_and_type(result, depth=depth, top=top))
    backward = tuple(by_depth_and_type(result, depth=depth, top=top, phase="backward")) if is_training(result) else None
    return AggregatedProfile(top, forward, backward)


def one_micro_batch(result: ProfileResult, micro_batches: int) -> ProfileResult:
    """``result`` with each module's forward, backward and recompute (and their ops) over
    ``micro_batches``: counts exactly where they divide, latencies the mean.

    >>> import torch, flopsight
    >>> r = flopsight.profile(torch.nn.Linear(4, 2), torch.ones(1, 4), clock=flopsight.FakeClock())
    >>> one_micro_batch(r, 2).total.forward.macs  # 8 MACs over 2
    4
    """
    def each(s: Stats) -> Stats:
        macs, flops, latency = (v // micro_batches if isinstance(v, int) and v % micro_batches == 0
                                else v / micro_batches for v in s[:3])
        # a count that does not divide stays fractional (a mean), which Stats' int fields do not say
        return Stats(macs, flops, latency, s.calls)  # type: ignore[arg-type]

    per = ("forward", "backward", "recompute")
    modules = {path: m._replace(phases={ph: each(s) if ph in per else s for ph, s in m.phases.items()},
                                ops={ph: {n: each(s) for n, s in ops.items()} if ph in per else ops
                                     for ph, ops in m.ops.items()})
               for path, m in result.modules.items()}
    samples = result.samples
    if samples is not None and samples.modules:  # module latencies are their samples' medians: those too
        samples = dataclasses.replace(samples, modules={
            path: {ph: tuple(v / micro_batches for v in values) if ph in per else values
                   for ph, values in phases.items()}
            for path, phases in samples.modules.items()})
    return dataclasses.replace(result, modules=modules, samples=samples)


# -- the module tree ----------------------------------------------------------------------------
@dataclass(frozen=True)
class TreeEntry:
    """One entry of the detailed profile, nested ``level`` deep (the root 0), named ``key``
    under its parent (None for the root): a module, or with ``collapse`` a run of ``count``
    identical siblings, or a module inside such a run standing for every copy's.

    ``figures`` are the module's own; for a run or inside one, one copy's, its latency the
    mean over the copies (``mean``); a run also has every copy's summed (``all_copies``).
    ``hidden`` counts the submodules the depth limit leaves out; ``opened``: its children
    follow, closed by a :class:`TreeEnd`."""

    level: int
    key: str | None
    type_name: str
    count: int
    figures: ModuleFigures
    mean: bool
    all_copies: ModuleFigures | None
    ignored: bool
    ran: bool
    hidden: int
    extra_repr: str
    opened: bool


@dataclass(frozen=True)
class TreeAlias:
    """``self.b = self.a``: the same module under a second name, shown once (``key``'s)."""

    level: int
    alias: str
    key: str


@dataclass(frozen=True)
class TreeEnd:
    """Closes the opened :class:`TreeEntry` at ``level``."""

    level: int


@dataclass(frozen=True)
class ModuleTree:
    """The detailed profile: the model as ``nn.Module.__repr__`` nests it, pre-order.
    ``timing`` is how latencies were taken (the result's timing method and clock, where
    recorded); ``training`` adds the backward figures to every entry."""

    training: bool
    collapse: bool
    detail_depth: int | None
    timing: tuple[str, ...]
    entries: tuple[TreeEntry | TreeAlias | TreeEnd, ...]
    #: some module holds parameters tied to modules outside it (its params are marked)
    shared_params: bool = False


def _entry(result: ProfileResult, view: View, level: int, key: str | None, opened: bool, hidden: int) -> TreeEntry:
    total, node = result.total, view.node
    all_copies = None
    if len(view.nodes) == 1:
        figures, mean = module_figures(node, total), False
    else:
        figures, mean = combined_figures(view.nodes, total, per=len(view.nodes)), True
        if view.count > 1:
            all_copies = combined_figures(view.nodes, total, per=view.per)
    return TreeEntry(level, key, node.type_name, view.count, figures, mean, all_copies, node.ignored, node.ran,
                     hidden, node.extra_repr, opened)


def module_tree(result: ProfileResult, options: ReportOptions) -> ModuleTree:
    """Walked with an explicit stack: linear in the number of modules whatever the model's
    depth (recursion would stop at Python's limit)."""
    collapse, detail_depth = options.collapse, options.detail_depth
    sigs = signatures(result) if collapse else None
    sizes = subtree_sizes(result) if detail_depth is not None else None
    entries: list[TreeEntry | TreeAlias | TreeEnd] = []
    stack: list = [(root_view(result), 0, None)]  # (view, level, key) or a finished record
    while stack:
        item = stack.pop()
        if not isinstance(item, tuple):
            entries.append(item)
            continue
        view, level, key = item
        node = view.node
        opened = bool(node.children) and (detail_depth is None or node.depth < detail_depth)
        hidden = sizes[node.name] if sizes is not None and not opened else 0
        entries.append(_entry(result, view, level, key, opened, hidden))
        if not opened:
            continue
        todo: list = []
        for child in child_views(result, view, sigs, collapse=collapse):
            todo.append((child, level + 1, child.key))
            todo.extend(TreeAlias(level + 1, alias, child.key) for alias in child.node.aliases)
        todo.append(TreeEnd(level))
        stack.extend(reversed(todo))
    timing = result.metadata.timing
    shared = any(isinstance(e, TreeEntry) and e.figures.params_shared for e in entries)
    return ModuleTree(is_training(result), collapse, detail_depth,
                      tuple(str(v) for v in (timing.method, timing.clock) if v), tuple(entries), shared)


# -- operators ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class OperatorShare:
    """One operator of a table and its shares (percent) of the entry's FLOPs and latency."""

    row: OpRow
    flops_share: float
    latency_share: float


@dataclass(frozen=True)
class OperatorTable:
    """One entry's operators in one ``phase``: how many ran, the top ones by FLOPs and by
    latency (those with none of it left out)."""

    phase: str
    operators: int
    by_flops: tuple[OperatorShare, ...]
    by_latency: tuple[OperatorShare, ...]


@dataclass(frozen=True)
class OperatorEntry:
    """A module (``path`` ``""``: the whole model) with its submodules' operators; with
    ``collapse`` a run of ``count`` siblings or, inside one, ``copies`` corresponding modules,
    summed. Only entries that ran an operator are listed."""

    path: str
    type_name: str
    count: int
    copies: int
    tables: tuple[OperatorTable, ...]


@dataclass(frozen=True)
class OperatorProfile:
    """The operator tables: ``top`` operators per entry and phase, entries down to ``depth``
    (None: all). ``longest_name`` is the length of the model's longest operator name.
    ``counting_pass``: the operators were timed in a counting pass run apart from the modules'
    timed calls (``metadata.timing.ops``), where one's time can exceed its module's."""

    top: int
    depth: int | None
    collapse: bool
    longest_name: int
    entries: tuple[OperatorEntry, ...]
    counting_pass: bool = False


def _table(phase: str, rows: list[OpRow], top: int) -> OperatorTable:
    flops = sum(r.stats.flops for r in rows)
    latency = sum(r.stats.latency for r in rows)

    def shares(ranked: list[OpRow]) -> tuple[OperatorShare, ...]:
        return tuple(OperatorShare(r, share(r.stats.flops, flops), share(r.stats.latency, latency)) for r in ranked)

    return OperatorTable(phase, len(rows), shares(top_ops(rows, top, "flops")), shares(top_ops(rows, top, "latency")))


def operator_profile(result: ProfileResult, options: ReportOptions) -> OperatorProfile | None:
    """Per module (its submodules' operators included) down to ``module_depth`` and
    ``detail_depth``, for each phase measured, its ``ops`` top operators by FLOPs and by
    latency; the whole model's first. None unless ``options.ops``."""
    top = options.ops
    if not top:
        return None
    depth = options.table_depth
    phases = [p for p in result.phases if result.ops(p)]
    with_bytes = has_bytes(result)
    tallies = {phase: inclusive_ops(result, phase) for phase in phases}
    names = [r.name for p in phases for r in model_ops(result, p)]
    entries = []
    for view in walk_views(result, collapse=options.collapse, max_depth=depth):
        tables = []
        for phase in phases:
            if view.path == "":
                rows = model_ops(result, phase)  # the model-wide table, as result.ops() gives it
            else:
                rows = merge_ops((tallies[phase][n.name] for n in view.nodes), with_bytes, result.kernels is not None)
            if rows:  # a module that never ran has none
                tables.append(_table(phase, rows, top))
        if tables:
            entries.append(OperatorEntry(view.path, view.node.type_name, view.count, len(view.nodes), tuple(tables)))
    return OperatorProfile(top, depth, options.collapse, max([0, *map(len, names)]), tuple(entries),
                           ops_timed_apart(result))


def ops_timed_apart(result: ProfileResult) -> bool:
    """Whether ``result``'s operators were timed in a counting pass run apart from the modules'
    timed calls (``metadata.timing.ops``; older files: the counting pass, apart where the modules
    were timed in passes of their own)."""
    ops = result.metadata.timing.ops
    if ops:
        return ops == "counting"
    return result.metadata.timing.method in ("separate", "device")


# -- the summary tables of Markdown -------------------------------------------------------------
@dataclass(frozen=True)
class PhaseTable:
    """The model's totals per phase measured (recompute only when it ran), and, for a
    profile with more than a forward pass, the whole iteration's."""

    params: int
    phases: tuple[tuple[str, Stats], ...]
    iteration: IterationStats | None


def phase_table(result: ProfileResult) -> PhaseTable:
    phases = [p for p in result.phases if p != "recompute" or result.total.recompute.calls]
    total = result.total
    if phases == ["forward"] or not phases:
        return PhaseTable(total.params, (("forward", total.forward),), None)
    return PhaseTable(total.params, tuple((p, result.phase_total(p)) for p in phases), result.iteration)


@dataclass(frozen=True)
class RankedModule:
    """A module among the top ones of a phase: its inclusive figures there, and its share
    (percent) of the model's FLOPs in that phase."""

    path: str
    type_name: str
    params: int
    stats: Stats
    flops_share: float
    #: of ``params``, those tied to modules outside it (counted once in the model's total)
    params_shared: int = 0


def top_modules(result: ProfileResult, phase: str, top: int) -> tuple[RankedModule, ...]:
    """The ``top`` modules (the root left out) that ran in ``phase``, most FLOPs first."""
    nodes = [n for n in result.walk() if n.name and n.inclusive[phase].calls]
    whole = result.total.inclusive[phase].flops or 1
    nodes.sort(key=lambda n: (-n.inclusive[phase].flops, -n.inclusive[phase].latency, n.name))
    return tuple(RankedModule(n.name, n.type_name, n.params, n.inclusive[phase], 100 * n.inclusive[phase].flops / whole,
                              n.params_shared)
                 for n in nodes[:top])


# -- the tables of CSV ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModuleRow:
    """One module in one phase it ran in: its inclusive figures (``inclusive``: the module
    and its submodules) and its own (``own``; its calls are the module's), the bytes its
    subtree's ops moved, and its memory (None untracked)."""

    path: str
    type_name: str
    depth: int
    phase: str
    params: int
    params_trainable: int
    inclusive: Stats
    own: Stats
    bytes_moved: int
    memory: ModuleMemory | None
    #: seconds inside its (and its submodules') ops, collectives left out: the rest of its
    #: latency is hooks, framework code, Python between ops and communication
    op_latency: float = 0.0
    #: of ``params``, those tied to modules outside it (counted once in the model's total)
    params_shared: int = 0


def module_rows(result: ProfileResult) -> tuple[ModuleRow, ...]:
    """One row per module (pre-order) and phase it ran in."""
    moved, op_time = inclusive_bytes(result), inclusive_op_time(result)
    return tuple(ModuleRow(node.name, node.type_name, node.depth, phase, node.params, node.params_trainable,
                           node.inclusive[phase], node.self[phase], moved[node.name].get(phase, 0), node.memory,
                           op_time[node.name].get(phase, 0.0), node.params_shared)
                 for node in result.walk() for phase in node.inclusive)


@dataclass(frozen=True)
class OperatorRow:
    """One operator a module ran itself in one phase: its calls, cost and bytes moved."""

    path: str
    type_name: str
    phase: str
    op: str
    stats: Stats
    bytes_moved: int


def operator_rows(result: ProfileResult) -> tuple[OperatorRow, ...]:
    """One row per module, phase and operator of its own (most FLOPs first)."""
    rows = []
    for stats in result.modules.values():
        for phase, ops in stats.ops.items():
            moved = stats.bytes_moved.get(phase, {})
            for op, s in sorted(ops.items(), key=lambda kv: (-kv[1].flops, -kv[1].latency, kv[0])):
                rows.append(OperatorRow(stats.name, stats.type_name, phase, op, s, moved.get(op, 0)))
    return tuple(rows)


@dataclass(frozen=True)
class PeakBuffer:
    """A memory peak that one buffer makes up most of: the ``buffer``, the ``rest`` of the
    peak, and ``zero_stage`` when DeepSpeed ZeRO ran (whose bucket buffers are such)."""

    buffer: Buffer
    rest: int
    zero_stage: int | None


# -- the whole report -------------------------------------------------------------------------
class Report:
    """Every section of a report of ``result`` as ``options`` ask for it (None: not shown),
    each built the first time a renderer reads it: a format reads only its own.

    ``result`` is the profile itself, for the formats that write its data as it is (JSON,
    the Chrome trace of its timeline, the data the HTML page embeds).
    """

    def __init__(self, result: ProfileResult, options: ReportOptions | None = None):
        self.result = result
        self.options = options if options is not None else ReportOptions()

    # the text report ------------------------------------------------------------------------
    @cached_property
    def training(self) -> bool:
        return is_training(self.result)

    @cached_property
    def summary(self) -> SummaryFigures:
        return summary_figures(self.result, self.options.parallel, self.options.recompute_fwd_factor)

    @cached_property
    def on_meta_device(self) -> bool:
        """Profiled on the meta device: nothing ran on hardware, every time and rate is n/a."""
        return self.result.metadata.device_type == "meta"

    @cached_property
    def parallelism(self) -> tuple[tuple[str, int], ...] | None:
        """A training report's parallel sizes (detected or given): (name, size) pairs."""
        parallel = self.result.metadata.parallel
        return tuple(parallel.items()) if parallel and self.training else None

    @cached_property
    def ranks(self) -> RankFigures | None:
        return rank_figures(self.result)

    @cached_property
    def added_work(self) -> AddedWork | None:
        """This rank's work that a model-parallel plan adds, None where the model is not split."""
        return added_work(self.result)

    @cached_property
    def job(self) -> JobFigures | None:
        """Rank 0's gathered view of a model-parallel job (a rank's coordinates known), else None."""
        return job_figures(self.result, self.options.peak)

    @cached_property
    def experts(self) -> list[ExpertLayer]:
        """The model's MoE layers: tokens per rank, imbalance, active parameters."""
        return expert_figures(self.result)

    @cached_property
    def pipeline(self) -> PipelineFigures | None:
        """A pipeline stage's (rank 0's gathered result: every stage's) view."""
        return pipeline_figures(self.result)

    @property
    def memory(self) -> MemoryTotals | None:
        return self.result.memory

    @cached_property
    def peak_buffer(self) -> PeakBuffer | None:
        """The one buffer that makes up most of the memory allocated while profiling and outweighs
        the model's parameters, gradients, optimizer state and activations together (None when
        none does)."""
        m = self.result.memory
        if m is None or m.largest_buffer is None or 2 * m.largest_buffer.bytes < m.peak_allocated \
                or m.largest_buffer.bytes <= m.params + m.grads + m.optimizer_state + m.activations:
            return None
        parallel = self.result.metadata.parallel
        zero = parallel.get("zero_stage") if parallel is not None else None
        return PeakBuffer(m.largest_buffer, max(m.peak_allocated - m.largest_buffer.bytes, 0), zero or None)

    @property
    def device_usage(self) -> DeviceUsage | None:
        return self.result.device_usage

    @cached_property
    def noise(self) -> NoiseFigures | None:
        """The spread of the step (or pass) time, and whether the first step was profiled."""
        return noise_figures(self.result)

    @cached_property
    def device_busy(self) -> DeviceBusy | None:
        """The GPU's busy time against a forward timed as the device's (None otherwise)."""
        return device_busy(self.result)

    @cached_property
    def busy(self) -> Busy | None:
        """How busy the device was, on every device (:mod:`.busy`; None on the meta device)."""
        return busy(self.result)

    @cached_property
    def gpu_usage_unavailable(self) -> str | None:
        """Why the report has no GPU utilisation figures (None when it has them)."""
        usage = self.result.device_usage
        if usage is not None and usage.samples:
            return None
        if self.result.metadata.device_type != "cuda":
            return "no CUDA device"
        return usage.nvml_unavailable if usage is not None and usage.nvml_unavailable else "not measured"

    @cached_property
    def efficiency(self) -> EfficiencySection | None:
        """Against ``peak``, when ``peak`` or ``efficiency`` is asked for."""
        options = self.options
        if not (options.efficiency or options.peak is not None):
            return None
        return efficiency_section(self.result, options.peak, options.dtype)

    @cached_property
    def transformer(self) -> TransformerCheck | None:
        """The analytic estimates of a transformer language model, beside the efficiency."""
        return transformer_check(self.result) if self.efficiency is not None else None

    @cached_property
    def per_micro_batch(self) -> ProfileResult:
        """The result as DeepSpeed's per-module lines mean it, one micro-batch's: with
        gradient accumulation every module's forward and backward over the micro-batches."""
        it = self.result.iteration if self.training else None
        return one_micro_batch(self.result, it.micro_batches) if it is not None and it.micro_batches > 1 \
            else self.result

    @cached_property
    def aggregated(self) -> AggregatedProfile:
        return aggregated_profile(self.per_micro_batch, self.options)

    @cached_property
    def tree(self) -> ModuleTree | None:
        return module_tree(self.per_micro_batch, self.options) if self.options.detailed else None

    @cached_property
    def operators(self) -> OperatorProfile | None:
        return operator_profile(self.result, self.options)

    @cached_property
    def host_syncs(self) -> list[HostSync]:
        """The operators that make the host wait for the device, on CUDA (elsewhere none wait)."""
        return host_syncs(self.result) if self.result.metadata.device_type == "cuda" else []

    @cached_property
    def kernels(self) -> KernelProfile | None:
        return kernel_profile(self.result, self.options)

    # Markdown ---------------------------------------------------------------------------------
    @cached_property
    def phase_table(self) -> PhaseTable:
        return phase_table(self.result)

    @cached_property
    def peak_efficiency(self) -> EfficiencySection | None:
        """Against ``peak`` when one is given, in the dtype the result recorded (Markdown's)."""
        peak = self.options.peak
        return efficiency_section(self.result, peak) if peak is not None else None

    @cached_property
    def top_modules(self) -> tuple[RankedModule, ...]:
        return top_modules(self.result, self.options.phase, self.options.top)

    @cached_property
    def top_operators(self) -> tuple[tuple[str, Stats], ...]:
        """The model's ``top`` operators in ``phase``, most FLOPs first."""
        return tuple(self.result.ops(self.options.phase).items())[: self.options.top]

    @cached_property
    def collectives(self) -> tuple[Collective, ...]:
        return tuple(self.result.collectives())

    # CSV and the HTML page ---------------------------------------------------------------------
    @cached_property
    def module_rows(self) -> tuple[ModuleRow, ...]:
        return module_rows(self.result)

    @cached_property
    def operator_rows(self) -> tuple[OperatorRow, ...]:
        return operator_rows(self.result)

    @cached_property
    def page_figures(self) -> dict:
        """What the HTML page embeds beside the result's own JSON (:func:`~.derived.derived`),
        and, where several steps ran, each module's inclusive latency per phase as the result
        gives it (the median of its samples, which the page cannot sum from the own times)."""
        figures = derived(self.result, self.options.peak)
        latencies = _inclusive_latencies(self.result)
        if latencies:
            figures["module_latencies"] = latencies
        per_rank = [_inclusive_latencies(r) if r is not None else None for r in self.result.ranks or ()]
        if any(per_rank):
            # each rank's panel too: its modules' medians, not sums of its own times' medians
            figures["rank_module_latencies"] = per_rank
        return figures


def _inclusive_latencies(result: ProfileResult) -> dict[str, dict[str, float]] | None:
    """Each module's inclusive latency per phase where several steps ran (None otherwise)."""
    samples = result.samples
    if samples is None or samples.count < 2 or not samples.modules:  # no medians (StepSamples.module_medians)
        return None
    return {node.name: {ph: node.inclusive[ph].latency for ph in node.inclusive} for node in result.walk()}
