"""The figures the HTML page embeds beside the result's own JSON: JSON-ready numbers.

The iteration and its step anatomy, coverage, every module's spread over the ranks and each
rank's iteration, and the efficiency analysis (:func:`~.efficiency.efficiency_dict`; the
page colours by achieved FLOPS relative to the model's best module without it).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..result.profile_result import ProfileResult
from .efficiency import efficiency_dict
from .ranks import rank_figures

__all__ = ["derived"]


def derived(result: ProfileResult, peak: Any = None) -> dict[str, Any]:
    """What the page shows beyond ``to_dict()``: the iteration's figures and step anatomy,
    rank figures (None in one process), coverage and efficiency (None without data).

    >>> import torch, flopsight
    >>> d = derived(flopsight.profile(torch.nn.Linear(2, 2), torch.ones(1, 2)))
    >>> d["ranks"], d["iteration"]["forward"]["macs"], d["coverage"]["fraction"]
    (None, 4, 1.0)
    """
    it = result.iteration
    coverage = result.coverage
    return {
        "phases": result.phases,
        "iteration": {
            "latency": it.latency,
            "samples": it.samples,
            "flops": it.flops,
            "model_flops": it.model_flops,
            "flops_per_second": it.flops_per_second,
            "samples_per_second": it.samples_per_second,
            **{phase: getattr(it, phase)._asdict() for phase in ("forward", "backward", "recompute", "step")},
            "communication": dataclasses.asdict(it.communication),
            # the latencies a neighbouring step timed (not counted); the anatomy is the counted step's
            "timed": it.timed,
            "counted_latency": it.counted_latency,
            # several steps: the anatomy and the latencies are the median step's, of this many
            "median_of": result.samples.count if result.samples is not None and result.samples.count > 1 else None,
        },
        "anatomy": dataclasses.asdict(it.anatomy) if it.anatomy is not None else None,
        "coverage": {**dataclasses.asdict(coverage), "fraction": coverage.fraction},
        "ranks": _ranks(result),
        "efficiency": efficiency_dict(result, peak=peak),
        "generation": _generation(result),
    }


def _generation(result: ProfileResult) -> dict[str, Any] | None:
    """A generate() profile as the text report splits it: the prefill (with the encoder's pass
    of an encoder-decoder), the decode steps (their total, average per step and per token, and
    each step's time), what ran between the calls, and the total; None for other profiles."""
    g = result.generation
    if g is None:
        return None
    stats = {name: getattr(g, name)._asdict()
             for name in ("prefill", "decode", "per_step", "per_token", "total", "other")}
    return {**stats, "encoder": g.encoder._asdict() if g.encoder is not None else None,
            "encoder_paths": list(g.encoder_paths), "new_tokens": g.new_tokens, "batch_size": g.batch_size,
            "decode_steps": [c.stats.latency for c in result.root_calls[1:]]}


def _ranks(result: ProfileResult) -> dict[str, Any] | None:
    """Rank figures for every module (the detail panel shows any module's spread) and each
    rank's own iteration figures and step anatomy (the per-rank bars)."""
    figures = rank_figures(result, depth=None)
    if figures is None:
        return None
    per_rank: list[dict[str, Any] | None] = []
    for rank, r in enumerate(result.ranks):
        if r is None:
            per_rank.append(None)
            continue
        it = r.iteration
        per_rank.append({
            "rank": rank,
            "latency": it.latency,
            "flops": it.flops,
            "anatomy": dataclasses.asdict(it.anatomy) if it.anatomy is not None else None,
        })
    modules: dict[str, dict[str, Any]] = {}
    for m in figures.modules:
        modules.setdefault(m.path, {})[m.phase] = m.latency._asdict()
    return {
        "world": figures.world,
        "missing": figures.missing,
        "failed": {str(rank): what for rank, what in figures.failed.items()},
        "not_profiling": figures.not_profiling,
        "iteration": figures.iteration._asdict() if figures.iteration is not None else None,
        "busy": [b.to_dict() for b in figures.busy],
        "straggler": figures.straggler.to_dict() if figures.straggler is not None else None,
        "per_rank": per_rank,
        "modules": modules,
    }
