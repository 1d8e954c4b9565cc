"""Profile one step of a Hugging Face ``Trainer`` run: :class:`FlopsightCallback`.

A ``transformers.TrainerCallback`` that profiles training step ``profile_step`` (its
micro-batches' forward and backward, the optimizer step, the rest of the Trainer's step)
on every rank, logs throughput, MFU and measured FLOPs to the Trainer's logs (keys
``flopsight/...`` in ``trainer.state.log_history``) and writes the report to ``output_dir``
on rank 0. ``profile_step`` counts as DeepSpeed's and the Lightning callback's do: the
optimizer steps taken before the profiled one (``state.global_step`` when it begins), so
the default 1 profiles the second step and 0 the first; the logged names are the Lightning
callback's too (:data:`~.trainer_metrics.METRICS`)::

    from flopsight.integrations.hf import FlopsightCallback
    trainer = Trainer(model=model, args=args, train_dataset=data,
                      callbacks=[FlopsightCallback(profile_step=3, output="profile.html")])
    trainer.train()

Needs ``transformers`` (``pip install 'flopsight[hf]'``); ``import flopsight`` alone never
imports it. How-to and the logged keys: ``docs/howto/hf-trainer.md``.

>>> FlopsightCallback(profile_step=-1)
Traceback (most recent call last):
...
ValueError: profile_step: expected an int >= 0 (the optimizer steps taken before the profiled one; 0 is the first step), got -1
"""  # noqa: E501  (a doctest's expected output, as printed)

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

try:
    from transformers import TrainerCallback
except ImportError as e:  # the optional extra
    raise ImportError("flopsight.integrations.hf needs transformers: pip install 'flopsight[hf]'") from e

from .._checks import check_int
from .._process import WARNED
from .._wrap import wrap_method
from ..analysis.efficiency import efficiency
from ..capture.assembly.gather import DEFAULT_GATHER_TIMEOUT, announce, publish_failure
from ..hardware import check_peak
from ..options import ProfileOptions
from ..profiler import Profiler, with_ranks
from ..renderers import EXTENSIONS
from ..renderers.output import check_output_file, write
from ..result.profile_result import ProfileResult
from ..result.steps import as_first_step
from .step_numbering import warn_numbering_changed
from .trainer_metrics import METRICS, PREFIX, PROFILE_STEP, check_dtype, check_profile_step, logged, step_figures

if TYPE_CHECKING:
    from types import FrameType

    from transformers import TrainerControl, TrainerState, TrainingArguments

__all__ = ["FlopsightCallback", "step_metrics", "PREFIX", "LOGGED"]

logger = logging.getLogger(__name__)

# -- argument checks ---------------------------------------------------------------------
def _check_profile_step(step: Any) -> int:
    step = check_profile_step(step)
    if step >= 1 and WARNED.first("hf callback profile_step numbering"):
        # until 0.1.0 this callback profiled the step that ends at global_step == profile_step, one
        # earlier; 0 was refused then, so a 0 was written for the numbering of now
        warn_numbering_changed(f"FlopsightCallback(profile_step={step})", step,
                               "DeepSpeed's profile_step and flopsight's Lightning callback do",
                               f"the Trainer's step {step + 1} (state.global_step {step} -> {step + 1})", stacklevel=3)
    return step


def _check_output(output: Any) -> tuple[str, ...]:
    """``output`` as a tuple of file names (empty for None), each with a known ending."""
    if output is None:
        return ()
    names = list(output) if isinstance(output, (list, tuple)) else [output]
    if not names:
        raise ValueError("output: expected a file name, a list of them or None, got an empty list")
    checked = []
    for name in names:
        if not isinstance(name, (str, os.PathLike)) or not os.fspath(name):
            raise TypeError(f"output: expected a file name (str or path) or a list of them, got {name!r}")
        name = os.fspath(name)
        if not name.lower().endswith(tuple(EXTENSIONS)):
            raise ValueError(f"output: {name!r} has no report ending; expected one of {', '.join(EXTENSIONS)}")
        checked.append(name)
    return tuple(checked)


# -- the logged figures ---------------------------------------------------------------------
#: logged name (after :data:`PREFIX`) -> its :class:`~.trainer_metrics.StepFigures` field,
#: in the order logged (both callbacks' :data:`~.trainer_metrics.METRICS`)
LOGGED = {name: spec[0] for name, spec in METRICS.items()}


def step_metrics(result: ProfileResult, *, tokens: int | None = None, peak: Any = None,
                 dtype: str | None = None) -> dict[str, float]:
    """The figures the callback logs for a profiled training step, keys prefixed
    ``flopsight/``: FLOPs and latencies of this rank, throughput of all data-parallel ranks
    (this rank's samples or ``tokens`` times the data-parallel size, per second, as the
    report's "measured samples/second"), and MFU (HFU under activation checkpointing) when
    a peak is known (``peak``, ``dtype`` as in :func:`flopsight.analysis.efficiency.efficiency`).

    >>> import torch, flopsight
    >>> model = torch.nn.Linear(8, 4)
    >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> with flopsight.Profiler(model, optimizer=opt, clock=flopsight.FakeClock()) as prof:
    ...     model(torch.ones(2, 8)).sum().backward()
    ...     opt.step()
    >>> m = step_metrics(prof.result, peak=1e9)
    >>> m["flopsight/fwd_flops"], m["flopsight/micro_batches"], "flopsight/tokens_per_second" in m
    (136, 1, False)
    >>> m["flopsight/mfu"] == m["flopsight/model_flops"] / m["flopsight/iter_latency_s"] / 1e9
    True
    """
    return logged(step_figures(result, efficiency(result, peak, dtype=dtype), tokens=tokens))


def _mixed_precision_dtype(args: Any) -> str | None:
    """The peak column autocast computes in (``bf16=True`` / ``fp16=True``), else None:
    the model's own dtype decides."""
    if getattr(args, "bf16", False):
        return "bf16"
    if getattr(args, "fp16", False):
        return "fp16"
    return None


# -- the callback ---------------------------------------------------------------------------
def _calling_trainer(callback: Any) -> Any:
    """The ``Trainer`` whose callback handler is calling ``callback`` now, or None.

    Trainer callbacks are not handed the Trainer, but it is the ``self`` of a frame just
    above the handler. With it, the figures go through ``Trainer.log`` (so reporting
    integrations see them too) and the step's methods can be guarded against exceptions.
    """
    frame: FrameType | None = sys._getframe(1)
    for _ in range(12):
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        handler = getattr(owner, "callback_handler", None)
        if handler is not None and any(cb is callback for cb in getattr(handler, "callbacks", ())):
            return owner
        frame = frame.f_back
    return None


@dataclass
class _Step:
    """What one profiled step has running: the profiler and what to remove afterwards."""

    profiler: Profiler
    trainer: Any
    tokens: int = 0
    removers: list[Callable[[], None]] = field(default_factory=list)

    def remove(self) -> None:
        while self.removers:
            self.removers.pop()()


class FlopsightCallback(TrainerCallback):
    """Profile training step ``profile_step`` of a ``transformers.Trainer`` run.

    Args:
        profile_step: the optimizer step to profile, as DeepSpeed's ``profile_step`` and the
            Lightning callback's count it: the steps already taken when it begins
            (``state.global_step`` then; a resumed run's steps go on from the checkpoint's).
            0 is the run's first step, its one-time costs marked in the result; the default
            1 skips it. With gradient accumulation a step holds all its micro-batches.
        output: report file name(s), the format from the ending (``.html``, ``.json``,
            ``.txt``, ``.md``, ``.csv``, ``.trace.json``); relative names go into
            ``args.output_dir``; written on rank 0 only, checked before training starts.
            None: no file.
        peak: the device's peak for MFU: FLOP/s, a device name, ``"cpu"`` (measured,
            cached) or a :class:`~flopsight.hardware.Peak`; None looks a GPU up by its name,
            and gives no MFU on the CPU.
        dtype: the peak's column (``"bf16"``, ``"tf32"``...); None: ``bf16`` under
            ``args.bf16``, ``fp16`` under ``args.fp16``, else the model's dtype.
        memory: also measure memory (logged as ``flopsight/memory_peak_bytes``).
        gather_timeout: seconds rank 0 waits for each other rank's result (None: no
            gathering); attention, batch_size: as in :class:`flopsight.Profiler`.
        steps: how many steps are profiled, from ``profile_step`` on: each is measured on
            its own, the result's times are their medians and ``result.samples`` keeps
            every step's (counts and logged metrics are one step's).

    After the step, ``result`` holds this rank's :class:`~flopsight.ProfileResult` (on rank
    0 with every rank's in ``result.ranks``), ``metrics`` what was logged and ``written``
    the files written. The profiled span runs from the step's first micro-batch (its
    batches already loaded) to the end of the step (optimizer step, LR scheduler and
    ``zero_grad`` included). Each ``train()`` call that reaches the step profiles it.
    """

    def __init__(
        self,
        profile_step: int = PROFILE_STEP,
        output: str | os.PathLike | list | tuple | None = "flopsight_profile.html",
        peak: Any = None,
        memory: bool = False,
        *,
        dtype: str | None = None,
        gather_timeout: float | None = DEFAULT_GATHER_TIMEOUT,
        attention: str = "dense",
        batch_size: int | None = None,
        steps: int = 1,
    ):
        self.profile_step = _check_profile_step(profile_step)
        #: what each profiled step measures (its steps, batch size and gathering are this callback's)
        self.options = ProfileOptions(memory=memory, attention=attention, batch_size=batch_size, steps=steps,
                                      gather_timeout=gather_timeout)
        # a ProfileOptions' steps may be None (a span that stops when told); a callback's counts its steps
        self.steps: int = check_int(steps, "steps", low=1, what="how many steps to profile")
        self.memory, self.attention = self.options.memory, self.options.attention
        self.batch_size, self.gather_timeout = self.options.batch_size, self.options.gather_timeout
        self.outputs = _check_output(output)
        self.peak = check_peak(peak)
        self.dtype = check_dtype(dtype)
        self.result: ProfileResult | None = None
        self.metrics: dict[str, float] = {}
        self.written: list[str] = []
        self._step: _Step | None = None
        self._done = False

    def __repr__(self) -> str:
        state = "profiling" if self.profiling else ("done" if self._done else "waiting")
        return f"<FlopsightCallback {state}, profile_step={self.profile_step}, output={list(self.outputs)}>"

    @property
    def profiling(self) -> bool:
        """True while step ``profile_step`` runs under the profiler."""
        return self._step is not None

    # -- the Trainer's events -----------------------------------------------------------
    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       **kwargs: Any) -> None:
        self._abort()  # a step an earlier train() left profiling (it raised where no guard saw it)
        self._done = False
        self.result, self.metrics, self.written = None, {}, []
        if state.is_world_process_zero:  # the one that writes: a bad path fails now, not after the step
            for name in self.outputs:
                # typed optional, output_dir is set by TrainingArguments itself when not given ("trainer_output")
                check_output_file(os.path.join(args.output_dir, name), "output")  # type: ignore[arg-type]

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                      **kwargs: Any) -> None:
        # called before a step's first micro-batch, global_step counting the steps done
        if self._step is None and not self._done and state.global_step == self.profile_step:
            self._begin(kwargs.get("model"))

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> None:
        # called after optimizer.step(), the scheduler's step and zero_grad, global_step counted
        if self._step is not None and state.global_step >= self.profile_step + self.steps:
            self._end(args, state, control)
        elif self._step is not None and state.global_step > self.profile_step:
            self._step.profiler.step()  # one of the profiled steps ended: the next one begins

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> None:
        self._abort()
        if not self._done and state.is_world_process_zero:
            warnings.warn(
                f"flopsight: profile_step={self.profile_step} was never reached: training ended at global step "
                f"{state.global_step}; nothing was profiled",
                UserWarning,
                stacklevel=2,
            )

    # -- one profiled step ------------------------------------------------------------------
    def _begin(self, model: nn.Module | None) -> None:
        trainer = _calling_trainer(self)
        if getattr(trainer, "model", None) is not None:  # model_init may have replaced the one given
            model = trainer.model
        if not isinstance(model, nn.Module):
            warnings.warn("flopsight: the Trainer gave its callbacks no model; nothing is profiled", UserWarning,
                          stacklevel=2)
            return
        # gathering is done on success only: a failed step must not wait for the other ranks
        profiler = Profiler(model, options=self.options.replace(steps=None, gather_timeout=None))
        step = _Step(profiler, trainer)
        try:
            if trainer is not None:  # the Trainer has no event for a step that raised: guard its parts
                step.removers.append(wrap_method(trainer, "training_step", self._guarded))
                if trainer.optimizer is not None:
                    step.removers.append(wrap_method(trainer.optimizer, "step", self._guarded))
            step.removers.append(model.register_forward_pre_hook(self._count_tokens, with_kwargs=True).remove)
            self._step = step
            announce(self.gather_timeout)  # its Profiler gathers nothing: this callback does, after the step
            profiler.start()
        except BaseException:
            self._step = None
            step.remove()
            raise

    def _guarded(self, call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run a part of the profiled step; if it raises, stop profiling, then re-raise."""
        try:
            return call(*args, **kwargs)
        except BaseException as error:
            try:
                if self._abort() and self.gather_timeout is not None:
                    publish_failure(error)  # rank 0 learns it now instead of waiting for this rank
            except Exception as e:  # the step's own error is the one to see
                warnings.warn(f"flopsight: stopping the profiler after the step's error failed too: {e!r}",
                              UserWarning, stacklevel=2)
            raise

    def _count_tokens(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        """Tokens: elements of the model's main input when it holds token ids (integers)."""
        step = self._step
        name = getattr(module, "main_input_name", "input_ids")
        ids = kwargs.get(name, args[0] if args else None)
        if step is not None and isinstance(ids, torch.Tensor) and not (ids.is_floating_point() or ids.is_complex()):
            step.tokens += ids.numel()

    def _end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl) -> None:
        step, self._step = self._step, None
        if step is None:  # on_step_end ends a step being profiled only
            return
        try:
            step.profiler.stop()
        finally:
            step.remove()
        result = step.profiler.result  # what stop() returned: a running profiler's stop() has one
        self._done = True
        if self.profile_step == 0:  # the run's first step: its one-time costs are in it
            result = as_first_step(result)
        self.result = result = with_ranks(result, self.gather_timeout)
        dtype = self.dtype or _mixed_precision_dtype(args)
        # the profiler counted them over every step (a stopped profiler's result has its samples)
        tokens = step.tokens // (result.samples.count if result.samples is not None else 1)
        self.metrics = step_metrics(result, tokens=tokens, peak=self.peak, dtype=dtype)
        self._log(step.trainer, state, control)
        self.written = self._write(result, args) if state.is_world_process_zero else []

    def _abort(self) -> bool:
        """Stop a step being profiled, keeping nothing of it; whether one was."""
        step, self._step = self._step, None
        if step is None:
            return False
        try:
            step.profiler.stop()
        finally:
            step.remove()
        return True

    def _log(self, trainer: Any, state: TrainerState, control: TrainerControl) -> None:
        if trainer is not None:
            should_log = control.should_log
            trainer.log(dict(self.metrics))  # into log_history, and to every reporting callback
            # Trainer.log clears should_log, which the Trainer's own logging of this step
            # (the loss) reads next: left cleared, that entry would go missing
            control.should_log = should_log
        else:  # what Trainer.log would have recorded
            state.log_history.append({**self.metrics, "epoch": state.epoch, "step": state.global_step})

    def _write(self, result: ProfileResult, args: TrainingArguments) -> list[str]:
        written = []
        for name in self.outputs:
            # an absolute name stays as it is; output_dir is never None once TrainingArguments is built
            path = os.path.join(args.output_dir, name)  # type: ignore[arg-type]
            # titled as DeepSpeed's engine titles it: the steps taken once the last profiled one ended
            write(result, path, profile_step=self.profile_step + self.steps)
            written.append(path)
            logger.info("flopsight: step %d profiled, report written to %s", self.profile_step, path)
        return written
