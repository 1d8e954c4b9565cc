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

from dataclasses import dataclass

from ..result import ModelCall, ProfileResult
from ..stats import Stats

__all__ = ["IterationStats", "GenerationStats", "iteration_stats", "generation_stats"]


def _per_second(amount: float, seconds: float) -> float:
    return amount / seconds if seconds > 0 else 0.0


@dataclass
class IterationStats:
    """A profiled span as a training iteration: each phase's MACs, FLOPs and wall time.

    ``latency`` is the whole span; ``flops`` counts every phase, the recomputed forward of
    activation checkpointing included (hardware FLOPs), ``model_flops`` leaves it out.
    """

    latency: float
    forward: Stats
    backward: Stats
    recompute: Stats
    step: Stats
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
    given = result.metadata.batch_size_given
    if result.root_calls:
        sizes = [given or c.batch_size for c in result.root_calls]
        samples = sum(sizes) if all(sizes) else None
    else:
        size = given or result.metadata.batch_size
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


def _sum(calls: list[ModelCall]) -> Stats:
    return Stats(calls=len(calls)) + sum((c.stats._replace(calls=0) for c in calls), Stats())


def _average(total: Stats, n: int) -> Stats:
    if n <= 0:
        return Stats()
    return Stats(round(total.macs / n), round(total.flops / n), total.latency / n, 1)


@dataclass
class GenerationStats:
    """generate(): the prefill call (the whole prompt) apart from the decode steps.

    Each forward call of the model makes one new token per sequence: the prefill the first,
    each decode step one more, so ``new_tokens == 1 + decode.calls``. ``per_step`` averages
    the decode steps; ``per_token`` divides that by the batch size. ``total`` is everything
    generate() ran, logits processing and sampling between the calls included.
    """

    prefill: Stats
    decode: Stats
    per_step: Stats
    per_token: Stats
    new_tokens: int
    batch_size: int
    total: Stats


def generation_stats(result: ProfileResult) -> GenerationStats | None:
    if result.metadata.mode != "generate" or not result.root_calls:
        return None
    prefill = _sum(result.root_calls[:1])
    decode = _sum(result.root_calls[1:])
    per_step = _average(decode, decode.calls)
    batch = result.root_calls[0].batch_size or 1
    everything = result.phase_total("forward")
    walls = result.spans.get("iteration")
    if walls:  # the whole generate() call, not only the model's forward calls
        everything = everything._replace(latency=sum(walls))
    return GenerationStats(
        prefill=prefill,
        decode=decode,
        per_step=per_step,
        per_token=_average(per_step, batch),
        new_tokens=len(result.root_calls),
        batch_size=batch,
        total=everything,
    )
