"""Training-step and generate() views of a result: pure functions of a ProfileResult.

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

from dataclasses import dataclass, field

from ..result import CallStats, PhaseStats, ProfileResult

__all__ = ["IterationStats", "GenerationStats", "iteration_stats", "generation_stats", "outside_modules"]


def _per_second(amount: float, seconds: float) -> float:
    return amount / seconds if seconds > 0 else 0.0


@dataclass
class IterationStats:
    """A profiled span as a training iteration: each phase's MACs, FLOPs and wall time.

    ``latency`` is the whole span; ``flops`` counts every phase, the recomputed forward of
    activation checkpointing included (hardware FLOPs), ``model_flops`` leaves it out.
    """

    latency: float
    forward: PhaseStats
    backward: PhaseStats
    recompute: PhaseStats
    step: PhaseStats
    samples: int | None

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
        """Forward calls in the span (gradient accumulation runs several per step)."""
        return self.forward.calls


def iteration_stats(result: ProfileResult) -> IterationStats:
    forward = result.phase_total("forward")
    given = result.metadata.get("batch_size_given")
    if result.root_calls:
        sizes = [given or c.batch_size for c in result.root_calls]
        samples = sum(sizes) if all(sizes) else None
    else:
        size = given or result.metadata.get("batch_size")
        samples = size * forward.calls if size and forward.calls else None
    walls = result.spans.get("iteration")
    latency = sum(walls) if walls else forward.latency
    return IterationStats(
        latency=latency,
        forward=forward,
        backward=result.phase_total("backward"),
        recompute=result.phase_total("recompute"),
        step=result.phase_total("step"),
        samples=samples,
    )


def _sum(calls: list[CallStats]) -> PhaseStats:
    return PhaseStats(
        sum(c.macs for c in calls), sum(c.flops for c in calls), sum(c.latency for c in calls), len(calls)
    )


def _average(total: PhaseStats, n: int) -> PhaseStats:
    if n <= 0:
        return PhaseStats()
    return PhaseStats(round(total.macs / n), round(total.flops / n), total.latency / n, 1)


def _add(*parts: PhaseStats) -> PhaseStats:
    return PhaseStats(
        sum(p.macs for p in parts), sum(p.flops for p in parts), sum(p.latency for p in parts),
        sum(p.calls for p in parts),
    )


@dataclass
class GenerationStats:
    """generate(): the prefill (the whole prompt) apart from the decode steps.

    Each forward call of the model makes one new token per sequence: the prefill the first,
    each decode step one more, so ``new_tokens == 1 + decode.calls``. ``per_step`` averages
    the decode steps; ``per_token`` divides that by the batch size. ``total`` is everything
    generate() ran, logits processing and sampling between the calls included.

    Encoder-decoder models (T5, BART, Whisper) run their encoder once, before the first
    call of the model and outside it: ``encoder`` is that pass (None for decoder-only
    models), ``encoder_paths`` the modules it ran in, and the prefill includes it. ``other``
    is what ran outside the model's forward calls and the encoder (logits processing,
    sampling), so ``prefill + decode + other == total`` (MACs and FLOPs; latency too, the
    time between the calls being in ``other``).
    """

    prefill: PhaseStats
    decode: PhaseStats
    per_step: PhaseStats
    per_token: PhaseStats
    new_tokens: int
    batch_size: int
    total: PhaseStats
    encoder: PhaseStats | None = None
    encoder_paths: list[str] = field(default_factory=list)
    other: PhaseStats = field(default_factory=PhaseStats)


def outside_modules(result: ProfileResult) -> list[str]:
    """Paths of the outermost modules that ran outside the model's own forward calls
    (generate()'s encoder pass); [] when every top-level forward call was the model's.

    The result keeps per-module totals, not per-call ones, so they are found by what is
    left: the total forward less the model's calls is what ran outside them. Modules are
    taken in pre-order (parents first; an encoder comes before its decoder), each one
    that was called, made MACs and fits in what is left, and not more often than there
    were top-level calls other than the model's (``spans["forward"]``, when recorded).
    Ops run outside every module (logits processing) count no MACs in practice, so they
    are never mistaken for a module.
    """
    calls = result.root_calls
    if not calls:
        return []
    spans = result.spans.get("forward")
    extra_calls = None if spans is None else len(spans) - len(calls)
    if extra_calls is not None and extra_calls <= 0:
        return []
    total = result.total.forward
    macs_left = total.macs - sum(c.macs for c in calls)
    flops_left = total.flops - sum(c.flops for c in calls)
    found: list[str] = []
    for stats in result.walk():
        if macs_left <= 0:
            break
        if not stats.name or any(stats.name.startswith(p + ".") for p in found):
            continue
        cost = stats.forward
        fits = 0 < cost.macs <= macs_left and cost.flops <= flops_left
        if fits and stats.calls >= 1 and (extra_calls is None or stats.calls <= extra_calls):
            found.append(stats.name)
            macs_left -= cost.macs
            flops_left -= cost.flops
    return found


def generation_stats(result: ProfileResult) -> GenerationStats | None:
    if result.metadata.get("mode") != "generate" or not result.root_calls:
        return None
    paths = outside_modules(result)
    encoder = None
    if paths:
        parts = [result.module(p).forward for p in paths]
        encoder = _add(*parts)
        encoder.calls = sum(result.module(p).calls for p in paths)
    first = _sum(result.root_calls[:1])
    prefill = first if encoder is None else _add(encoder, first)
    prefill.calls = 1
    decode = _sum(result.root_calls[1:])
    per_step = _average(decode, decode.calls)
    batch = result.root_calls[0].batch_size or 1
    everything = result.phase_total("forward")
    walls = result.spans.get("iteration")
    if walls:  # the whole generate() call, not only the model's forward calls
        everything.latency = sum(walls)
    other = PhaseStats(
        everything.macs - prefill.macs - decode.macs,
        everything.flops - prefill.flops - decode.flops,
        max(everything.latency - prefill.latency - decode.latency, 0.0),
        0,
    )
    return GenerationStats(
        prefill=prefill,
        decode=decode,
        per_step=per_step,
        per_token=_average(per_step, batch),
        new_tokens=len(result.root_calls),
        batch_size=batch,
        total=everything,
        encoder=encoder,
        encoder_paths=paths,
        other=other,
    )
