"""The figures a report prints, derived from a result: pure functions, no formatting.

The text renderer formats what :func:`summary_figures` and :func:`module_figures` return
and computes nothing itself: rates (FLOPS, samples/s, tokens/s), shares of the model's
totals, the model-parallel scaling of the summary and the parallelism header live here.

>>> import torch, flopsight
>>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
>>> result = flopsight.profile(model, torch.ones(1, 4), clock=flopsight.FakeClock())
>>> f = summary_figures(result)
>>> f.params, f.fwd.macs, f.training
(58, 48, None)
>>> m = module_figures(result.module("0"), result.total)
>>> m.macs, m.macs_share     # percent of the model's forward MACs: 32 of 48
(32, 66.66666666666667)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..result.communication import Collective, bandwidths
from ..result.generation import GenerationStats
from ..result.iteration import CommunicationTime, IterationStats, StepAnatomy, median_anatomy
from ..result.profile_result import Coverage, ProfileResult
from ..result.stats import Stats
from ..result.tree import ModuleNode

__all__ = [
    "ParallelInfo",
    "model_forward",
    "TrainingFigures",
    "GenerationFigures",
    "CommunicationFigures",
    "SummaryFigures",
    "AnatomyPart",
    "AnatomyFigures",
    "anatomy_figures",
    "ModuleFigures",
    "is_training",
    "parallel_of",
    "rate",
    "share",
    "summary_figures",
    "training_figures",
    "generation_figures",
    "communication_figures",
    "module_figures",
    "combined_figures",
]


@dataclass(frozen=True)
class ParallelInfo:
    """Parallelism figures for the summary's header lines (from a DeepSpeed engine)."""

    world_size: int = 1
    dp_size: int = 1
    mp_size: int = 1
    batch_size: int | None = None


def rate(amount: float, seconds: float) -> float:
    """``amount`` per second; 0 when no time was measured (never divides by zero).

    >>> rate(10, 4), rate(10, 0)
    (2.5, 0)
    """
    return amount / seconds if seconds else 0


def share(part: float, whole: float) -> float:
    """``part`` as a percentage of ``whole`` (0 when ``whole`` is 0).

    >>> share(1, 4), share(3, 0)
    (25.0, 0)
    """
    return 100 * part / whole if whole else 0


def is_training(result: ProfileResult) -> bool:
    """True when the profile measured a backward pass or an optimizer step."""
    phases = result.phases
    return (
        "backward" in phases
        or "step" in phases
        or bool(result.spans.get("backward"))
        or bool(result.spans.get("step"))
    )


def parallel_of(result: ProfileResult, given: ParallelInfo | None) -> ParallelInfo:
    """``given`` (a DeepSpeed engine's figures), else what the run recorded: the model
    parallel size is the tensor-parallel one (DeepSpeed's mp_size), the data-parallel size the
    one detected, else the world over the tensor-, pipeline- and sequence-parallel sizes (with
    none known, every rank is a data-parallel rank)."""
    if given is not None:
        return given
    world = int(result.metadata.world_size or 1)
    sizes: Mapping[str, int] = result.metadata.parallel or {}
    tp = int(sizes.get("tp") or 1)
    split = tp * int(sizes.get("pp") or 1) * int(sizes.get("sp") or 1)
    dp = int(sizes.get("dp") or (world // split if world % split == 0 else world))
    return ParallelInfo(world_size=world, dp_size=dp, mp_size=tp)


@dataclass(frozen=True)
class TrainingFigures:
    """A training report's figures: DeepSpeed's engine lines with DeepSpeed's definitions,
    then the measured ones.

    DeepSpeed's (``ds_*``): of one micro-batch (with gradient accumulation, the mean of the
    step's: DeepSpeed profiles one micro-batch's forward), its backward is ``bwd_factor = 2 +
    recompute_fwd_factor`` times the forward's FLOPs, its ``ds_bwd_latency`` one micro-batch's
    backward, its iter latency the sum of the fwd, bwd and step latencies, its
    samples/second ``batch size per GPU * world size / iter latency``. Measured, over the
    whole step:
    ``backward``, ``recompute`` (None when activation checkpointing re-ran nothing; then
    ``model_flops_per_second`` is None too) and ``step`` as counted; ``iter_flops`` is every
    phase's FLOPs, ``iter_latency`` the wall time of the whole profiled span;
    ``samples_per_second`` counts the samples of every data-parallel rank (None when the
    batch size is unknown).
    """

    bwd_factor: float
    ds_bwd_latency: float
    ds_bwd_flops_per_second: float
    ds_fwd_bwd_flops_per_second: float
    ds_iter_latency: float
    ds_flops_per_second: float
    ds_samples_per_second: float | None
    backward: Stats
    recompute: Stats | None
    step: Stats
    bwd_flops_per_second: float
    fwd_bwd_flops_per_second: float
    iter_flops: int
    iter_latency: float
    iter_flops_per_second: float
    model_flops_per_second: float | None
    samples_per_second: float | None


@dataclass(frozen=True)
class GenerationFigures:
    """generate(): the :class:`~flopsight.result.iteration.GenerationStats` and the rates
    the report prints from them."""

    stats: GenerationStats
    prefill_flops_per_second: float
    decode_flops_per_second: float
    decode_tokens_per_second: float
    flops_per_second: float
    tokens_per_second: float

    @property
    def encoder(self) -> Stats | None:
        return self.stats.encoder


@dataclass(frozen=True)
class CommunicationFigures:
    """One kind of collective over the whole profile (this rank): calls, payload bytes per
    rank, seconds, DeepSpeed's algorithm and bus bandwidths in bytes/s, and the seconds of it
    the rank waited for (exposed)."""

    kind: str
    count: int
    bytes: int
    latency: float
    algbw: float
    busbw: float
    exposed: float = 0.0


def communication_figures(collectives: list[Collective]) -> list[CommunicationFigures]:
    """Per kind, in the records' order: totals over modules and phases; the bandwidths of
    the summed bytes and time, on the largest group the kind used.

    >>> communication_figures([Collective("all_reduce", "", "backward", 2, 800, 0.002, 2)])[0].busbw
    400000.0
    """
    totals: dict[str, list] = {}
    for c in collectives:
        t = totals.setdefault(c.kind, [0, 0, 0.0, 0, 0.0])
        t[0] += c.count
        t[1] += c.bytes
        t[2] += c.latency
        t[3] = max(t[3], c.group_size)
        t[4] += c.exposed
    return [CommunicationFigures(kind, n, size, seconds, *bandwidths(kind, size, seconds, group), exposed)
            for kind, (n, size, seconds, group, exposed) in totals.items()]


@dataclass(frozen=True)
class AnatomyPart:
    """One part of a step's wall time: its seconds and its share (percent) of the step."""

    seconds: float
    share: float


@dataclass(frozen=True)
class AnatomyFigures:
    """Where one rank's iteration wall time went (:class:`~flopsight.result.iteration.StepAnatomy`):
    the parts, which add up to the step, each with its share; ``overlapped``, the
    communication hidden behind compute (None when nothing was communicated); ``profiler``,
    the profiler's own time left in the phases; ``counted``: the counted step's wall time, which
    the parts add up to, when the report's latencies are those of a step timed apart from it
    (None when they are the counted step's own); ``median_of``: with several steps, how many:
    the parts are then the median step's (they add up to the median wall time, ``total``),
    while each module's time is the median of its own samples (None for one step)."""

    forward: AnatomyPart
    backward: AnatomyPart
    step: AnatomyPart
    framework: AnatomyPart
    communication: AnatomyPart
    other: AnatomyPart
    overlapped: float | None
    profiler: AnatomyPart = AnatomyPart(0.0, 0.0)
    counted: float | None = None
    median_of: int | None = None
    #: the wall time the parts add up to
    total: float = 0.0


def anatomy_figures(anatomy: StepAnatomy, communication: CommunicationTime,
                    counted: float | None = None, median_of: int | None = None) -> AnatomyFigures:
    """The step anatomy's parts with their shares of the whole step (``counted`` and
    ``median_of``: see :class:`AnatomyFigures`).

    >>> a = anatomy_figures(StepAnatomy(1.0, 2.0, 0.5, 0.25, 0.25, 0.0), CommunicationTime(0.25, 0.0))
    >>> a.backward, a.framework, a.overlapped
    (AnatomyPart(seconds=2.0, share=50.0), AnatomyPart(seconds=0.25, share=6.25), 0.0)
    >>> anatomy_figures(StepAnatomy(1.0, 2.0, 0.5, 0.25, 0.0, 0.0, profiler=1.25), CommunicationTime()).profiler
    AnatomyPart(seconds=1.25, share=25.0)
    """
    total = anatomy.total

    def part(seconds: float) -> AnatomyPart:
        return AnatomyPart(seconds, share(seconds, total))

    return AnatomyFigures(part(anatomy.forward), part(anatomy.backward), part(anatomy.step),
                          part(anatomy.framework), part(anatomy.communication), part(anatomy.other),
                          communication.overlapped if communication.total else None, part(anatomy.profiler),
                          counted, median_of, total)


@dataclass(frozen=True)
class SummaryFigures:
    """Every number of the report's summary block.

    ``parallel`` is None when the header lines (world, data- and model-parallel size) are
    not printed: forward-only reports print them only for a DeepSpeed engine, training
    reports always. ``batch_size`` is the header's batch size per GPU: the engine's,
    or (``batch_size_measured``) samples per micro-batch. ``micro_batches`` and
    ``optimizer_steps`` are None outside training reports.
    """

    training_report: bool
    parallel: ParallelInfo | None
    batch_size: float | None
    batch_size_measured: bool
    micro_batches: int | None
    optimizer_steps: int | None
    params: int
    params_of_model: int
    fwd: Stats
    fwd_flops_of_model: int
    fwd_flops_per_second: float
    training: TrainingFigures | None
    generation: GenerationFigures | None
    #: with gradient accumulation: the forward of the whole step (``fwd`` is one micro-batch's,
    #: DeepSpeed's meaning); None otherwise
    fwd_step: Stats | None
    communication: list[CommunicationFigures]  # empty without collectives
    unsupported_ops: list[tuple[str, int]]
    error: str | None
    coverage: Coverage | None = None
    #: a training report's step anatomy (None otherwise)
    anatomy: AnatomyFigures | None = None


def training_figures(
    result: ProfileResult, parallel: ParallelInfo, batch_size: float | None = None, recompute_fwd_factor: float = 0.0,
    it: IterationStats | None = None,
) -> TrainingFigures:
    """The training lines' figures: ``parallel`` gives the world and data-parallel sizes,
    ``batch_size`` the batch size per GPU (for DeepSpeed's samples/second) and
    ``recompute_fwd_factor`` DeepSpeed's estimate of the recomputed forward; ``it`` is
    ``result.iteration`` when the caller has it already."""
    it = it if it is not None else result.iteration
    fwd = model_forward(result, it)
    bwd, rec, step = it.backward, it.recompute, it.step
    per = max(it.micro_batches, 1)  # DeepSpeed's lines: one micro-batch's forward and backward
    ds_fwd, ds_bwd = _mean([fwd], per), _mean([bwd], per)
    recomputed = "recompute" in result.phases
    iter_flops = fwd.flops + bwd.flops + rec.flops + step.flops
    if recomputed:
        bwd_rate = rate(bwd.flops + rec.flops, bwd.latency)
        fwd_bwd_rate = rate(fwd.flops + bwd.flops + rec.flops, fwd.latency + bwd.latency)
        model_rate = rate(iter_flops - rec.flops, it.latency)
    else:
        bwd_rate = rate(bwd.flops, bwd.latency)
        fwd_bwd_rate = rate(fwd.flops + bwd.flops, fwd.latency + bwd.latency)
        model_rate = None
    samples = rate(it.samples * parallel.dp_size, it.latency) if it.samples else None
    factor = 2 + recompute_fwd_factor
    ds_iter = ds_fwd.latency + ds_bwd.latency + step.latency
    return TrainingFigures(
        bwd_factor=factor,
        ds_bwd_latency=ds_bwd.latency,
        ds_bwd_flops_per_second=rate(factor * ds_fwd.flops, ds_bwd.latency),
        ds_fwd_bwd_flops_per_second=rate((factor + 1) * ds_fwd.flops, ds_fwd.latency + ds_bwd.latency),
        ds_iter_latency=ds_iter,
        ds_flops_per_second=rate((factor + 1) * ds_fwd.flops, ds_iter),
        ds_samples_per_second=rate(batch_size * parallel.world_size, ds_iter) if batch_size is not None else None,
        backward=bwd,
        recompute=rec if recomputed else None,
        step=step,
        bwd_flops_per_second=bwd_rate,
        fwd_bwd_flops_per_second=fwd_bwd_rate,
        iter_flops=iter_flops,
        iter_latency=it.latency,
        iter_flops_per_second=rate(iter_flops, it.latency),
        model_flops_per_second=model_rate,
        samples_per_second=samples,
    )


def model_forward(result: ProfileResult, it: IterationStats | None) -> Stats:
    """The model's forward: its counts, and its latency from the timed step where the
    iteration's latencies are a step's timed apart from the counted one (``it.timed``)."""
    fwd = result.total.forward
    return fwd._replace(latency=it.forward.latency) if it is not None and it.timed else fwd


def generation_figures(result: ProfileResult) -> GenerationFigures | None:
    """The generate() lines' figures (None for other profiles)."""
    g = result.generation
    if g is None:
        return None
    return GenerationFigures(
        stats=g,
        prefill_flops_per_second=rate(g.prefill.flops, g.prefill.latency),
        decode_flops_per_second=rate(g.decode.flops, g.decode.latency),
        decode_tokens_per_second=rate(g.batch_size * g.decode.calls, g.decode.latency),
        flops_per_second=rate(g.total.flops, g.total.latency),
        tokens_per_second=rate(g.batch_size * g.new_tokens, g.total.latency),
    )


def summary_figures(
    result: ProfileResult, parallel: ParallelInfo | None = None, recompute_fwd_factor: float = 0.0
) -> SummaryFigures:
    """The summary block's figures; ``parallel`` is a DeepSpeed engine's (or None),
    ``recompute_fwd_factor`` its config's (DeepSpeed's estimate of checkpointing's recompute)."""
    training = is_training(result)
    # forward-only reports print the header only for an engine, as DeepSpeed does, or for a
    # model-parallel run, whose "of model" lines scale by its sizes; training reports always
    # do (DeepSpeed's engine report always has it)
    header = parallel_of(result, parallel) if training else parallel
    if header is None:
        found = parallel_of(result, None)
        header = found if found.world_size > found.dp_size else None
    mp = (header or parallel_of(result, None)).mp_size  # a forward-only report's too
    it = result.iteration if training else None
    batch: float | None = None  # the engine's batch size per GPU, else the samples per micro-batch measured
    measured = False
    if header is not None:
        batch = header.batch_size
        if batch is None and it is not None and it.samples and it.micro_batches:
            batch, measured = it.samples / it.micro_batches, True
    total = result.total
    fwd = step_fwd = model_forward(result, it)
    per = it.micro_batches if it is not None and it.micro_batches > 1 else 1
    if per > 1:  # DeepSpeed's lines: one micro-batch's forward (the mean of the step's)
        fwd = _mean([step_fwd], per)
    return SummaryFigures(
        training_report=training,
        parallel=header,
        batch_size=batch,
        batch_size_measured=measured,
        micro_batches=it.micro_batches if it is not None else None,
        optimizer_steps=it.step.calls if it is not None else None,
        params=total.params,
        params_of_model=(result.metadata.params_of_model if result.metadata.params_of_model is not None
                         else total.params * mp),
        fwd=Stats(fwd.macs, fwd.flops, fwd.latency, fwd.calls),
        fwd_flops_of_model=fwd.flops * mp,
        fwd_flops_per_second=rate(fwd.flops, fwd.latency),
        training=(training_figures(result, header, batch, recompute_fwd_factor, it)  # header: parallel_of's
                  if training and header is not None else None),
        generation=generation_figures(result),
        fwd_step=Stats(step_fwd.macs, step_fwd.flops, step_fwd.latency, step_fwd.calls) if per > 1 else None,
        communication=communication_figures(result.collectives()),
        anatomy=(anatomy_figures(it.anatomy, it.communication, it.counted_latency, _median_of(result, it))
                 if it is not None and it.anatomy is not None else None),
        unsupported_ops=sorted(result.unsupported_ops.items()),
        coverage=result.coverage,
        error=result.metadata.error or result.metadata.incomplete or None,
    )


def _median_of(result: ProfileResult, it: IterationStats) -> int | None:
    """The number of steps whose median step the anatomy is (None: one step's own;
    :func:`~flopsight.result.iteration.iteration_stats`)."""
    samples = result.samples
    if samples is None or samples.count <= 1:
        return None
    return samples.count if median_anatomy(samples.figures) is not None else None


@dataclass(frozen=True)
class ModuleFigures:
    """One module's line of the detailed profile: its inclusive figures and their shares
    (percent) of the model's totals; the backward ones are of the measured backward."""

    params: int
    params_share: float
    macs: int
    macs_share: float
    latency: float
    latency_share: float
    flops_per_second: float
    bwd_macs: int
    bwd_macs_share: float
    bwd_latency: float
    bwd_latency_share: float
    bwd_flops_per_second: float
    #: of ``params``, those a module outside it holds too (tied weights): counted in each module
    #: that holds them and once in the total, so siblings' ``params_share`` can add up past 100%
    params_shared: float = 0


def module_figures(stats: ModuleNode, total: ModuleNode) -> ModuleFigures:
    """``stats``'s figures against the model's ``total`` (the root's stats)."""
    return _figures(stats.params, stats.forward, stats.backward, total, stats.params_shared)


def _figures(params, fwd: Stats, bwd: Stats, total: ModuleNode, shared: float = 0) -> ModuleFigures:
    all_fwd, all_bwd = total.forward, total.backward
    return ModuleFigures(
        params_shared=shared,
        params=params,
        params_share=share(params, total.params),
        macs=fwd.macs,
        macs_share=share(fwd.macs, all_fwd.macs),
        latency=fwd.latency,
        latency_share=share(fwd.latency, all_fwd.latency),
        flops_per_second=rate(fwd.flops, fwd.latency),
        bwd_macs=bwd.macs,
        bwd_macs_share=share(bwd.macs, all_bwd.macs),
        bwd_latency=bwd.latency,
        bwd_latency_share=share(bwd.latency, all_bwd.latency),
        bwd_flops_per_second=rate(bwd.flops, bwd.latency),
    )


def _per(count: int, per: int) -> int | float:
    """``count`` shared out over ``per``: an int where it divides evenly."""
    return count // per if count % per == 0 else count / per


def _mean(stats: list[Stats], per: int) -> Stats:
    """The sum of ``stats`` over ``per``: counts stay ints (identical copies divide them
    exactly), latency is the mean."""
    # a count that does not divide stays fractional (a mean), which Stats' int fields do not say
    return Stats(_per(sum(s.macs for s in stats), per), _per(sum(s.flops for s in stats), per),  # type: ignore[arg-type]
                 sum(s.latency for s in stats) / per)


def combined_figures(nodes: list[ModuleNode] | tuple[ModuleNode, ...], total: ModuleNode,
                     per: int = 1) -> ModuleFigures:
    """The figures of several modules as one line: their sum divided by ``per``.

    ``per=1`` sums them (every copy of a collapsed run of layers); ``per=len(nodes)`` gives
    one copy's figures, its latency the mean over the copies. Params are summed the same
    way (identical copies hold the same number each).

    >>> import torch, flopsight
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    >>> result = flopsight.profile(model, torch.ones(1, 4), clock=flopsight.FakeClock())
    >>> both = [result.module("0"), result.module("1")]
    >>> combined_figures(both, result.total).macs, combined_figures(both, result.total, per=2).macs
    (48, 24)
    """
    if per < 1 or not nodes:
        raise ValueError(f"per: expected an int >= 1 and at least one module, got {per!r} and {len(nodes)} modules")
    return _figures(_per(sum(n.params for n in nodes), per), _mean([n.forward for n in nodes], per),
                    _mean([n.backward for n in nodes], per), total, _per(sum(n.params_shared for n in nodes), per))
