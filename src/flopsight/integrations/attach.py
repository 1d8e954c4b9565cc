"""Profile one training step from a DeepSpeed ``flops_profiler`` config, loop unchanged.

:func:`attach` reads the same config block DeepSpeed's engine reads and does what the
engine does with it, for any PyTorch training loop: it counts ``optimizer.step()`` calls
through the optimizer's step hooks, profiles the training step that begins once
``profile_step`` of them have completed (its forward passes, backward passes and the step
itself), prints the report at the end of that step, and removes everything it installed::

    handle = flopsight.attach(model, optimizer, ds_config)   # ds_config["flops_profiler"]
    for batch in loader:                                     # the loop as it was
        loss = model(batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    handle.close()      # or `with flopsight.attach(...):` -- warns if profile_step never came

``profile_step`` counts as DeepSpeed's engine (its ``global_steps`` when the profiled step
begins) and flopsight's trainer callbacks do, from ``attach`` on: the ``optimizer.step()``
calls completed before the profiled step. Profiling starts when the ``profile_step``-th ends,
at ``attach`` for 0 (the first step, its one-time costs marked in the result); the default 1
profiles the second step. The report's title is DeepSpeed's, ``Profile Summary at step N``
with N the steps counted when it prints (``profile_step + 1`` for one step). Under
``torch.distributed`` every rank profiles that step; rank 0 gathers their results
(``handle.result.ranks``) and prints.

>>> import torch, flopsight
>>> model = torch.nn.Linear(4, 2)
>>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
>>> config = {"flops_profiler": {"enabled": True, "profile_step": 1, "detailed": False}}
>>> with flopsight.attach(model, opt, config) as handle:   # the second step: 1 taken before it
...     for _ in range(3):
...         model(torch.ones(8, 4)).sum().backward()
...         opt.step()
...         if handle.steps == 1:
...             print("step 1 done, nothing printed yet")  # doctest: +ELLIPSIS
step 1 done, nothing printed yet
<BLANKLINE>
-------------------------- DeepSpeed Flops Profiler --------------------------
(flopsight: the DeepSpeed Flops Profiler's report, counted at the aten-operator level)
Profile Summary at step 2:
...
>>> handle.done, handle.result.iteration.backward.macs   # 8 rows * 4 inputs * 2 outputs: grad of the weight
(True, 64)
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

from .._process import PROCESS, WARNED
from .._wrap import wrap_method
from ..analysis.report_figures import ParallelInfo
from ..analysis.report_options import ReportOptions
from ..capture.model.parallel import engine_parallel
from ..capture.sources.optimizer import check_optimizer
from ..options import ProfileOptions
from ..profiler import Profiler, check_model
from ..renderers.output import check_output_file, write
from ..result.profile_result import ProfileResult
from ..result.steps import as_first_step
from .deepspeed.api import engine_parallel_info
from .deepspeed.config import FlopsProfilerConfig, parse_config
from .step_numbering import warn_numbering_changed

if TYPE_CHECKING:
    from torch.utils.hooks import RemovableHandle

__all__ = ["attach", "AttachedProfiler"]


def _rank() -> int:
    dist = torch.distributed
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class AttachedProfiler:
    """What :func:`attach` returns: where the profile stands, and :meth:`close`.

    ``steps`` counts the optimizer's steps since attach; ``result`` is the
    :class:`~flopsight.ProfileResult` of the step after ``profile_step`` of them and
    ``report`` its text (both None until it ended; ``report`` stays None on ranks other
    than 0).
    """

    def __init__(self, model: nn.Module, optimizer: Any, config: FlopsProfilerConfig, batch_size: int | None,
                 parallel: ParallelInfo | None = None):
        self.model = model
        self.optimizer = optimizer
        self.config = config
        self.steps = 0
        self.result: ProfileResult | None = None
        self.report: str | None = None
        self._parallel = parallel
        self._profiler: Profiler | None = None
        self._removers: list = []
        self._done = False
        if config.enabled:
            torch_optimizer = isinstance(optimizer, torch.optim.Optimizer)
            # built now so a bad model or batch_size fails at attach, not at step N; a
            # wrapper's (ZeRO's, the engine's) whole step() and backward() are measured
            options = ProfileOptions(batch_size=batch_size, optimizer=None if torch_optimizer else optimizer,
                                     parallel=engine_parallel(optimizer) if _is_engine(optimizer) else None,
                                     memory=config.memory)
            self._profiler = Profiler(model, options=options)
            if torch_optimizer:
                self._removers.append(optimizer.register_step_post_hook(self._after_step).remove)
            else:  # a wrapper has no step hooks: count its steps around its own step()
                self._removers.append(wrap_method(optimizer, "step", self._wrapped_step))
            if config.profile_step == 0:  # the first step: it begins now
                self._start()

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    @property
    def done(self) -> bool:
        """True once the profiled step(s) ended (and the profile was printed on rank 0)."""
        return self._done

    @property
    def attached(self) -> bool:
        """True while hooks (or a running profile) are installed."""
        return bool(self._removers) or (self._profiler is not None and self._profiler.running)

    def __repr__(self) -> str:
        if not self.enabled:
            state = "disabled"
        elif self._done:
            state = "done"
        elif not self.attached:
            state = "closed"
        elif self._profiler is not None and self._profiler.running:
            state = "profiling"
        else:
            state = "waiting"
        return f"<flopsight.AttachedProfiler {state}, profile_step={self.config.profile_step}, steps={self.steps}>"

    # -- the optimizer's hooks ----------------------------------------------------------
    def _start(self) -> None:
        profiler = self._profiler
        if profiler is None:  # disabled: no hook was installed to get here
            return
        profiler.start()  # every rank profiles; rank 0 gathers and prints
        if _rank() == 0:  # the rank that reports: a process ending meanwhile still reports
            profiler.save_at_exit(self._save_incomplete, steps=self.config.steps)

    def _save_incomplete(self, result: ProfileResult) -> None:
        """The process ends during the profiled step(s): what was measured, marked incomplete,
        to ``output_file`` (on stdout it would follow a traceback: one line on stderr says
        where to ask for it instead)."""
        self.result, self._done = result, True
        if self.config.output_file is None:
            print(f"flopsight: {result.metadata.incomplete}; no report printed (an output_file in the "
                  "flops_profiler block keeps an incomplete one)", file=sys.stderr)
            return
        self.report = write(result, self.config.output_file, **_report_options(self.config, self._parallel))

    def _after_step(self, optimizer: torch.optim.Optimizer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._stepped(lambda action: _after_this_step(self, action))

    def _wrapped_step(self, step: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        out = step(*args, **kwargs)
        self._stepped(lambda action: action())  # no hook dict is being iterated here: at once
        return out

    def _stepped(self, run: Callable[[Callable[[], None]], None]) -> None:
        """A step ended: start profiling when ``profile_step`` steps are done (as the
        engine's ``global_steps == profile_step``), begin the next profiled step after each
        but the last of ``steps``, finish after the last (each action through ``run``)."""
        self.steps += 1
        before, last = self.config.profile_step, self.config.profile_step + self.config.steps
        if self.steps == before:
            self._start()
        elif before < self.steps < last:
            run(self._next_step)
        elif self.steps == last:
            run(self._finish)

    def _next_step(self) -> None:
        if self._profiler is not None and self._profiler.running:
            self._profiler.step()

    def _finish(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            if self._profiler is not None and self._profiler.running:
                self._profiler.stop()
                self.result = self._profiler.result  # what stop() returned: a running profiler's stop() has one
                if self.config.profile_step == 0:  # the first step after attach: named as such
                    self.result = as_first_step(self.result)
                if _rank() != 0:
                    return
                self.report = write(self.result, self.config.output_file,
                                    **_report_options(self.config, self._parallel))
        finally:
            self._detach()

    def _detach(self) -> None:
        try:
            if self._profiler is not None and self._profiler.running:
                self._profiler.stop()
        finally:
            while self._removers:
                self._removers.pop()()

    # -- closing --------------------------------------------------------------------------
    def close(self) -> None:
        """Remove everything still installed; warns if the profiled step(s) never ended."""
        if not self.attached:
            return
        FINISHES.pending[:] = [(h, a) for h, a in FINISHES.pending if h is not self]
        self._detach()
        if not self._done:
            ran = f"{self.steps} step{'' if self.steps == 1 else 's'} ran"
            needed = self.config.profile_step + self.config.steps
            warnings.warn(
                f"flopsight: profile_step={self.config.profile_step} was never reached: {ran} of the {needed} "
                f"needed; nothing was profiled",
                UserWarning,
                stacklevel=2,
            )

    def __enter__(self) -> AttachedProfiler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Finishing at the end of a step. Torch calls an optimizer's own post hooks first, then
# the global ones, among which the profiler ends its step span; and it iterates those
# dicts live, so a hook may only be removed from one that has no further entry to visit.
# So the handles whose step this is are finished from one global post hook, registered
# during the step (from their optimizer's own post hook) and thereby the last to run:
# removing it, the profilers' hooks and the handles' own hooks from there is safe.
class Finishes:
    """The handles whose step is ending, and the one global post hook that finishes them."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.pending: list[tuple[AttachedProfiler, Callable[[], None]]] = []
        self.finisher: RemovableHandle | None = None


#: the process's handles finishing at the end of this step
FINISHES: Finishes = PROCESS.own("attach finishes", Finishes)


def _after_this_step(handle: AttachedProfiler, action: Callable[[], None]) -> None:
    """Run ``action`` (the handle's next step or finish) once this step's hooks have run."""
    FINISHES.pending.append((handle, action))
    if FINISHES.finisher is None:
        FINISHES.finisher = register_optimizer_step_post_hook(_run_pending)


def _run_pending(optimizer: torch.optim.Optimizer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    actions = FINISHES.pending[:]
    FINISHES.pending.clear()
    if FINISHES.finisher is not None:
        FINISHES.finisher.remove()
        FINISHES.finisher = None
    error = None
    for _, action in actions:
        try:
            action()
        except Exception as e:  # finish (and detach) every handle, then raise the first error
            error = error or e
    if error is not None:
        raise error


def attach(
    model: nn.Module,
    optimizer: Any = None,
    config: Mapping[str, Any] | str | os.PathLike | None = None,
    *,
    batch_size: int | None = None,
) -> AttachedProfiler:
    """Profile the training step of ``model`` after ``profile_step`` optimizer steps, as
    DeepSpeed's engine would.

    Args:
        model: the module the loop calls (a DDP wrapper or the model inside it), or a
            DeepSpeed engine: then its model is profiled, ``optimizer`` defaults to the
            engine (its whole ``step()`` and ``backward()`` are measured), ``config`` to the
            engine's own config, and the report's parallel sizes are the engine's.
        optimizer: the optimizer whose ``step()`` calls are counted: a torch optimizer, or
            a wrapper with a ``step()`` of its own (a DeepSpeed ZeRO optimizer, an engine).
        config: DeepSpeed's config (dict or JSON path) with a ``"flops_profiler"`` block,
            or the block: ``enabled`` (default False, as in DeepSpeed: then nothing is
            attached; a config without the block is off too), ``profile_step`` (1: the
            optimizer steps completed since attach before the profiled one; 0 is the first),
            ``module_depth`` (-1), ``top_modules`` (1), ``detailed`` (True), ``output_file``
            (None: stdout), ``recompute_fwd_factor`` (0: DeepSpeed's lines estimate the
            backward as ``2 + recompute_fwd_factor`` times the forward); flopsight's own keys,
            which DeepSpeed ignores: ``steps`` (1: how many steps are profiled from
            ``profile_step`` on; the report's times are their medians with their spread)
            and ``memory`` (True: memory is counted too).
        batch_size: samples per forward call, when the first dimension of the model's
            first input is not the batch.

    The report is printed at the end of the profiled step (to ``output_file`` if given);
    then everything is removed. Use the result as a context manager, or call
    ``close()``, so that nothing stays installed if the loop ends (or fails) earlier.
    """
    parallel = None
    if _is_engine(model):
        engine: Any = model  # a DeepSpeedEngine (deepspeed has no type information)
        model = engine.module
        optimizer = engine if optimizer is None else optimizer
        config = _engine_config(engine) if config is None else config
        parallel = engine_parallel_info(engine)
    check_model(model)
    if optimizer is None:
        raise TypeError("optimizer: expected a torch.optim.Optimizer or an object with a step() method, got None")
    check_optimizer(optimizer)
    if config is None:
        raise TypeError("config: expected DeepSpeed's config (a dict or a JSON path) or its flops_profiler block")
    cfg = parse_config(config)
    if cfg.enabled:
        check_output_file(cfg.output_file)
        ReportOptions(**_report_options(cfg, parallel))
        _warn_numbering(cfg.profile_step)
    return AttachedProfiler(model, optimizer, cfg, batch_size, parallel)


def _warn_numbering(step: int) -> None:
    # until 0.1.0 attach profiled the profile_step-th step after it, one earlier than the engine;
    # 0 was refused then, so a 0 was written for the numbering of now
    if step >= 1 and WARNED.first("attach profile_step numbering"):
        warn_numbering_changed(f"flopsight.attach's profile_step={step}", step, "DeepSpeed's engine does",
                               f"step {step + 1} after attach", stacklevel=3)


def _report_options(cfg: FlopsProfilerConfig, parallel: ParallelInfo | None) -> dict[str, Any]:
    """The report the config asks for, as DeepSpeed's engine prints it: titled with the steps
    counted when it prints (``global_steps`` then), one more than ``profile_step`` for one step."""
    return dict(profile_step=cfg.profile_step + cfg.steps, module_depth=cfg.module_depth,
                top_modules=cfg.top_modules, detailed=cfg.detailed, parallel=parallel,
                recompute_fwd_factor=cfg.recompute_fwd_factor)


def _is_engine(obj: Any) -> bool:
    """A DeepSpeed engine (told by its class, so DeepSpeed need not be imported)."""
    return any(c.__name__ == "DeepSpeedEngine" for c in type(obj).__mro__)


def _engine_config(engine: Any) -> dict:
    params = getattr(getattr(engine, "_config", None), "_param_dict", None)
    return dict(params) if isinstance(params, Mapping) else {}
