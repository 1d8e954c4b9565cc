"""Running a built model the way the command line asks: one forward, ``generate()``, or a
whole training step, each through flopsight's own API (:func:`flopsight.profile`,
:class:`flopsight.Profiler`); nothing here counts.

>>> import torch
>>> model = torch.nn.Sequential(torch.nn.Linear(4, 3))
>>> run_forward(model, (torch.ones(2, 4),), {}, ProfileOptions(warm_up=0)).total.forward.macs
24
>>> result = run_train(model, (torch.ones(2, 4),), {}, ProfileOptions(warm_up=0))
>>> result.total.forward.macs, result.total.backward.macs > 0
(24, True)
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from ..options import ProfileOptions
from ..profiler import Profiler, profile
from ..result.profile_result import ProfileResult
from .progress import Progress
from .repeat import BUDGET_S, planned_repeat

__all__ = ["run_forward", "run_generate", "run_train", "with_labels", "loss_of", "loss_note", "calls_counted",
           "calls_per_run", "seconds_per_call", "auto_repeat"]


@contextlib.contextmanager
def calls_counted(model: nn.Module, progress: Progress | None) -> Iterator[None]:
    """Advance ``progress`` at each call of ``model`` (a pass, a decode step) while inside.
    The hook is the front-end's, added before and removed after the profiler runs, so the
    profiler finds and leaves the model as it is."""
    if progress is None or not progress.enabled:
        yield
        return
    handle = model.register_forward_pre_hook(lambda *_: progress.advance())
    try:
        yield
    finally:
        handle.remove()


def calls_per_run(mode: str, warm_up: int, max_new_tokens: int = 1, repeat: int = 1) -> int:
    """How many times the model is called: :func:`flopsight.profile` runs ``warm_up``
    calls and ``repeat`` measured ones (its counting pass doubles as the first warm-up, and
    is the measured call when ``warm_up`` is 0), each ``max_new_tokens`` model calls under
    ``generate()``; a training run is ``warm_up`` + ``repeat`` steps.

    >>> calls_per_run("forward", 0), calls_per_run("forward", 2), calls_per_run("generate", 1, 8)
    (1, 3, 16)
    >>> calls_per_run("forward", 1, repeat=5), calls_per_run("train", 1, repeat=5)
    (6, 6)
    """
    return (warm_up + repeat) * (max_new_tokens if mode == "generate" else 1)


def _synchronize() -> None:
    """Wait for the GPU's queued work (a call's time is its kernels', not their launches')."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def seconds_per_call(call) -> float:
    """Wall-clock seconds of ``call()``, the GPU's queued work included.

    >>> seconds_per_call(lambda: None) >= 0
    True
    """
    _synchronize()
    start = time.perf_counter()
    call()
    _synchronize()
    return time.perf_counter() - start


def auto_repeat(call, warm_up: int, progress: Progress | None = None, calls_each: int = 1) -> int:
    """``--repeat auto``'s timed calls (:func:`~.repeat.planned_repeat`) for a model whose
    call is ``call()``, planned from untimed calls of it: one, and a second when the first
    fits in the budget (the first can hold one-time costs). ``warm_up`` 0 asks for no call
    before the timed ones: none is made, and the minimum is timed (as when the model raises:
    the profiled call raises it again, naming the module). ``progress`` learns the
    stage's new total (``calls_each`` model calls per call, warm-ups included)."""
    seconds, probes = None, 0
    if warm_up:
        try:
            seconds, probes = seconds_per_call(call), 1
            if seconds < BUDGET_S:
                seconds, probes = seconds_per_call(call), 2
        except Exception:
            # the profiled call raises it again, and says in which module: the error is the profiler's to report
            seconds = None
    repeat = planned_repeat(seconds)
    if progress is not None:
        progress.expect((probes + warm_up + repeat) * calls_each)
    return repeat


def run_forward(model: nn.Module, args: tuple, kwargs: dict, options: ProfileOptions, *,
                progress: Progress | None = None, auto: bool = False) -> ProfileResult:
    """``options.repeat`` inference forwards after ``options.warm_up``, profiled (eval mode, no
    autograd); with ``auto``, as many as :func:`auto_repeat` plans instead."""
    model.eval()
    with torch.no_grad(), calls_counted(model, progress):
        if auto:
            options = options.replace(repeat=auto_repeat(lambda: model(*args, **kwargs), options.warm_up, progress))
        return profile(model, args, kwargs, options=options)


def generation_options(model: nn.Module, max_new_tokens: int) -> dict:
    """``generate()``'s keyword arguments: exactly ``max_new_tokens`` greedy tokens (a
    random model may produce its end token at once), and a padding id when the model has
    none (its end token, as transformers would pick and warn about)."""
    options = dict(max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens, do_sample=False)
    generation = getattr(model, "generation_config", None)
    if generation is not None and getattr(generation, "pad_token_id", None) is None:
        eos = getattr(generation, "eos_token_id", None)
        eos = eos[0] if isinstance(eos, (list, tuple)) and eos else eos
        if isinstance(eos, int):
            options["pad_token_id"] = eos
    return options


def run_generate(model: nn.Module, args: tuple, kwargs: dict, options: ProfileOptions, *, max_new_tokens: int,
                 progress: Progress | None = None, auto: bool = False) -> ProfileResult:
    """``options.repeat`` ``generate()`` calls of ``max_new_tokens`` tokens, profiled (prefill and
    decode); with ``auto``, as many as :func:`auto_repeat` plans instead."""
    model.eval()
    kwargs = {**kwargs, **generation_options(model, max_new_tokens)}
    with torch.no_grad(), calls_counted(model, progress):
        if auto:
            # generate(): a transformers model's method, which nn.Module's __getattr__ typing does not know
            repeat = auto_repeat(lambda: model.generate(*args, **kwargs),  # type: ignore[operator]
                                 options.warm_up, progress, max_new_tokens)
            options = options.replace(repeat=repeat)
        return profile(model, args, kwargs, options=options.replace(mode="generate"))


def _forward_parameters(model: nn.Module) -> Mapping[str, inspect.Parameter]:
    try:
        return inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return {}


def with_labels(model: nn.Module, kwargs: dict) -> tuple[dict, str | None]:
    """``kwargs`` plus what makes a transformers model compute its own loss, as in
    training: ``labels`` (the target token ids, or class 0 for a classifier), or
    ``return_loss`` (CLIP); and what was added, in words. Unchanged, and None, for a model
    that takes neither.

    >>> with_labels(torch.nn.Linear(2, 2), {"input": 1})
    ({'input': 1}, None)
    """
    parameters = _forward_parameters(model)
    if "labels" in parameters:
        name = "decoder_input_ids" if "decoder_input_ids" in kwargs else "input_ids"
        ids = kwargs.get(name)
        if isinstance(ids, torch.Tensor):
            return {**kwargs, "labels": ids}, f"labels = its {name.replace('_', ' ')}"
        first = next((v for v in kwargs.values() if isinstance(v, torch.Tensor)), None)
        if first is not None and getattr(getattr(model, "config", None), "num_labels", None):
            labels = torch.zeros(first.shape[0], dtype=torch.long, device=first.device)
            return {**kwargs, "labels": labels}, "labels = class 0 for every sample"
    if "return_loss" in parameters:
        return {**kwargs, "return_loss": True}, "return_loss=True"
    return kwargs, None


def _first_float(value: Any, path: str = "") -> tuple[torch.Tensor, str] | None:
    """The first floating-point tensor in ``value`` (depth first), with where it is in it
    (``['logits']``, ``[0]``; ``""`` for ``value`` itself)."""
    if isinstance(value, torch.Tensor):
        return (value, path) if value.is_floating_point() else None
    if isinstance(value, Mapping):
        items = [(f"[{k!r}]", v) for k, v in value.items()]
    else:
        items = [(f"[{i}]", v) for i, v in enumerate(value)] if isinstance(value, (list, tuple)) else []
    for key, item in items:
        found = _first_float(item, path + key)
        if found is not None:
            return found
    return None


def _own_loss(output: Any) -> torch.Tensor | None:
    loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
    return loss if isinstance(loss, torch.Tensor) else None


def loss_of(output: Any) -> torch.Tensor:
    """The loss to call ``backward()`` on: the model's own (``output.loss``), else the mean
    of its first floating-point output (for a model without a loss of its own).

    >>> loss_of((torch.ones(2, 3), torch.ones(1))).item()
    1.0
    """
    loss = _own_loss(output)
    if loss is not None:
        return loss
    first = _first_float(output)
    if first is None:
        raise ValueError("--mode train: the model's output holds no floating-point tensor to take a loss from")
    return first[0].mean()


def loss_note(output: Any, labels: str | None = None) -> str:
    """What ``--mode train`` says of its loss, once a run: what :func:`loss_of` took from
    ``output``, and the ``labels`` :func:`with_labels` gave the model (in words), if any.

    >>> loss_note(torch.ones(2, 3))
    "--mode train: the loss is the mean of the model's output (it returns no .loss)"
    >>> loss_note({"last_hidden_state": torch.ones(2, 3)})
    "--mode train: the loss is the mean of the model's output['last_hidden_state'] (it returns no .loss)"
    >>> loss_note({"loss": torch.ones(()), "logits": torch.ones(2, 3)}, "labels = its input ids")
    "--mode train: the loss is the model's own .loss (labels = its input ids)"
    """
    if _own_loss(output) is not None:
        return "--mode train: the loss is the model's own .loss" + (f" ({labels})" if labels else "")
    first = _first_float(output)
    where = first[1] if first is not None else ""
    return f"--mode train: the loss is the mean of the model's output{where} (it returns no .loss)"


def run_train(model: nn.Module, args: tuple, kwargs: dict, options: ProfileOptions, *,
              progress: Progress | None = None, auto: bool = False, labels: bool = False) -> ProfileResult:
    """``options.warm_up`` training steps, then ``options.repeat`` profiled: forward,
    ``backward()`` of the loss and an AdamW step, under :class:`flopsight.Profiler` (the
    optimizer's step is its own phase; each step measured on its own, times their medians).
    With ``auto``, the steps profiled are planned from the last warm-up step's time
    (:func:`~.repeat.planned_repeat`; the minimum without a warm-up): no step is added.
    ``labels``: first give a transformers model what makes it compute its own loss
    (:func:`with_labels`: the command's built-in models, not a factory's own inputs).
    ``progress`` notes which loss was used (:func:`loss_note`) once the steps are done."""
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    added = None
    if labels:
        kwargs, added = with_labels(model, kwargs)
    notes: list[str] = []

    def step() -> None:
        output = model(*args, **kwargs)
        if not notes:
            notes.append(loss_note(output, added))
        loss_of(output).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    with calls_counted(model, progress):
        seconds = None
        for _ in range(options.warm_up):
            seconds = seconds_per_call(step)
        if auto:
            options = options.replace(repeat=planned_repeat(seconds))
            if progress is not None:
                progress.expect(options.warm_up + options.repeat)
        span = options.replace(warm_up=ProfileOptions.warm_up, repeat=ProfileOptions.repeat, optimizer=optimizer,
                               steps=options.repeat)
        with Profiler(model, options=span) as prof:
            for _ in range(options.repeat):
                step()
                prof.step()
    if progress is not None and notes:  # after the timed steps, before the report
        progress.note(notes[0])
    return prof.result
