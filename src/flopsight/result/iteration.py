"""The training-step view of a result (``result.iteration``): each phase's figures, the
communication time and the step's anatomy, pure functions of its records (nothing imported
from :mod:`.profile_result` at run time).

>>> import torch, flopsight
>>> model = torch.nn.Linear(8, 4)
>>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
>>> with flopsight.Profiler(model, optimizer=opt) as prof:
...     model(torch.ones(2, 8)).sum().backward()
...     opt.step()
>>> it = prof.result.iteration
>>> it.forward.macs, it.backward.macs, it.samples
(64, 64, 2)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .records import Profile
from .stats import Stats

__all__ = ["IterationStats", "CommunicationTime", "StepAnatomy", "iteration_stats", "COLLECTIVE_NAMESPACES", "TIMED",
           "median_steps", "at_median", "median_anatomy", "compute_by_module"]


def _per_second(amount: float, seconds: float) -> float:
    return amount / seconds if seconds > 0 else 0.0


@dataclass(frozen=True)
class CommunicationTime:
    """Wall time the collectives were in flight (their flights merged where they overlap):
    ``exposed``, the rank waiting for them, and ``overlapped``, hidden behind its compute.

    >>> CommunicationTime(exposed=0.25, overlapped=0.5).total
    0.75
    """

    exposed: float = 0.0
    overlapped: float = 0.0

    @property
    def total(self) -> float:
        return self.exposed + self.overlapped


@dataclass(frozen=True)
class StepAnatomy:
    """Where one rank's iteration wall time went; the parts add up to ``total``
    (``docs/conventions/timing.md``):

    - ``forward``, ``backward`` (recompute included), ``step``: compute, the time inside the
      counted ops of each phase (collectives left out);
    - ``framework``: the rest of the phases' wall time that was neither compute nor waiting
      for communication nor the profiler: module and autograd hooks, ZeRO's or FSDP's
      parameter management outside ops and collectives, Python between ops;
    - ``communication``: collectives the rank waited for (exposed);
    - ``other``: the time outside the phases (data loading, the loss, idle);
    - ``profiler``: flopsight's own time left in the phases' wall time (what the clock could
      not take out: its host time on a device's clock, the native recorder's own time in its
      callbacks, timed in each run, on the host's), never charged to a part of the user's.

    Communication hidden behind compute is not a part (see :class:`CommunicationTime`).

    >>> StepAnatomy(forward=1.0, backward=2.0, step=0.5, framework=0.25, communication=0.25, other=0.0).total
    4.0
    >>> StepAnatomy(1.0, 2.0, 0.5, 0.25, 0.25, 0.0, profiler=0.5).total
    4.5
    """

    forward: float
    backward: float
    step: float
    framework: float
    communication: float
    other: float
    profiler: float = 0.0  # last, with a default: results and files from before it still load

    @property
    def total(self) -> float:
        return math.fsum((self.forward, self.backward, self.step, self.framework, self.communication, self.other,
                          self.profiler))


@dataclass
class IterationStats:
    """A profiled span as a training iteration: each phase's MACs, FLOPs and wall time.

    ``latency`` is the whole span; ``flops`` counts every phase, the recomputed forward of
    activation checkpointing included (hardware FLOPs), ``model_flops`` leaves it out.
    ``timed``: the latencies (the span's and its phases') are a neighbouring step's, timed at
    its phases' boundaries only and not counted (the ``timed.<kind>`` spans: the DeepSpeed
    engine's step before the profiled one); the counts and the anatomy are the counted span's,
    whose own wall time is ``counted_latency``. ``scheduled``: the micro-batches a pipeline
    schedule ran in the span (None: no schedule ran), which its forward calls do not tell (an
    interleaved schedule's rank calls a module per stage for each; DeepSpeed's last stage calls
    its loss function module besides).
    """

    latency: float
    forward: Stats
    backward: Stats
    recompute: Stats
    step: Stats
    samples: int | None
    communication: CommunicationTime = field(default_factory=CommunicationTime)
    anatomy: StepAnatomy | None = None
    counted_latency: float | None = None
    scheduled: int | None = None

    @property
    def timed(self) -> bool:
        return self.counted_latency is not None

    @property
    def model_flops(self) -> int:
        return self.forward.flops + self.backward.flops + self.step.flops

    @property
    def flops(self) -> int:
        return self.model_flops + self.recompute.flops

    @property
    def macs(self) -> int:
        return self.forward.macs + self.backward.macs + self.recompute.macs + self.step.macs

    @property
    def flops_per_second(self) -> float:
        return _per_second(self.flops, self.latency)

    @property
    def samples_per_second(self) -> float:
        return _per_second(self.samples or 0, self.latency)

    @property
    def micro_batches(self) -> int:
        """Micro-batches in the span: its forward calls (gradient accumulation runs several per
        step), or the pipeline schedule's."""
        return self.scheduled if self.scheduled is not None else self.forward.calls


def median_steps(walls: Sequence[float]) -> tuple[int, ...]:
    """The indices of the median step: the step of median wall time, or for an even count
    the two middle ones (sorted by wall time; ties in the order they ran).

    >>> median_steps([0.3, 0.1, 0.2]), median_steps([0.4, 0.1, 0.3, 0.2])
    ((2,), (3, 2))
    """
    if not walls:
        raise ValueError("walls: a median step needs at least one step")
    order, n = sorted(range(len(walls)), key=walls.__getitem__), len(walls)
    return (order[n // 2],) if n % 2 else (order[n // 2 - 1], order[n // 2])


def at_median(values: Sequence[float], walls: Sequence[float]) -> float:
    """A figure's value in the median step (the mean of the two middle steps' for an even
    count): for the wall time itself, its median; for the anatomy's parts, values that add up
    to it, as each step's add up to its wall time.

    >>> at_median([5.0, 1.0, 3.0, 8.0], [0.4, 0.1, 0.3, 0.2])  # steps 3 and 2 (0.2 s and 0.3 s)
    5.5
    """
    steps = median_steps(walls)
    return math.fsum(values[i] for i in steps) / len(steps)


def median_anatomy(figures: Mapping[str, Sequence[float]]) -> StepAnatomy | None:
    """The anatomy of the median step from each step's figures (``"wall"``,
    ``"anatomy.<part>"``; :mod:`.samples`): its parts add up to the median wall time. None
    without an anatomy in the figures; a file from before the profiler part reads 0 for it."""
    walls = figures.get("wall")
    names = [f.name for f in dataclasses.fields(StepAnatomy)]
    if not walls or any(f"anatomy.{n}" not in figures for n in names if n != "profiler"):
        return None
    zeros = (0.0,) * len(walls)
    return StepAnatomy(**{n: at_median(figures.get(f"anatomy.{n}", zeros), walls) for n in names})


#: the span kinds a neighbouring step timed (not counted) leaves: its phases and its whole
TIMED = {"forward": "timed.forward", "backward": "timed.backward", "step": "timed.step", "iteration": "timed.iteration"}


def iteration_stats(result: Profile) -> IterationStats:
    forward = result.phase_total("forward")
    given = result.metadata.batch_size_given
    if result.root_calls:
        sizes = [size for c in result.root_calls if (size := given or c.batch_size)]
        samples = sum(sizes) if len(sizes) == len(result.root_calls) else None  # None: a call's size is unknown
    else:
        size = given or result.metadata.batch_size
        samples = size * forward.calls if size and forward.calls else None
    pipeline = result.metadata.pipeline
    scheduled = int(pipeline["micro_batches"]) * int(pipeline.get("steps") or 1) if pipeline else None
    walls = result.spans.get("iteration")
    latency = counted = sum(walls) if walls else forward.latency
    backward, step = result.phase_total("backward"), result.phase_total("step")
    communication = _communication_time(result)
    anatomy = None
    steps = getattr(result, "samples", None)
    timed = TIMED["iteration"] in result.spans
    if steps is not None and steps.count > 1:  # several steps: the median wall time, as every latency,
        latency = steps.median("wall")
        anatomy = median_anatomy(steps.figures)
        if anatomy is not None:  # and the median step's anatomy, which adds up to it
            counted = latency
    if anatomy is None and walls:  # the step's own: its parts add up to its wall time
        anatomy = _anatomy(result, counted, communication)
    if timed:  # the latencies a step timed at its phases' boundaries measured (see TIMED)
        latency = math.fsum(result.spans[TIMED["iteration"]])
        forward, backward, step = (_timed(result, stats, phase) for phase, stats in
                                   (("forward", forward), ("backward", backward), ("step", step)))
    return IterationStats(
        latency=latency,
        forward=forward,
        backward=backward,
        recompute=result.phase_total("recompute"),
        step=step,
        samples=samples,
        communication=communication,
        anatomy=anatomy,
        counted_latency=counted if timed else None,
        scheduled=scheduled,
    )


def _timed(result: Profile, stats: Stats, phase: str) -> Stats:
    """``stats`` with the timed step's wall time of ``phase`` (its counts are the counted span's)."""
    walls = result.spans.get(TIMED[phase])
    return stats if walls is None else Stats(stats.macs, stats.flops, math.fsum(walls), stats.calls)


def _communication_time(result: Profile) -> CommunicationTime:
    flights = result.spans.get("communication", [])
    overlapped = sum(result.spans.get("communication_overlapped", []))
    return CommunicationTime(max(math.fsum(flights) - overlapped, 0.0), overlapped)


def _anatomy(result: Profile, latency: float, communication: CommunicationTime) -> StepAnatomy:
    """Each phase's wall time split into what it waited for communication (its collectives'
    exposed time, at most the phase's wall time less its compute ops' time), its compute
    (its ops' time, at most what is left), the profiler's own time left in it (the
    ``profiler.<phase>`` spans, at most what is left) and framework time (the rest);
    communication exposed outside the phases (at most the time outside them); and the rest
    of the span. The seven add up to its wall time. Sums are exact (``math.fsum``): Python
    3.12 changed what the built-in ``sum`` of floats returns in its last bits."""
    exposed_by_phase: dict[str, float] = {}
    for c in result.collectives():
        phase = "backward" if c.phase == "recompute" else c.phase
        exposed_by_phase[phase] = exposed_by_phase.get(phase, 0.0) + c.exposed
    walls = {p: math.fsum(result.spans.get(p, [])) for p in ("forward", "backward", "step")}
    # a collective's flight can run past its phase's end (the other rank is late), so the
    # waiting charged to a phase is at most its wall time less the compute ops run in it
    computed = _compute_time(result)
    waited = {p: min(exposed_by_phase.get(p, 0.0), max(walls[p] - computed.get(p, 0.0), 0.0)) for p in walls}
    compute = {p: min(computed.get(p, 0.0), walls[p] - waited[p]) for p in walls}
    left = {p: walls[p] - waited[p] - compute[p] for p in walls}
    # the profiler's own time is not the user's: out of what would otherwise be framework time
    profiler = {p: max(min(math.fsum(result.spans.get(f"profiler.{p}", [])), left[p]), 0.0) for p in walls}
    outside = max(latency - math.fsum(walls.values()), 0.0)
    waited_outside = min(max(communication.exposed - math.fsum(waited.values()), 0.0), outside)
    return StepAnatomy(
        forward=compute["forward"],
        backward=compute["backward"],
        step=compute["step"],
        framework=math.fsum(left[p] - profiler[p] for p in walls),
        communication=math.fsum(waited.values()) + waited_outside,
        other=outside - waited_outside,
        profiler=math.fsum(profiler.values()),
    )


def _compute_by(result: Profile) -> dict[tuple[str, str], float]:
    """Per module path and phase, the time of its own ops that ran in it, collectives and
    their waits left out (recompute runs inside the backward: its ops are the backward's):
    where the pass recorded GPU kernels (``kernels=True`` on CUDA), their device time, what
    the GPU computed; else the ops' host time (on a GPU, their launches: the phases' own
    time is the device's)."""
    on_device = result.kernels is not None and result.kernels.source == "cuda"
    out: dict[tuple[str, str], float] = {}
    for path, stats in result.modules.items():
        times: Iterable[tuple[str, Mapping[str, float]]]
        if on_device:
            times = stats.op_kernel_time.items()
        else:
            times = ((phase, {name: s.latency for name, s in ops.items()}) for phase, ops in stats.ops.items())
        for phase, by_op in times:
            t = sum(seconds for name, seconds in by_op.items() if not name.startswith(COLLECTIVE_NAMESPACES))
            key = (path, "backward" if phase == "recompute" else phase)
            out[key] = out.get(key, 0.0) + t
    return out


def _compute_time(result: Profile) -> dict[str, float]:
    """Per phase, the time of the ops that ran in it (:func:`_compute_by`)."""
    out: dict[str, float] = {}
    for (_, phase), seconds in _compute_by(result).items():
        out[phase] = out.get(phase, 0.0) + seconds
    return out


def compute_by_module(result: Profile) -> dict[str, float]:
    """Per module path, the time of its own ops in every phase, collectives left out: its
    share of the anatomy's compute (which holds their sum, each phase's at most what the
    phase's wall time leaves beside the communication it waited for)."""
    out: dict[str, float] = {}
    for (path, _), seconds in _compute_by(result).items():
        out[path] = out.get(path, 0.0) + seconds
    return out


#: the op namespaces of collectives: their time is communication, never compute
COLLECTIVE_NAMESPACES = ("c10d.", "_c10d_functional.")
