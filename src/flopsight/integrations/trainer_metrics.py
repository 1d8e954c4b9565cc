"""What the trainer callbacks log, computed once: the figures of a profiled training step.

Both callbacks (:mod:`.hf`, :mod:`.lightning`) profile one optimizer step, chosen the same
way (:data:`PROFILE_STEP`), and log its figures under the same names (:data:`METRICS`,
prefixed :data:`PREFIX`): :func:`step_figures` computes every one of them, :func:`logged`
names them. The argument checks both callbacks share are here too.

>>> import torch, flopsight
>>> from flopsight.analysis.efficiency import efficiency
>>> model = torch.nn.Linear(8, 4)
>>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
>>> with flopsight.Profiler(model, optimizer=opt, clock=flopsight.FakeClock()) as prof:
...     model(torch.ones(2, 8)).sum().backward()
...     opt.step()
>>> f = step_figures(prof.result, efficiency(prof.result, 1e9))
>>> f.fwd_flops, f.micro_batches, f.tokens_per_second, f.mfu == f.model_flops / f.latency / 1e9
(136, 1, None, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._checks import check_int
from ..analysis.efficiency import Efficiency
from ..analysis.report_figures import parallel_of, rate, training_figures
from ..hardware import canonical_dtype
from ..result.profile_result import ProfileResult

__all__ = ["StepFigures", "step_figures", "named", "logged", "check_dtype", "check_profile_step", "METRICS",
           "PREFIX", "PROFILE_STEP"]

#: what every name both callbacks log starts with
PREFIX = "flopsight/"

#: how both callbacks (and DeepSpeed's ``flops_profiler.profile_step``) number the step they
#: profile: the optimizer steps already taken when it begins (the Trainer's ``global_step``
#: then). 0 is the run's first step, whose one-time costs (optimizer state, allocator warm-up)
#: the result then marks; the default 1 skips it.
PROFILE_STEP = 1

#: logged name (after :data:`PREFIX`) -> (its :class:`StepFigures` field, unit, definition),
#: in the order logged; a figure that is None (not measured) is not logged. Figures are this
#: rank's, but ``samples_per_second`` and ``tokens_per_second``, the whole job's.
METRICS = {
    "iter_latency_s": ("latency", "s", "wall time of the profiled step (this rank)"),
    "fwd_latency_s": ("fwd_latency", "s", "the step's forward passes, summed over micro-batches"),
    "bwd_latency_s": ("bwd_latency", "s", "the step's backward passes, summed"),
    "step_latency_s": ("step_latency", "s", "optimizer.step()"),
    "fwd_flops": ("fwd_flops", "FLOP", "the forward passes of every micro-batch of the step"),
    "bwd_flops": ("bwd_flops", "FLOP", "the backward passes, measured (not 2x the forward)"),
    "step_flops": ("step_flops", "FLOP", "optimizer.step()"),
    "flops": ("flops", "FLOP", "fwd + bwd + step + recompute: what the hardware did"),
    "model_flops": ("model_flops", "FLOP", "fwd + bwd + step: the recompute left out"),
    "flops_per_second": ("flops_per_second", "FLOP/s", "flops / iter_latency_s"),
    "micro_batches": ("micro_batches", "count", "forward calls of the model in the step"),
    "recompute_flops": ("recompute_flops", "FLOP", "activation checkpointing's recomputed forward; only when it ran"),
    "samples_per_second": ("samples_per_second", "samples/s",
                           "samples of the step x data-parallel size / iter_latency_s: the whole job's"),
    "tokens_per_second": ("tokens_per_second", "tokens/s", "the same with tokens, when the model's main input "
                                                           "holds token ids (Hugging Face Trainer)"),
    "mfu": ("mfu", "fraction", "model_flops / iter_latency_s / peak; only when a peak is known"),
    "hfu": ("hfu", "fraction", "as mfu with flops; only when activation checkpointing ran"),
    "memory_peak_bytes": ("memory_peak_bytes", "bytes", "with memory=True: the peak of everything live at once"),
}


@dataclass(frozen=True)
class StepFigures:
    """A profiled training step, this rank's (None: not measured, or nothing to divide by).

    Latencies in seconds; FLOPs measured (``flops`` every phase's, ``model_flops`` with the
    recomputed forward left out); ``micro_batches`` as the result counted them, ``batches``
    and ``samples`` as the caller counted them (None: not counted). Rates: ``flops_per_second``
    (every FLOP over the step's wall time), ``samples_per_second`` and ``tokens_per_second``
    (every data-parallel rank's, as the report's "measured samples/second"), and this device's
    ``device_*`` rates (None when no time was measured). ``mfu``/``hfu`` need a known peak.
    """

    latency: float
    fwd_latency: float
    bwd_latency: float
    step_latency: float
    fwd_flops: int
    bwd_flops: int
    step_flops: int
    recompute_flops: int | None
    flops: int
    model_flops: int
    flops_per_second: float
    micro_batches: int
    batches: int | None
    samples: int | None
    samples_per_second: float | None
    tokens_per_second: float | None
    device_batches_per_second: float | None
    device_samples_per_second: float | None
    device_flops_per_second: float | None
    mfu: float | None
    hfu: float | None
    memory_peak_bytes: int | None


def step_figures(result: ProfileResult, eff: Efficiency | None, *, batches: int | None = None,
                 samples: int | None = None, tokens: int | None = None) -> StepFigures:
    """The figures of the training step ``result`` profiled; ``eff`` its efficiency (for MFU
    and HFU), ``batches``, ``samples`` and ``tokens`` what the caller counted."""
    it = result.iteration
    parallel = parallel_of(result, None)
    timed = it.latency > 0
    return StepFigures(
        latency=it.latency,
        fwd_latency=it.forward.latency,
        bwd_latency=it.backward.latency,
        step_latency=it.step.latency,
        fwd_flops=it.forward.flops,
        bwd_flops=it.backward.flops,
        step_flops=it.step.flops,
        recompute_flops=it.recompute.flops if it.recompute.calls or it.recompute.flops else None,
        flops=it.flops,
        model_flops=it.model_flops,
        flops_per_second=it.flops_per_second,
        micro_batches=it.micro_batches,
        batches=batches,
        samples=samples or None,
        # every data-parallel rank's, as the report's "measured samples/second"
        samples_per_second=(rate(samples * parallel.dp_size, it.latency) if samples
                            else training_figures(result, parallel, it=it).samples_per_second),
        tokens_per_second=rate(tokens * parallel.dp_size, it.latency) if tokens else None,
        device_batches_per_second=batches / it.latency if timed and batches is not None else None,
        device_samples_per_second=samples / it.latency if timed and samples else None,
        device_flops_per_second=it.model_flops / it.latency if timed else None,
        mfu=eff.mfu if eff is not None else None,  # None without a peak: never guessed
        hfu=eff.hfu if eff is not None else None,
        memory_peak_bytes=result.memory.peak if result.memory is not None else None,
    )


def named(figures: StepFigures, names: dict[str, str], prefix: str = "") -> dict[str, float]:
    """``prefix + name -> figure`` for each ``name -> figure field`` of ``names``, in its
    order, the figures that are None left out."""
    picked = {prefix + name: getattr(figures, field) for name, field in names.items()}
    return {name: value for name, value in picked.items() if value is not None}


def check_dtype(dtype: Any) -> str | None:
    """The peak table's column for ``dtype`` (None stays None); its error names ``dtype``."""
    return None if dtype is None else canonical_dtype(dtype)


def logged(figures: StepFigures) -> dict[str, float]:
    """What both callbacks log of ``figures``: :data:`METRICS`' names, prefixed :data:`PREFIX`."""
    return named(figures, {name: spec[0] for name, spec in METRICS.items()}, PREFIX)


def check_profile_step(step: Any) -> int:
    """``step`` once known a valid :data:`PROFILE_STEP`-style number; its error names ``profile_step``."""
    return check_int(step, "profile_step", low=0,
                     what="the optimizer steps taken before the profiled one; 0 is the first step")
