"""The text report, in the DeepSpeed Flops Profiler's layout, line for line.

Summary block, aggregated profile (top module types per depth by params, MACs and
latency) and detailed tree (every module with its stats, then its own ``extra_repr``),
closed by a rule. Labels say ``GPU`` on every device, as DeepSpeed's do (its log parsers
look for "per GPU"). Differences
from DeepSpeed are fixes: ``module_depth=-1`` includes the deepest level, a too-large
depth prints all of them, ``params of model`` is right without an engine, modules that
never ran are marked, containers (``ModuleList``) show their children's totals, and zero
latency never divides.

What was measured decides what is shown; a forward-only profile prints DeepSpeed's lines
and nothing else. A profile with a backward pass or an optimizer step adds the training
lines of DeepSpeed's engine report, computed from the *measured* backward and step (not
DeepSpeed's ``2 * fwd flops`` estimate), and backward columns in the aggregated and
detailed profiles. A ``generate()`` profile adds prefill, decode and whole-call lines
(and, for encoder-decoder models, the encoder pass the prefill includes).

Optional sections, off by default (see :func:`render_text`): efficiency lines after the
summary, repeated layers collapsed and a depth limit in the detailed tree, and an operator
profile. Every number comes from the report model (:mod:`flopsight.analysis.report`); this
file only words and lays it out.

>>> import torch, flopsight
>>> from flopsight.renderers.text_renderer import render_text
>>> model = torch.nn.Sequential(torch.nn.Linear(16, 5))
>>> result = flopsight.profile(model, torch.ones(8, 16), clock=flopsight.FakeClock())
>>> print(render_text(result).splitlines()[1])
-------------------------- DeepSpeed Flops Profiler --------------------------
"""

from __future__ import annotations

from typing import Any

from ..analysis.aggregate import DepthSummary
from ..analysis.busy import Busy
from ..analysis.experts import ExpertLayer
from ..analysis.job import JobFigures
from ..analysis.kernel_profile import KernelProfile
from ..analysis.noise import NoiseFigures
from ..analysis.pipeline import PipelineFigures
from ..analysis.ranks import RankFigures
from ..analysis.report import (
    AggregatedProfile,
    ModuleTree,
    OperatorEntry,
    OperatorProfile,
    OperatorShare,
    PeakBuffer,
    Report,
    TreeAlias,
    TreeEnd,
    TreeEntry,
    aggregated_profile,
)
from ..analysis.report_figures import (
    AnatomyFigures,
    AnatomyPart,
    GenerationFigures,
    ModuleFigures,
    SummaryFigures,
    TrainingFigures,
)
from ..analysis.report_options import ReportOptions
from ..result.device_usage import DeviceUsage
from ..result.memory import MemoryTotals
from ..result.profile_result import ProfileResult
from .efficiency_lines import format_efficiency, format_transformer_check
from .numbers import (
    DEFAULT_PRECISION,
    bytes_to_string,
    duration_to_string,
    flops_to_string,
    macs_to_string,
    number_to_string,
    params_to_string,
    shared_params_mark,
)

__all__ = ["render_text", "render_aggregated", "format_text"]

RULE = "-" * 78
#: what a module's time in a phase is called: its forward's latency (the call's wall time, as
#: DeepSpeed's), and its backward's operators' time ("bwd op time"), never "bwd latency", which
#: is DeepSpeed's summary line, the backward pass's wall time
_PHASE_LABELS = {"forward": "fwd latency", "backward": "bwd op time"}
_PHASE_SHORT = {"forward": "fwd", "backward": "bwd"}
_LINE = "{:<70}  {:<8}"
#: DeepSpeed's banner, word for word (parsers look for it); flopsight names itself after it
_BANNER = "-------------------------- DeepSpeed Flops Profiler --------------------------"
_NAMED = "(flopsight: the DeepSpeed Flops Profiler's report, counted at the aten-operator level)"
_NOTATIONS = """Notations:
data parallel size (dp_size), model parallel size(mp_size),
number of parameters (params), number of multiply-accumulate operations(MACs),
number of floating-point operations (flops), floating-point operations per second (FLOPS),
fwd latency (forward propagation latency), bwd latency (backward propagation latency),
step (weights update latency), iter latency (sum of fwd, bwd and step latency)
"""
_PARALLELISM = {"world": "world", "dp": "dp", "tp": "tp", "pp": "pp", "sp": "sp", "ep": "ep",
                "zero_stage": "ZeRO stage"}


def _pct(percent: float) -> str:
    return f"{round(percent, DEFAULT_PRECISION):g}%"


def _rate(flops_per_second: float) -> str:
    """A per-module rate, as DeepSpeed prints it (rounded before the unit)."""
    return flops_to_string(round(flops_per_second, DEFAULT_PRECISION))


def _gbps(bytes_per_second: float) -> str:
    """Gbit/s, as DeepSpeed's communication logger prints bandwidths."""
    return f"{bytes_per_second * 8 / 1e9:.2f} Gbps"


def _count(n: float) -> str:
    return f"{round(n, DEFAULT_PRECISION):g}"


#: what a time or rate reads on the meta device, where nothing ran on hardware
_NA = "n/a"
#: an input list or dict longer than this is cut short: "... (N more)"
_INPUTS_LISTED = 8


def busy_text(b: Busy) -> str:
    """How busy the device was, in words: ``CPU: computing 19.3% of the step (the ops' own
    time; framework and hooks 27.1%, ...)`` or ``GPU: NVML utilization mean 87 % ...``."""
    if b.device == "cuda":
        said = [f"NVML utilization mean {b.utilization_mean:g} %, max {b.utilization_max} %"
                if b.utilization_mean is not None else "NVML utilization not measured"]
        said.append(f"a kernel running {_pct(b.kernels_share)} of the {b.span}" if b.kernels_share is not None
                    else "kernels=True measures the share of the span a kernel ran in")
        return "GPU: " + "; ".join(said)
    names = {"framework": "framework and hooks", "communication": "waiting for communication", "other": "other",
             "profiler": "profiler"}
    rest = ", ".join(f"{names[k]} {_pct(v)}" for k, v in b.parts.items() if v > 0)
    return (f"{b.device.upper()}: computing {_pct(b.compute_share or 0.0)} of the {b.span} (the ops' own time"
            + (f"; {rest}" if rest else "") + ")")


def _which_step(f: SummaryFigures) -> str:
    """Which step the measured iteration lines are: the one timed apart before the profiled
    ones (the DeepSpeed engine's), the median of several, or the whole profiled span."""
    a = f.anatomy
    if a is not None and a.counted is not None:
        return "the step before, timed apart"
    if a is not None and a.median_of is not None:
        return f"the median of {a.median_of} steps"
    return "the whole profiled span"


def _input_text(value) -> str:
    """One recorded argument: a tensor as ``dtype[shape]``, lists and dicts nested, the rest as recorded."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        more = f", ... ({len(value) - _INPUTS_LISTED} more)" if len(value) > _INPUTS_LISTED else ""
        return "[" + ", ".join(_input_text(v) for v in value[:_INPUTS_LISTED]) + more + "]"
    if isinstance(value, dict):
        items = list(value.items())
        more = f", ... ({len(items) - _INPUTS_LISTED} more)" if len(items) > _INPUTS_LISTED else ""
        return "{" + ", ".join(f"{k}: {_input_text(v)}" for k, v in items[:_INPUTS_LISTED]) + more + "}"
    return repr(value)


def _inputs_text(meta) -> str:
    """The profiled call's inputs as the summary's line states them: positional ones, then
    ``name=value``, then the batch size (empty when nothing was recorded).

    >>> from flopsight.result.metadata import Metadata
    >>> _inputs_text(Metadata(inputs={"args": ["float32[8, 3, 224, 224]"], "kwargs": {"mask": None}}, batch_size=8))
    'float32[8, 3, 224, 224], mask=None; batch size 8'
    """
    inputs = meta.inputs
    parts = []
    if inputs is not None:
        parts += [_input_text(v) for v in inputs["args"]]
        parts += [f"{k}={_input_text(v)}" for k, v in inputs["kwargs"].items()]
    batch = meta.batch_size_given or meta.batch_size
    text = ", ".join(parts)
    if batch:
        text += ("; " if text else "") + f"batch size {batch}"
    return text


class _Text:
    """The report's lines, section by section."""

    def __init__(self, meta: bool = False) -> None:
        # DeepSpeed's wording on every device: its log parsers look for "per GPU"
        self.unit = "GPU"
        self.lines: list[str] = []
        # on the meta device nothing runs on hardware: every time and rate is n/a
        self.meta = meta

    def dur(self, seconds: float) -> str:
        return _NA if self.meta else duration_to_string(seconds)

    def fps(self, flops_per_second: float) -> str:
        return _NA if self.meta else flops_to_string(flops_per_second)

    def rate(self, flops_per_second: float) -> str:
        """A per-module rate, as DeepSpeed prints it (rounded before the unit)."""
        return _NA if self.meta else _rate(flops_per_second)

    def time_share(self, percent: float) -> str:
        """A share of a time: n/a on the meta device."""
        return _NA if self.meta else _pct(percent)

    def per_second(self, n: float) -> str:
        """samples/s, tokens/s: n/a on the meta device."""
        return _NA if self.meta else _count(n)

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)

    def kv(self, label: str, value) -> None:
        self.add(_LINE.format(label, value))

    # -- summary --------------------------------------------------------------------------
    def summary(self, report: Report) -> None:
        u = self.unit
        f: SummaryFigures = report.summary
        self.add("", _BANNER, _NAMED, f"Profile Summary at step {report.options.profile_step}:", _NOTATIONS)
        parallel = f.parallel
        if parallel:
            self.kv("world size: ", parallel.world_size)
            self.kv("data parallel size: ", parallel.dp_size)
            self.kv("model parallel size: ", parallel.mp_size)
            if f.batch_size is not None:
                self.kv(f"batch size per {u}: ", _count(f.batch_size) if f.batch_size_measured else f.batch_size)
        self.kv(f"params per {u}: ", params_to_string(f.params))
        self.kv(f"params of model = params per {u} * mp_size: ", params_to_string(f.params_of_model))
        self.kv(f"fwd MACs per {u}: ", macs_to_string(f.fwd.macs))
        self.kv(f"fwd flops per {u}: ", number_to_string(f.fwd.flops))
        self.kv(f"fwd flops of model = fwd flops per {u} * mp_size: ", number_to_string(f.fwd_flops_of_model))
        self.kv("fwd latency: ", self.dur(f.fwd.latency))
        self.kv(
            f"fwd FLOPS per {u} = fwd flops per {u} / fwd latency: ",
            self.fps(f.fwd_flops_per_second),
        )
        if report.on_meta_device:
            # nothing runs on meta: its "latencies" are torch's and the profiler's Python time
            self.kv("note: ", "profiled on the meta device: nothing ran on hardware, so latencies and FLOPS are n/a")
        busy = report.device_busy
        if busy is not None:  # a line of its own after DeepSpeed's: what the device did during the forward
            self.kv("fwd GPU busy (kernels' device time), idle share: ",
                    f"{self.dur(busy.busy)} ({_pct(100 * busy.idle_share)} idle)")
        compiled = report.result.metadata.compiled
        if compiled:
            self.kv("ran compiled (torch.compile; each timed as one region, counts from the eager module): ",
                    ", ".join(repr(p) if p else "the whole model" for p in compiled))
        if f.training is not None:
            self._training(f.training, f)
        if f.generation is not None:
            self._generation(f.generation, batch_printed=parallel is not None and parallel.batch_size is not None)
        if f.anatomy is not None:
            self._anatomy(f.anatomy, recompute=f.training is not None and f.training.recompute is not None)
        inputs = _inputs_text(report.result.metadata)
        if inputs:  # after DeepSpeed's lines: what the figures above were measured on
            self.kv("inputs (shapes and dtypes; batch size): ", inputs)
        if report.parallelism:
            self.kv("parallelism (detected or given): ",
                    ", ".join(f"{_PARALLELISM[k]} {v}" for k, v in report.parallelism))
        replicated = report.result.metadata.params_replicated
        if replicated is not None:  # tensor parallelism split the model: what it did not split
            self.kv(f"params replicated on every model-parallel {u}: ",
                    params_to_string(replicated))
        added = report.added_work
        if added is not None:
            self.kv(f"FLOPs added per {u}, redistributions / modules left whole (every phase): ",
                    f"{number_to_string(added.redistributions)} / {number_to_string(added.replicated)}")
        if report.pipeline is not None:
            self._pipeline(report.pipeline)
        for layer in report.experts:
            self._experts(layer, gathered=bool(report.result.ranks))
        if report.job is not None:
            self._job(report.job)
        if report.ranks is not None:
            self._ranks(report.ranks)
        if report.memory is not None:
            self._memory(report.memory)
            if report.peak_buffer is not None:
                self._peak_buffer(report.peak_buffer)
        if report.device_usage is not None:
            self._device_usage(report.device_usage)
        if report.gpu_usage_unavailable is not None:  # the figure is not available: said, not left out
            self.kv("GPU utilization (NVML): ", f"n/a ({report.gpu_usage_unavailable})")
        if report.busy is not None:  # on every device, in words
            self.kv("device busy: ", busy_text(report.busy))
        if report.host_syncs:
            self._host_syncs(report.host_syncs)
        for c in f.communication:
            # new lines of their own after DeepSpeed's (its log parsers never see them change)
            self.kv(
                f"{c.kind} (calls, bytes per rank, time, algbw, busbw): ",
                f"{c.count}, {bytes_to_string(c.bytes)}, {self.dur(c.latency)}, "
                f"{_gbps(c.algbw)}, {_gbps(c.busbw)}",
            )
        if f.coverage is not None:
            cov = f.coverage
            self.kv(
                "op coverage (ops with a formula / ops seen): ",
                f"{cov.ops_with_formula} / {cov.ops_seen}, "
                f"{cov.calls_without_formula} of {cov.calls} calls not counted",
            )
        if f.unsupported_ops:
            listed = ", ".join(f"{name} x{calls}" for name, calls in f.unsupported_ops)
            self.kv("ops not counted (no formula): ", listed)
        if report.noise is not None:
            self._noise(report.noise)
        if f.error:
            self.kv("profile incomplete: ", f.error)

    def _host_syncs(self, syncs: list) -> None:
        calls = sum(s.calls for s in syncs)
        listed = ", ".join(f"{s.op} x{s.calls} in {s.path or '<root>'!r} ({_PHASE_SHORT.get(s.phase, s.phase)})"
                           for s in syncs[:_SYNCS_LISTED])
        more = f", and {len(syncs) - _SYNCS_LISTED} more" if len(syncs) > _SYNCS_LISTED else ""
        self.kv("host syncs (the host waits for the GPU): ",
                f"{calls} call{'s' if calls > 1 else ''}: {listed}{more} (docs/conventions/timing.md)")

    def _noise(self, n: NoiseFigures) -> None:
        """The time's spread over the steps, and whether it can tell a difference."""
        s, unit = n.spread, n.unit
        units = "passes" if unit == "pass" else f"{unit}s"
        if s is not None:
            self.kv(f"{n.figure} over {n.count} {units} (median, {s.kind}): ",
                    f"{self.dur(s.median)} ({self.dur(s.low)} to {self.dur(s.high)})")
        if s is None:
            arg = "steps" if unit == "step" else "repeat"
            self.kv("noise: ", f"{n.figure} is one sample (1 {unit}): its noise is unknown; profile several "
                               f"({arg}=N) to tell which differences are significant")
        elif n.noisy:
            wide = (f"; the spread is as wide as the {unit} itself: too noisy to tell much, profile more {units} "
                    "or on a quieter machine (no other work on its cores)") if n.wide else ""
            self.kv("noise: ", f"{n.figure} varies ±{100 * s.relative:.1f}% over {n.count} {units}; "
                               "differences smaller than this are not significant" + wide)
        if n.first_step:
            what = ("the first profiled step was the first the process ran" if unit == "step"
                    else "no warm-up call ran before the timed ones (warm_up=0)")
            self.kv("note: ", f"{what}: its time includes one-time costs (allocations, lazy initialisation, "
                              "caches); profile a later one")

    def _training(self, t: TrainingFigures, f: SummaryFigures) -> None:
        """DeepSpeed's engine lines word for word, with its definitions (the backward
        estimated from the forward, iter latency the sum of fwd, bwd and step), so its log
        parsers read them unchanged; then what was measured, on lines of their own."""
        bwd, rec, step, k = t.backward, t.recompute, t.step, f"{t.bwd_factor:g}"
        self.kv("bwd latency: ", self.dur(t.ds_bwd_latency))
        self.kv(f"bwd FLOPS per GPU = {k} * fwd flops per GPU / bwd latency: ",
                self.fps(t.ds_bwd_flops_per_second))
        self.kv(f"fwd+bwd FLOPS per GPU = {t.bwd_factor + 1:g} * fwd flops per GPU / (fwd+bwd latency): ",
                self.fps(t.ds_fwd_bwd_flops_per_second))
        self.kv("step latency: ", self.dur(step.latency))
        self.kv("iter latency: ", self.dur(t.ds_iter_latency))
        self.kv(f"FLOPS per GPU = {t.bwd_factor + 1:g} * fwd flops per GPU / iter latency: ",
                self.fps(t.ds_flops_per_second))
        if t.ds_samples_per_second is not None:
            self.kv("samples/second: ", _NA if self.meta else round(t.ds_samples_per_second, DEFAULT_PRECISION))
        # Gradient accumulation (several forwards and backwards per step): DeepSpeed's lines
        # above are one micro-batch's, as in DeepSpeed's own report; the measured lines the step's.
        if f.micro_batches is not None and f.micro_batches > 1:  # (both are set in a training report)
            self.kv("micro-batches per step (DeepSpeed's lines show one of them): ", f.micro_batches)
        if f.optimizer_steps is not None and f.optimizer_steps > 1:
            self.kv("optimizer steps (measured lines: totals over all of them): ", f.optimizer_steps)
        if f.fwd_step is not None:  # gradient accumulation: the whole step's forward too
            self.kv("measured fwd MACs per GPU, all micro-batches: ", macs_to_string(f.fwd_step.macs))
            self.kv("measured fwd flops per GPU, all micro-batches: ", number_to_string(f.fwd_step.flops))
            self.kv("measured fwd latency, all micro-batches: ", self.dur(f.fwd_step.latency))
            self.kv("measured bwd latency, all micro-batches: ", self.dur(bwd.latency))
        self.kv("measured bwd MACs per GPU: ", macs_to_string(bwd.macs))
        self.kv("measured bwd flops per GPU: ", number_to_string(bwd.flops))
        if rec is not None:
            # Activation checkpointing re-runs forwards inside the backward pass: the
            # hardware did that work too, so the bwd rates count it (DeepSpeed's
            # recompute_fwd_factor, measured); "model FLOPS" below leaves it out.
            self.kv("measured recompute MACs per GPU (activation checkpointing): ", macs_to_string(rec.macs))
            self.kv("measured recompute flops per GPU (activation checkpointing): ", number_to_string(rec.flops))
            self.kv("recompute latency (part of bwd latency): ", self.dur(rec.latency))
            self.kv("measured bwd FLOPS per GPU (recompute included): ",
                    self.fps(t.bwd_flops_per_second))
            self.kv("measured fwd+bwd FLOPS per GPU (recompute included): ",
                    self.fps(t.fwd_bwd_flops_per_second))
        else:
            self.kv("measured bwd FLOPS per GPU = measured bwd flops / bwd latency: ",
                    self.fps(t.bwd_flops_per_second))
            self.kv("measured fwd+bwd FLOPS per GPU = fwd+bwd flops / fwd+bwd latency: ",
                    self.fps(t.fwd_bwd_flops_per_second))
        self.kv("measured step flops per GPU: ", number_to_string(step.flops))
        parts = "fwd + bwd + recompute + step" if rec is not None else "fwd + bwd + step"
        self.kv(f"measured iter flops per GPU = {parts} flops: ", number_to_string(t.iter_flops))
        self.kv(f"measured iter wall time ({_which_step(f)}): ", self.dur(t.iter_latency))
        self.kv("measured FLOPS per GPU = measured iter flops / iter wall time: ",
                self.fps(t.iter_flops_per_second))
        if t.model_flops_per_second is not None:
            self.kv("measured model FLOPS per GPU (recompute left out): ",
                    self.fps(t.model_flops_per_second))
        if t.samples_per_second is not None:
            # samples of every data-parallel rank (DeepSpeed's line above multiplies by the
            # world size, which overcounts under model parallelism)
            self.kv("measured samples/second = samples * dp_size / iter wall time: ",
                    self.per_second(t.samples_per_second))

    def _memory(self, m: MemoryTotals) -> None:
        """Memory of the span, counted from the tensors' storages."""
        self.kv("memory, params per GPU: ", bytes_to_string(m.params))
        self.kv("memory, grads per GPU: ", bytes_to_string(m.grads))
        self.kv("memory, optimizer state per GPU: ", bytes_to_string(m.optimizer_state))
        self.kv("memory, activations saved for backward per GPU: ", bytes_to_string(m.activations))
        phases = ", ".join(f"{_PHASE_SHORT.get(p, p)} {bytes_to_string(b)}" for p, b in m.phase_peaks.items())
        self.kv("memory, peak per GPU (everything live at once): ",
                bytes_to_string(m.peak) + (f" ({phases})" if phases else ""))
        self.kv("memory, live when profiling began, in the peak: ", bytes_to_string(m.live_at_start))
        self.kv("memory, peak allocated while profiling per GPU: ", bytes_to_string(m.peak_allocated))

    def _peak_buffer(self, p: PeakBuffer) -> None:
        """What makes the peak: one buffer, and whose it is when DeepSpeed ZeRO ran."""
        b = p.buffer
        where = f"{b.op} in the {_PHASE_SHORT.get(b.phase, b.phase)} of {b.module or 'the model'}"
        whose = (f"; under ZeRO-{p.zero_stage} it is DeepSpeed's bucket buffer (reduce_bucket_size or "
                 "allgather_bucket_size elements), not the model's" if p.zero_stage else "")
        self.kv("memory, peak allocated while profiling, its largest buffer per GPU: ",
                f"{bytes_to_string(b.bytes)} ({where}), the rest of it {bytes_to_string(p.rest)}{whose}")

    def _device_usage(self, u: DeviceUsage) -> None:
        """The GPU as NVML and the caching allocator saw it (lines left out where unknown)."""
        if u.samples:
            if u.utilization_mean is not None:
                self.kv(f"GPU utilization (NVML, {u.samples} samples): ",
                        f"mean {u.utilization_mean:g} %, max {u.utilization_max} %")
            else:  # a MIG slice: NVML keeps no utilisation of its own
                self.kv("GPU utilization (NVML): ", "n/a (NVML gives none for this device: a MIG slice)")
            if u.memory_used_max is not None:  # (set with the samples: each has the memory used)
                total = f" of {bytes_to_string(u.memory_total)}" if u.memory_total else ""
                self.kv("GPU memory used (NVML, whole device, all processes): ",
                        f"max {bytes_to_string(u.memory_used_max)}{total}")
        if u.allocator_peak is not None:
            self.kv("memory, caching allocator peak while profiling per GPU: ", bytes_to_string(u.allocator_peak))

    def _job(self, j: JobFigures) -> None:
        """The job over its ranks: each rank's place and work, their sum, the job's MFU."""
        mfu = _pct(100 * j.mfu) if j.mfu is not None else f"n/a ({j.why})"
        self.kv("job: FLOPs per step (sum over ranks), FLOPS over the slowest step, MFU: ",
                f"{number_to_string(j.flops)}, {self.fps(j.flops_per_second)}, {mfu}")
        if j.added is not None:
            share = _pct(100 * j.added / j.flops) if j.flops else "-"
            self.kv("job: FLOPs the parallel plan adds (redistributions, copies of modules left whole): ",
                    f"{number_to_string(j.added)} ({share} of the job's)")
        for row in j.ranks:
            where = ", ".join(f"{k} {v}" for k, v in row.coordinates.items()) or "-"
            self.kv(f"rank {row.rank} ({where}), MACs / FLOPs / step / params: ",
                    f"{macs_to_string(row.macs)} / {number_to_string(row.flops)} / {self.dur(row.step)} / "
                    f"{params_to_string(row.params)}")

    def _experts(self, e: ExpertLayer, gathered: bool) -> None:
        """A MoE layer: the tokens its experts took (per rank, or per expert here), its balance."""
        where = "rank" if gathered else "expert"
        self.kv(f"experts of {e.path or '<root>'!r}, tokens per {where} (imbalance: max / mean): ",
                f"{', '.join(map(str, e.tokens))} ({e.imbalance:.2f})")
        if e.params_active is not None:
            self.kv(f"experts of {e.path or '<root>'!r}, params used per token (top-{e.top_k:g}) / held by the layer: ",
                    f"{params_to_string(e.params_active)} / {params_to_string(e.params_total)}")

    def _pipeline(self, f: PipelineFigures) -> None:
        """A pipeline schedule's stages: work per micro-batch, bubble, traffic per neighbour."""
        size, batch = f.micro_batch_size, f"{f.micro_batches} micro-batches"
        if size is not None and f.global_batch is not None:
            batch = f"{_count(size)} x {batch} x dp = global batch {_count(f.global_batch)}"
        self.kv("pipeline (schedule, stages, batch): ",
                f"{f.schedule}, {f.num_stages} stages on {f.ranks} ranks, {batch}")
        for s in f.stages:
            name = "stage" if len(s.stages) == 1 else "stages"
            self.kv(f"pipeline {name} {', '.join(map(str, s.stages))} (rank {s.rank}), per micro-batch fwd / bwd: ",
                    f"{macs_to_string(s.fwd_macs)} in {self.dur(s.fwd_seconds)} / "
                    f"{macs_to_string(s.bwd_macs)} in {self.dur(s.bwd_seconds)}")
            self.kv(f"pipeline {name} {', '.join(map(str, s.stages))}, bubble (waited for its neighbours): ",
                    f"{self.dur(s.bubble)}, {_pct(100 * s.bubble_share)} of its {self.dur(s.step)} step "
                    f"(the schedule's ideal: {_pct(100 * f.ideal)})")
            for b in s.boundaries:
                self.kv(f"pipeline {name} {', '.join(map(str, s.stages))} <-> rank {b.peer} (sent / received): ",
                        f"{bytes_to_string(b.sent)} in {b.sends} / {bytes_to_string(b.received)} in {b.receives}, "
                        f"{self.dur(b.seconds)} in flight, {self.dur(b.exposed)} waited")

    def _ranks(self, f: RankFigures) -> None:
        """The ranks of a torch.distributed run, gathered on rank 0."""
        self.kv("ranks reporting: ", f"{f.healthy} of {f.world}")
        for rank, what in f.failed.items():
            self.kv(f"rank {rank} failed: ", f"{what} (left out of the figures over ranks)")
        if f.not_profiling:
            self.kv("ranks not profiling (never started a profile): ", ", ".join(map(str, f.not_profiling)))
        if f.missing:
            self.kv("ranks missing (no result within gather_timeout): ", ", ".join(map(str, f.missing)))
        it = f.iteration
        if it is not None:
            self.kv("iter wall time over ranks (min / mean / max): ",
                    " / ".join(self.dur(x) for x in (it.min, it.mean, it.max)))
        b = f.straggler
        if b is not None:
            # ranks that wait for each other end their steps together: what each did before it
            # waited tells which one the others waited for
            self.kv("straggler (by busy time: all but waiting for other ranks): ",
                    f"rank {b.rank}, busy {self.dur(b.busy)} against the other ranks' {self.dur(b.others)}: "
                    f"{self.dur(b.excess)} more ({_pct(b.share)} of its {self.dur(b.step)} step)")
            for r in f.busy:
                self.kv(f"rank {r.rank}, step / busy / waited for communication: ",
                        " / ".join(self.dur(x) for x in (r.step, r.busy, r.waited)))

    def rank_table(self, ranks: RankFigures | None) -> None:
        """Per module and phase, the latency over the ranks and the slowest rank."""
        if ranks is None or not ranks.modules:
            return
        self.add("", "------------------------------ Per-rank Profile ------------------------------",
                 "Latency over the ranks that reported (min / mean / max) and the slowest rank, per module and phase:")
        for m in ranks.modules:
            s = m.latency
            name = m.path or "<root>"
            self.add(f"    {name} ({m.type_name}) {_PHASE_LABELS[m.phase]}: "
                     f"{self.dur(s.min)} / {self.dur(s.mean)} / {self.dur(s.max)}, "
                     f"slowest rank {s.slowest}")

    def _anatomy(self, a: AnatomyFigures, recompute: bool = False) -> None:
        """Where this rank's iteration wall time went; the parts add up to it. Its bwd compute
        is the backward's operators' time, as the top module's bwd op time is, but without
        collectives, with the recompute (``recompute``: said where it ran) and, over several
        steps, the median step's: labelled so that it is not read as either."""

        def part(p: AnatomyPart) -> str:
            return f"{self.dur(p.seconds)} ({self.time_share(p.share)})"

        if a.counted is not None:  # the latencies above are a neighbouring step's, timed apart from this one
            self.kv("latencies above (fwd, bwd, step, iter): ",
                    "of the step before the profiled one, timed at its phases' boundaries only (not counted)")
            if a.median_of is None:
                self.kv("step anatomy, of the profiled step's wall time: ",
                        f"{self.dur(a.counted)} (the profiler's own time in it below)")
        if a.median_of is not None:  # the parts are one step's, the median one's; module times their own medians
            self.kv(f"step anatomy, of the median step's wall time ({a.median_of} steps): ",
                    f"{self.dur(a.total)} (its parts below; each module's times are their own medians)")
        self.kv("step anatomy, fwd compute: ", part(a.forward))
        self.kv("step anatomy, bwd compute (recompute included): " if recompute else "step anatomy, bwd compute: ",
                part(a.backward))
        self.kv("step anatomy, optimizer step compute: ", part(a.step))
        self.kv("step anatomy, framework and hooks (outside ops and collectives): ", part(a.framework))
        self.kv("step anatomy, communication waited for (exposed): ", part(a.communication))
        self.kv("step anatomy, other (data loading, loss, idle): ", part(a.other))
        self.kv("step anatomy, profiler (flopsight's own time left in the phases): ", part(a.profiler))
        if a.overlapped is not None:
            self.kv("communication hidden behind compute (overlapped): ", self.dur(a.overlapped))

    def _generation(self, gf: GenerationFigures, batch_printed: bool) -> None:
        """generate(): the prompt's prefill apart from the decode steps, then the whole call."""
        u = self.unit
        g = gf.stats
        if not batch_printed:
            self.kv(f"batch size per {u}: ", g.batch_size)
        self.kv("new tokens per sequence (prefill + decode steps): ", g.new_tokens)
        if g.encoder is not None:
            # encoder-decoder models: the encoder runs once, outside the model's calls
            self.kv(f"encoder MACs per {u} (part of prefill): ", macs_to_string(g.encoder.macs))
            self.kv(f"encoder flops per {u} (part of prefill): ", number_to_string(g.encoder.flops))
            self.kv("encoder latency (part of prefill): ", self.dur(g.encoder.latency))
        self.kv(f"prefill MACs per {u}: ", macs_to_string(g.prefill.macs))
        self.kv(f"prefill flops per {u}: ", number_to_string(g.prefill.flops))
        self.kv("prefill latency: ", self.dur(g.prefill.latency))
        self.kv(
            f"prefill FLOPS per {u} = prefill flops / prefill latency: ",
            self.fps(gf.prefill_flops_per_second),
        )
        self.kv("decode steps: ", g.decode.calls)
        if g.decode.calls:
            self.kv(f"decode MACs per {u} per step: ", macs_to_string(g.per_step.macs))
            self.kv(f"decode flops per {u} per step: ", number_to_string(g.per_step.flops))
            self.kv("decode latency per step: ", self.dur(g.per_step.latency))
            self.kv(
                f"decode FLOPS per {u} = decode flops / decode latency: ",
                self.fps(gf.decode_flops_per_second),
            )
            self.kv("decode MACs per generated token = per step / batch size: ", macs_to_string(g.per_token.macs))
            self.kv("decode flops per generated token = per step / batch size: ", number_to_string(g.per_token.flops))
            self.kv(
                "decode latency per generated token = per step / batch size: ",
                self.dur(g.per_token.latency),
            )
            self.kv(
                "decode tokens/second = batch size * decode steps / decode latency: ",
                self.per_second(gf.decode_tokens_per_second),
            )
        self.kv(f"generate() MACs per {u}: ", macs_to_string(g.total.macs))
        self.kv(f"generate() flops per {u}: ", number_to_string(g.total.flops))
        self.kv("generate() latency: ", self.dur(g.total.latency))
        self.kv(
            f"generate() FLOPS per {u} = generate() flops / generate() latency: ",
            self.fps(gf.flops_per_second),
        )
        self.kv(
            "tokens/second = batch size * new tokens / generate() latency: ",
            self.per_second(gf.tokens_per_second),
        )

    # -- aggregated -----------------------------------------------------------------------
    def aggregated(self, a: AggregatedProfile) -> None:
        # DeepSpeed's header word for word; a measured backward adds two lines to each depth
        self.add(f"Top {a.top_modules} modules in terms of params, MACs or fwd latency at different model depths:")
        if a.backward is None:
            for d in a.forward:
                self.add(f"depth {d.depth}:", *self._depth_lines(d))
            return
        self.add("(flopsight: with the backward measured, each depth also lists its top modules by bwd MACs "
                 "and bwd op time, the time of their backward operators)")
        for d, b in zip(a.forward, a.backward):
            self.add(
                f"depth {d.depth}:",
                *self._depth_lines(d),
                f"    bwd MACs    - { {k: macs_to_string(v) for k, v in b.macs} }",
                f"    bwd op time - { {k: self.dur(v) for k, v in b.latency} }",
            )

    def _depth_lines(self, d: DepthSummary) -> list[str]:
        def params(name: str, n: int) -> str:  # tied weights marked, as in the detailed profile
            return params_to_string(n) + shared_params_mark(d.params_shared.get(name))

        return [
            f"    params      - { {k: params(k, v) for k, v in d.params} }",
            f"    MACs        - { {k: macs_to_string(v) for k, v in d.macs} }",
            f"    fwd latency - { {k: self.dur(v) for k, v in d.latency} }",
        ]

    # -- efficiency -----------------------------------------------------------------------
    def efficiency(self, report: Report) -> None:
        """The efficiency lines (the peak used beside every ratio) and, for a transformer
        language model, the analytic estimate beside the measured count."""
        section = report.efficiency
        if section is None:  # (format_text calls this only with one)
            return
        lines = format_efficiency(section) + format_transformer_check(report.transformer)
        if not lines:
            return
        self.add("", "Efficiency (docs/efficiency.md):")
        for label, value in lines:
            self.kv(f"{label}: ", value)

    # -- detailed -------------------------------------------------------------------------
    def figure_items(self, m: ModuleFigures, training: bool, mean: bool = False) -> list[str]:
        """One module's figures as DeepSpeed lists them; ``mean`` marks latencies that are
        the mean over the copies of a collapsed run."""
        mean_of = "mean " if mean else ""
        # tied weights count in each module holding them (the total counts them once): marked
        items = [
            f"{params_to_string(m.params)} = {_pct(m.params_share)} Params{shared_params_mark(m.params_shared)}",
            f"{macs_to_string(m.macs)} = {_pct(m.macs_share)} MACs",
            f"{mean_of}{self.dur(m.latency)} = {self.time_share(m.latency_share)} latency",
            self.rate(m.flops_per_second),
        ]
        if training:
            items += [
                f"{macs_to_string(m.bwd_macs)} = {_pct(m.bwd_macs_share)} bwd MACs",
                f"{mean_of}{self.dur(m.bwd_latency)} = {self.time_share(m.bwd_latency_share)} bwd op time",
                f"{self.rate(m.bwd_flops_per_second)} bwd",
            ]
        return items

    @staticmethod
    def tail_items(e: TreeEntry) -> list[str]:
        """What follows the figures: the module's state, what the depth limit hides, and
        its ``extra_repr`` last, as nn.Module prints it."""
        items = []
        if e.ignored:
            items.append("ignored")
        elif not e.ran:
            items.append("not called")
        if e.hidden:
            items.append(f"{e.hidden} submodule{'s' if e.hidden > 1 else ''} not shown")
        if e.extra_repr:
            items.append(e.extra_repr)
        return items

    def entry_text(self, e: TreeEntry, training: bool) -> str:
        """An entry's figures: a module's own (DeepSpeed's line); inside a collapsed run, one
        copy's with the mean latency; for a run, all its copies' then one copy's."""
        each = self.figure_items(e.figures, training, mean=e.mean)
        if e.all_copies is not None:
            every = ", ".join(self.figure_items(e.all_copies, training))
            each = [f"all: {every}; each: {each[0]}", *each[1:]]
        return ", ".join(each + self.tail_items(e))

    def tree_lines(self, tree: ModuleTree) -> list[str]:
        """The model as nn.Module.__repr__ nests it, one entry after the other."""
        lines: list[str] = []
        for e in tree.entries:
            indent = "  " * e.level
            if isinstance(e, TreeEnd):
                lines.append(f"{indent})")
                continue
            if isinstance(e, TreeAlias):
                lines.append(f"{indent}({e.alias}): same module as ({e.key})")
                continue
            prefix = f"({e.key}): " if e.key is not None else ""
            title = f"{e.count} x {e.type_name}" if e.count > 1 else e.type_name
            extra = self.entry_text(e, tree.training).split("\n")
            if len(extra) == 1 and not e.opened:
                lines.append(f"{indent}{prefix}{title}({extra[0]})")
                continue
            lines.append(f"{indent}{prefix}{title}(")
            lines.extend(indent + "  " + line for line in extra)
            if not e.opened:  # an opened entry is closed by its TreeEnd, after its children
                lines.append(f"{indent})")
        return lines

    def detailed(self, tree: ModuleTree) -> None:
        u = self.unit
        how = ", ".join(tree.timing)
        order = [
            "params, percentage of total params, MACs, percentage of total MACs, fwd latency, "
            "percentage of total fwd latency, fwd FLOPS"
        ]
        # DeepSpeed's three notes word for word; flopsight's own after them
        note = _LATENCY_NOTES.get(tree.timing[0] if tree.timing else "", _LATENCY_NOTE)
        notes = [note.format(how=f" ({how})" if how else "")]
        if tree.training:
            order.append("then, with the backward measured (flopsight): bwd MACs, percentage of total bwd MACs, "
                         "bwd op time, percentage of total bwd op time, bwd FLOPS")
            notes.append(
                "5. A module's bwd op time is the time of the backward operators attributed to it, not a wall time: "
                "the top module's is not the bwd latency above, the backward pass's wall time, which also holds "
                "the autograd engine's work, hooks and framework code between those operators (ZeRO's and FSDP's "
                "parameter management: the step anatomy's framework part). A module's bwd figures are the measured "
                "backward of what its forward computed (gradient accumulation into its parameters included); "
                "frozen parameters and inputs that need no gradient cost no backward. The optimizer step is not "
                "attributed to modules (see the summary)."
            )
        if tree.collapse:
            notes.append(
                f"{4 + len(notes)}. Consecutive identical siblings (same type, extra_repr, submodules, params, MACs "
                "and flops) are collapsed into one entry, \"(0-11): 12 x Layer(all: ...; each: ...)\": all copies' "
                "figures summed, then one copy's, its latency the mean over the copies. The lines inside a collapsed "
                "entry are one copy's, their latencies the mean over the copies."
            )
        if tree.shared_params:
            notes.append(
                f"{4 + len(notes)}. \"(N shared)\" after a module's params: N of them are tied to (held by) modules "
                "outside it too. Each module that holds a shared parameter counts it, so the percentages of "
                "siblings can add up past 100%; the total counts it once (docs/conventions.md)."
            )
        if tree.detail_depth is not None:
            notes.append(
                f"{4 + len(notes)}. Modules deeper than depth {tree.detail_depth} are not shown (detail_depth="
                f"{tree.detail_depth}); their figures are included in their parents'."
            )
        self.add(
            "",
            f"------------------------------ Detailed Profile per {u} ------------------------------",
            "Each module profile is listed after its name in the following order: ",
            *order,
            "",
            "Note: 1. A module can have torch.nn.module or torch.nn.functional to compute logits (e.g. "
            "CrossEntropyLoss). They are not counted as submodules, thus not to be printed out. However they "
            "make up the difference between a parent's MACs (or latency) and the sum of its submodules'.",
            "2. Number of floating-point operations is a theoretical estimation, thus FLOPS computed using that "
            "could be larger than the maximum system throughput.",
            "3. The fwd latency listed in the top module's profile is directly captured at the module forward "
            "function in PyTorch, thus it's less than the fwd latency shown above which is captured in DeepSpeed.",
            *notes,
            "",
            *self.tree_lines(tree),
        )

    # -- operators ------------------------------------------------------------------------
    def operators(self, p: OperatorProfile) -> None:
        """Per module (its submodules' operators included), for each phase measured, its
        top operators by flops and by latency; the whole model's first."""
        width = max(24, p.longest_name)
        self.add(
            "",
            f"------------------------------ Operator Profile per {self.unit} ------------------------------",
            f"Top {p.top} operators of each module by flops and by latency, for each phase measured. A module's "
            "operators include its submodules' (inclusive); the first entry is the whole model's.",
            "Percentages are of the entry's operators in that phase. " + (
                "latency: the operators' own time, measured in the counting pass (the modules were timed in calls "
                "of their own: there an operator's time can exceed its module's fwd latency). " if p.counting_pass
                else "latency: the operators' own time, measured in the calls that timed the modules. ")
            + "bytes: read and written by the operators (docs/conventions/bytes.md).",
        )
        if any(o.row.kernel_time is not None for e in p.entries for t in e.tables for o in t.by_flops + t.by_latency):
            self.add("device: the time of the kernels the operator launched, measured in the timed pass "
                     "(kernels=True; see the kernels per module below).")
        if p.depth is not None:
            self.add(f"Modules down to depth {p.depth}.")
        if p.collapse:
            self.add("A collapsed entry, 'layers.(0-11)' or 'layers.(0-11).attention', "
                     "sums the operators of every copy.")
        for entry in p.entries:
            label = self._op_label(entry)
            self.add("")
            for t in entry.tables:
                title = f"{label}, {_PHASE_SHORT.get(t.phase, t.phase)}"
                if t.by_flops == t.by_latency and t.by_flops:
                    self._op_table(title, p.top, "flops and by latency", t.by_flops, width)
                    continue
                if t.by_flops:
                    self._op_table(title, p.top, "flops", t.by_flops, width)
                if t.by_latency:
                    self._op_table(title, p.top, "latency", t.by_latency, width)
                if not t.by_flops and not t.by_latency:
                    self.add(f"{title}: {t.operators} operator{'s' if t.operators > 1 else ''}, no flops and no "
                             "latency measured")

    def kernels(self, p: KernelProfile) -> None:
        """Per module (its submodules' kernels included), for each phase, its top kernels by
        device time; the whole model's first."""
        what = ("CUDA kernels, memcpys and memsets, timed on the GPU" if p.source == "cuda"
                else "CPU operators, each by its self time (its time less the operators it called)")
        self.add(
            "",
            f"------------------------------ Kernels per {self.unit} ------------------------------",
            f"Kernels: {what}; each charged to the module and phase of the operator that launched it "
            f"(docs/conventions/timing.md). Top {p.top} of each module, its submodules' included.",
            f"All kernels: {self.dur(p.seconds)}; outside the model's calls: "
            f"{self.dur(p.unassigned_seconds)} "
            f"({_pct(100 * p.unassigned_seconds / p.seconds if p.seconds else 0)}).",
        )
        width = max([24, *(len(k.name) for e in p.entries for k in e.kernels)])
        width = min(width, 72)
        for e in p.entries:
            label = "whole model" if e.path == "" else e.path
            count = f"{e.count} x " if e.count > 1 else ""
            self.add("", f"{label} ({count}{e.type_name}), {_PHASE_SHORT.get(e.phase, e.phase)}: {e.names} "
                         f"kernel{'s' if e.names > 1 else ''}, {self.dur(e.seconds)}",
                     f"    {'kernel':<{width}} {'calls':>7} {'time':>10} {'share':>8}")
            for k in e.kernels:
                name = k.name if len(k.name) <= width else k.name[: width - 3] + "..."
                self.add(f"    {name:<{width}} {_count(k.calls):>7} "
                         f"{self.dur(k.seconds):>10} {_pct(k.share):>8}")

    @staticmethod
    def _op_label(e: OperatorEntry) -> str:
        if e.path == "":
            return f"whole model ({e.type_name})"
        if e.count > 1:
            return f"{e.path} ({e.count} x {e.type_name}, summed)"
        if e.copies > 1:
            return f"{e.path} ({e.type_name}, summed over {e.copies} copies)"
        return f"{e.path} ({e.type_name})"

    def _op_table(self, title: str, top: int, what: str, ranked: tuple[OperatorShare, ...], width: int) -> None:
        device = any(o.row.kernel_time is not None for o in ranked)  # kernels recorded: their time too
        self.add(f"{title}, top {top} by {what}:",
                 f"    {'operator':<{width}} {'calls':>7} {'MACs':>13} {'flops':>10} {'% flops':>8} "
                 f"{'latency':>10} {'% latency':>9} {'bytes':>10}" + (f" {'device':>10}" if device else ""))
        for o in ranked:
            r, s = o.row, o.row.stats
            moved = bytes_to_string(r.bytes) if r.bytes is not None else "-"
            kernels = f" {self.dur(r.kernel_time or 0.0):>10}" if device else ""
            self.add(f"    {r.name:<{width}} {_count(s.calls):>7} {macs_to_string(s.macs):>13} "
                     f"{number_to_string(s.flops):>10} {_pct(o.flops_share):>8} "
                     f"{self.dur(s.latency):>10} {self.time_share(o.latency_share):>9} {moved:>10}{kernels}")


#: the detailed profile's 4th note: what a module's latency is, by timing method (``{how}``: " (method, clock)")
_LATENCY_NOTE = ("4. flopsight measures each latency at the module's call and leaves the profiler's own overhead out"
                 "{how}: the top module's fwd latency is the forward's, not less than it.")
_LATENCY_NOTES = {
    "device": "4. flopsight: each module's fwd latency is its kernels' GPU time; the top module's is the forward's, "
              "timed uninstrumented{how}: the rest of it is the GPU's idle time.",
    "phases": "4. flopsight times the fwd, bwd and step latencies with CUDA events at the phases' boundaries "
              "only{how}; a module's latency inside them is the host's time at its call (its launches).",
}

#: syncing operators named on the summary's line
_SYNCS_LISTED = 5


def format_text(report: Report) -> str:
    """The text of a :class:`~flopsight.analysis.report.Report` (ends with a newline; the
    format table's entry)."""
    text = _Text(meta=report.on_meta_device)
    text.summary(report)
    if report.efficiency is not None:
        text.efficiency(report)
    text.add("", f"----------------------------- Aggregated Profile per {text.unit} -----------------------------")
    text.aggregated(report.aggregated)
    text.rank_table(report.ranks)
    if report.tree is not None:
        text.detailed(report.tree)
    if report.operators is not None:
        text.operators(report.operators)
    if report.kernels is not None:
        text.kernels(report.kernels)
    text.add(RULE)
    return "\n".join(text.lines) + "\n"


def render_text(result: ProfileResult, **options: Any) -> str:
    """The whole report as one string (ends with a newline). ``options`` are
    :class:`~flopsight.analysis.report_options.ReportOptions`' (the text report reads
    ``profile_step``, ``module_depth``, ``top_modules``, ``detailed``, ``parallel``,
    ``recompute_fwd_factor``, ``ops``, ``collapse``, ``detail_depth``, ``peak``, ``efficiency``
    and ``dtype``).

    ``parallel`` gives the world, data-parallel and model-parallel sizes and the batch size
    per GPU (a DeepSpeed engine's); without it a training report takes the world size
    recorded in the result (torch.distributed's, else 1) and the batch size it measured.
    ``recompute_fwd_factor`` is DeepSpeed's (its training lines estimate the backward as
    ``2 + recompute_fwd_factor`` times the forward).

    Beyond DeepSpeed, off by default so the layout stays DeepSpeed's:

    * ``ops=N``: an operator profile after the detailed one: per module down to
      ``module_depth`` (and ``detail_depth``), its submodules included, the ``N`` top
      operators by flops and by latency, with their bytes moved, for each phase; the whole
      model's first (``result.ops(phase)``).
    * ``collapse=True``: consecutive identical siblings, ``(0-11): 12 x BertLayer``, as one
      entry of the detailed profile (and of the operator profile).
    * ``detail_depth=N``: the detailed profile stops at depth ``N`` (the root is depth 0).
    * ``peak`` (FLOP/s, a device name, ``"cpu"`` or a :class:`~flopsight.hardware.Peak`) or
      ``efficiency=True`` (the peak of the device the result recorded, when the table knows
      it): efficiency lines after the summary, the peak beside every ratio, and for a
      transformer language model the analytic estimate beside the measured flops.
      ``dtype`` picks the peak table's column (``"bf16"`` under autocast...).

    >>> import torch, flopsight
    >>> model = torch.nn.Sequential(*(torch.nn.Linear(8, 8) for _ in range(4)))
    >>> result = flopsight.profile(model, torch.ones(2, 8), clock=flopsight.FakeClock())
    >>> text = render_text(result, collapse=True)
    >>> print(*next(line for line in text.splitlines() if "4 x Linear" in line).split("; "), sep="\\n")
      (0-3): 4 x Linear(all: 288 = 100% Params, 512 MACs = 100% MACs, 4 ms = 44.44% latency, 272 KFLOPS
    each: 72 = 25% Params, 128 MACs = 25% MACs, mean 1 ms = 11.11% latency, 272 KFLOPS, in_features=8, out_features=8, bias=True)
    >>> print(render_text(result, peak=1e12).split("Efficiency")[1].splitlines()[2].rstrip())
    fwd fraction of peak (peak 1 TFLOPS fp32, given):                       <0.01%
    """  # noqa: E501  (a doctest's expected output, as printed)
    return format_text(Report(result, ReportOptions.of(**options)))


def render_aggregated(result: ProfileResult, *, module_depth: int = -1, top_modules: int = 1) -> str:
    """Only the aggregated profile: the top module types per depth."""
    text = _Text()
    text.aggregated(aggregated_profile(result, ReportOptions(module_depth=module_depth, top_modules=top_modules)))
    return "\n".join(text.lines) + "\n"
