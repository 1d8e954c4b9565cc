"""The generate() view of a result (``result.generation``): the prefill apart from the decode
steps, per step and per generated token; a pure function of its records.

>>> import torch, flopsight
>>> from transformers import GPT2Config, GPT2LMHeadModel
>>> model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64)).eval()
>>> with torch.no_grad():
...     result = flopsight.profile(model, torch.ones(1, 4, dtype=torch.long), mode="generate",
...                                kwargs={"max_new_tokens": 3, "do_sample": False, "pad_token_id": 0})
>>> g = result.generation
>>> g.new_tokens, g.decode.calls
(3, 2)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .records import ModelCall, Profile
from .stats import ZERO_STATS, Stats

__all__ = ["GenerationStats", "generation_stats"]


def _sum(calls: list[ModelCall]) -> Stats:
    """The calls' costs added up, ``calls`` being how many there were."""
    return sum((c.stats for c in calls), ZERO_STATS)._replace(calls=len(calls))


def _average(total: Stats, n: int) -> Stats:
    if n <= 0:
        return ZERO_STATS
    return Stats(round(total.macs / n), round(total.flops / n), total.latency / n, 1)


@dataclass
class GenerationStats:
    """generate(): the prefill (the whole prompt) apart from the decode steps.

    Each forward call of the model makes one new token per sequence: the prefill the first,
    each decode step one more, so ``new_tokens == 1 + decode.calls``. ``per_step`` averages
    the decode steps; ``per_token`` divides that by the batch size. ``total`` is everything
    generate() ran, logits processing and sampling between the calls included.

    Encoder-decoder models (T5, BART, Whisper) run their encoder once, as a call of the
    encoder module from outside the model: ``encoder`` is that pass (None for decoder-only
    models), ``encoder_paths`` the modules called that way, and the prefill includes it.
    ``other`` is what ran outside every module call (logits processing, sampling), so
    ``prefill + decode + other == total``.
    """

    prefill: Stats
    decode: Stats
    per_step: Stats
    per_token: Stats
    new_tokens: int
    batch_size: int
    total: Stats
    encoder: Stats | None = None
    encoder_paths: list[str] = field(default_factory=list)
    other: Stats = ZERO_STATS


def generation_stats(result: Profile) -> GenerationStats | None:
    model_calls = result.root_calls
    if result.metadata.mode != "generate" or not model_calls:
        return None
    outside = [c for c in result.calls if c.path != ""]  # submodules generate() called itself
    encoder = _sum(outside) if outside else None
    first = _sum(model_calls[:1])
    prefill = first if encoder is None else (first + encoder)._replace(calls=1)
    decode = _sum(model_calls[1:])
    per_step = _average(decode, decode.calls)
    batch = model_calls[0].batch_size or 1
    everything = result.phase_total("forward")
    walls = result.spans.get("iteration")
    if walls:  # the whole generate() call, not only the model's forward calls
        everything = everything._replace(latency=sum(walls))
    other = Stats(
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
        new_tokens=len(model_calls),
        batch_size=batch,
        total=everything,
        encoder=encoder,
        encoder_paths=list(dict.fromkeys(c.path for c in outside)),
        other=other,
    )
