"""What the trainer callbacks log, computed once: the figures of a profiled training step.

Both callbacks (:mod:`.hf`, :mod:`.lightning`) profile one optimizer step and log its
figures under their own names (``flopsight/...`` for the Trainer's logs, the names of
Lightning's ``ThroughputMonitor``): :func:`step_figures` computes every one of them and each
callback's table picks and names those it logs. The argument checks both callbacks share
are here too.

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

from ..analysis.efficiency import Efficiency
from ..analysis.report_figures import parallel_of, rate, training_figures
from ..hardware import canonical_dtype
from ..result.profile_result import ProfileResult

__all__ = ["StepFigures", "step_figures", "named", "check_dtype"]


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
        samples_per_second=training_figures(result, parallel, it=it).samples_per_second,
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
