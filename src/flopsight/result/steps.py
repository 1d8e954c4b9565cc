"""One result from several profiled steps (or passes): counts from one step, times as medians,
every sample kept (:class:`~.samples.StepSamples`).

Each step is profiled on its own (a result per step); :func:`combine_steps` keeps the step of
median wall time as the result (its counts, spans, collectives and timeline, which add up to
that step), gives every module's latency in each phase (and each op's) the median over the
steps, and records each step's figures in ``result.samples``. The step anatomy is read at the
median step too (``result.iteration``: for an even count, the mean of the two middle steps'
parts, so that its parts add up to the median step time).

>>> import torch, flopsight
>>> clock = flopsight.FakeClock()
>>> one = [flopsight.profile(torch.nn.Linear(4, 2), torch.ones(1, 4), clock=clock) for _ in range(3)]
>>> r = combine_steps(one, "pass")
>>> r.samples.count, r.total.forward.macs == one[0].total.forward.macs
(3, True)
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence

from .iteration import compute_by_module
from .profile_result import ProfileResult
from .records import ModuleStats
from .samples import StepSamples

__all__ = ["step_figures", "combine_steps", "as_first_step"]


def step_figures(result: ProfileResult, unit: str = "step") -> dict[str, float]:
    """The time figures of one step's (or pass's) result: its ``"wall"`` time (a step's whole
    span; a pass's top-level calls), each phase's wall time and, where a backward or an
    optimizer step ran, each part of its anatomy (``"anatomy.<part>"``)."""
    figures: dict[str, float] = {}
    it = result.iteration
    for phase in ("forward", "backward", "step"):
        if phase in result.spans:
            figures[phase] = sum(result.spans[phase])
    if unit == "step":
        figures["wall"] = it.latency
    else:
        figures["wall"] = sum(c.stats.latency for c in result.calls) or result.total.forward.latency
    if it.anatomy is not None and ("backward" in result.spans or "step" in result.spans):
        for part, seconds in dataclasses.asdict(it.anatomy).items():
            figures[f"anatomy.{part}"] = seconds
        figures["communication.overlapped"] = it.communication.overlapped
    return figures


def _module_samples(results: Sequence[ProfileResult]) -> dict[str, dict[str, tuple[float, ...]]]:
    """Per module, per phase: its latency with its submodules' (inclusive) in each step, in
    every phase its subtree ran in (a container whose children alone ran the backward has a
    backward sample too: its median is then its own, not a sum of its children's medians)."""
    out: dict[str, dict[str, list[float]]] = {}
    for r in results:
        for node in r.walk():
            for phase in node.inclusive:
                out.setdefault(node.record.name, {}).setdefault(phase, []).append(node.inclusive[phase].latency)
    # a module that did not run in every step (a dynamic model) keeps the steps it ran in
    return {p: {ph: tuple(v) for ph, v in phases.items()} for p, phases in out.items()}


def _compute_samples(results: Sequence[ProfileResult]) -> dict[str, tuple[float, ...]]:
    """Per module, its own ops' time in each step (:func:`~.iteration.compute_by_module`),
    for the modules with ops in every step: what the verdict lists under compute."""
    per_step = [compute_by_module(r) for r in results]
    common = set(per_step[0]).intersection(*per_step[1:])
    return {p: tuple(s[p] for s in per_step) for p in sorted(common)}


def _median_module(base: ModuleStats, results: Sequence[ProfileResult]) -> ModuleStats:
    """``base`` with each phase's and op's latency the median over the steps it ran in."""
    path = base.name
    others = [r.modules[path] for r in results if path in r.modules]
    phases = {ph: s._replace(latency=statistics.median([o.phases[ph].latency for o in others if ph in o.phases]))
              for ph, s in base.phases.items()}
    ops = {ph: {name: s._replace(latency=statistics.median(
                [o.ops[ph][name].latency for o in others if name in o.ops.get(ph, {})]))
                for name, s in by_name.items()}
           for ph, by_name in base.ops.items()}
    return base._replace(phases=phases, ops=ops)


def combine_steps(results: Sequence[ProfileResult], unit: str = "step", *, first_step: bool = False) -> ProfileResult:
    """One result for ``results``, each a profile of one step (``unit`` ``"step"``) or pass
    (``"pass"``), in the order they ran; ``first_step``: the first of them was the first
    step the process ran. See the module's docstring."""
    if not results:
        raise ValueError("results: nothing to combine (no step was profiled)")
    figures = [step_figures(r, unit) for r in results]
    walls = [f["wall"] for f in figures]
    order = sorted(range(len(results)), key=walls.__getitem__)
    base = results[order[(len(order) - 1) // 2]]  # the lower median: a step that ran
    names = [k for k in figures[0] if all(k in f for f in figures)]
    samples = StepSamples(unit, {k: tuple(f[k] for f in figures) for k in names},
                          _module_samples(results) if len(results) > 1 else {},
                          first_step=first_step, compute=_compute_samples(results) if len(results) > 1 else {})
    if len(results) == 1:
        return base.updated(samples=samples)
    modules = {path: _median_module(stats, results) for path, stats in base.modules.items()}
    return dataclasses.replace(base, modules=modules, samples=samples)


def as_first_step(result: ProfileResult) -> ProfileResult:
    """``result``, its first profiled step named the first the process ran (a trainer's
    ``profile_step=1``): the report says its time includes one-time costs."""
    samples = result.samples or StepSamples("step", {})
    return result.updated(samples=dataclasses.replace(samples, first_step=True))
