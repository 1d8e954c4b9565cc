"""One line makes DeepSpeed's engine profile with flopsight.

Put it before ``deepspeed.initialize``; the script and its config stay as they are::

    import flopsight.integrations.deepspeed.engine
    flopsight.deepspeed.install()
    engine, optimizer, _, _ = deepspeed.initialize(model=model, config=ds_config)

The engine then builds a flopsight :class:`EngineProfiler` wherever it built DeepSpeed's
``FlopsProfiler`` (when its config has ``"flops_profiler": {"enabled": true, ...}``) and
calls it exactly as before: the same keys and defaults, the same step (``profile_step``:
the engine's ``global_steps`` when the profiled forward runs) and the same report title
(``Profile Summary at step N``, N the engine's step count when it prints, one more than
``profile_step``, as DeepSpeed's own report says). What changes is what is measured: the
engine only starts and stops DeepSpeed's profiler around each forward, and flopsight keeps
measuring through the backward pass and the whole ``engine.step()`` (ZeRO's reductions and
copies, the optimizer, the scheduler), over every micro-batch of the profiled step, and
prints DeepSpeed's lines followed by the measured ones. Every rank measures the step and
rank 0, which prints, gathers them (``result.ranks``). The fwd, bwd, step and iteration
latencies are those of the step before the profiled one, timed at its phases' boundaries only
and not counted (:mod:`.timed_step`), so the profiler's own cost is in none of them; the
counts, module times and the step anatomy are the profiled step's. With ``"steps": N`` in the block (or
``install(steps=N)``) N steps are profiled from ``profile_step`` on, each on its own, and the
report is printed after the last. :func:`uninstall` puts DeepSpeed's
class back; nothing else is installed, and an engine profiler removes all it installed
once the profiled step is over.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..._background import BACKGROUND
from ..._checks import check_int
from ..._process import PROCESS
from ..._wrap import wrap_method
from ...capture.assembly.gather import DEFAULT_GATHER_TIMEOUT, announce
from ...capture.model.inputs import model_device
from ...capture.model.parallel import engine_parallel
from ...capture.runtime.timing import default_clock
from ...options import ProfileOptions
from ...profiler import Profiler, with_ranks
from ...renderers.output import write
from ...result.profile_result import ProfileResult
from .api import FlopsProfiler
from .config import FlopsProfilerConfig, parse_config
from .timed_step import TimedStep

__all__ = ["install", "uninstall", "installed", "EngineProfiler"]


def _engine_modules() -> list:
    try:
        import deepspeed.runtime.engine as engine
    except ImportError as e:
        raise ImportError("flopsight.deepspeed.install: DeepSpeed is not importable (pip install deepspeed)") from e
    return [engine]


class Installation:
    """What :func:`install` did in this process: (module, attribute, DeepSpeed's object) for
    each name it replaced, and what it was asked for, read by each :class:`EngineProfiler` when
    its engine builds it (None: what the engine's flops_profiler block says, else its default)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.replaced: list[tuple[Any, str, Any]] = []
        self.options: dict[str, Any] = {"memory": None, "steps": None}


#: the process's installation
INSTALLED: Installation = PROCESS.own("deepspeed install", Installation)


def install(*, memory: bool | None = None, steps: int | None = None) -> None:
    """Make every DeepSpeed engine created from now on profile with flopsight (calling it
    again only changes the options). ``memory``: also count memory, as
    :class:`flopsight.Profiler` does (``result.memory``, and the report's memory lines);
    ``steps``: how many steps are profiled from ``profile_step`` on (the report's times are
    their medians, with their spread). None: the ``flops_profiler`` block's own ``memory``
    and ``steps`` keys (which DeepSpeed ignores), else memory on and one step."""
    if memory is not None and not isinstance(memory, bool):
        raise TypeError(f"memory: expected a bool or None, got {type(memory).__name__}")
    check_int(steps, "steps", low=1, optional=True, what="how many steps to profile")  # before any engine runs
    INSTALLED.options.update(memory=memory, steps=steps)
    if INSTALLED.replaced:
        return
    for module in _engine_modules():
        INSTALLED.replaced.append((module, "FlopsProfiler", module.FlopsProfiler))
        module.FlopsProfiler = EngineProfiler


def uninstall() -> None:
    """Put DeepSpeed's own profiler back (engines already built keep the one they have)."""
    INSTALLED.options.update(memory=None, steps=None)
    while INSTALLED.replaced:
        module, name, original = INSTALLED.replaced.pop()
        setattr(module, name, original)


def installed() -> bool:
    """Whether :func:`install` is in effect."""
    return bool(INSTALLED.replaced)


class EngineProfiler(FlopsProfiler):
    """The profiler a DeepSpeed engine builds after :func:`install` (``FlopsProfiler``'s API).

    The engine calls ``start_profile`` before each forward of the profiled step,
    ``stop_profile`` after it, then ``print_model_profile`` and ``end_profile`` from inside
    ``engine.step()``. The first start begins one capture that later starts join (every
    micro-batch of the step is measured); stops are kept until the step has updated the
    model, so the backward passes and the step are measured too; ``engine.step()`` as a
    whole is the step phase. Without an engine it is a plain :class:`FlopsProfiler`.
    """

    def __init__(self, model: nn.Module, ds_engine: Any = None, recompute_fwd_factor: float = 0.0):
        super().__init__(model, ds_engine, recompute_fwd_factor)
        self._steps_at_start: int | None = None
        self._hook = None
        block = _config_block(ds_engine)
        # warns about keys DeepSpeed ignores; its defaults without a block
        config = parse_config({"flops_profiler": block}) if block is not None else FlopsProfilerConfig()
        self._memory = config.memory if INSTALLED.options["memory"] is None else INSTALLED.options["memory"]
        self._steps = config.steps if INSTALLED.options["steps"] is None else INSTALLED.options["steps"]
        self._steps_done = 0
        self._unwrap_steps: Callable[[], None] | None = None  # the wrapper that ends each of several profiled steps
        self._unwrap_step: Callable[[], None] | None = None
        self._timed: TimedStep | None = None  # the step before the profiled one, timed (see timed_step)
        self._unwrap_backward: Callable[[], None] | None = None
        if isinstance(ds_engine, nn.Module):
            # DeepSpeed starts its profiler from a hook of the model, inside the model's call,
            # and on rank 0 only: start when the engine is called, so the whole forward is
            # measured, and on every rank, so rank 0 can gather them all
            self._hook = ds_engine.register_forward_pre_hook(self._engine_called)
            # the timed step's backward, routed now: engine.backward(loss_fn(engine(x), y)) looks
            # backward up before the forward that begins the step
            if callable(getattr(ds_engine, "backward", None)):
                self._unwrap_backward = wrap_method(ds_engine, "backward", self._backward_called)
            BACKGROUND.ready()  # the thread that finishes the profile, started now: not on a step

    def _backward_called(self, call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        timed = self._timed
        return timed.backward(call, args, kwargs) if timed is not None else call(*args, **kwargs)

    def _engine_called(self, engine: Any, args: tuple[Any, ...]) -> None:
        profile_step = engine.flops_profiler_profile_step()
        if engine.global_steps > profile_step or not engine.flops_profiler_enabled():
            self._remove_hook()
        elif engine.global_steps == profile_step - 1 >= 1:
            # the step before: timed, not counted (the engine's first step, with its one-time
            # setup, is never the one timed: then the profiled step's own times are reported)
            if self._timed is None:
                self._timed = TimedStep(engine, default_clock(_engine_device(engine)))
                self._timed.begin()
        elif engine.global_steps == profile_step:
            if engine.global_rank == 0:
                self.start_profile()
            elif not self._profiler_running():
                if self._steps > 1:
                    self._start_steps(engine)
                else:
                    self._follow(engine)

    # -- several steps: each one measured on its own --------------------------------------
    def _start_steps(self, engine: Any, ignore_list: list[type] | None = None) -> None:
        """Profile ``steps`` steps from this one on, every rank alike: a wrapper of
        ``engine.step()``, outside the profiler's own, ends each step when the engine has
        counted it, and after the last stops (rank 0 gathers the ranks and prints)."""
        self._steps_done = 0
        self._measure(engine, ignore_list)
        self._wrap_steps()

    def _measure(self, engine: Any, ignore_list: list[type] | None = None, keep: bool = True) -> None:
        """Start measuring the engine's step on this rank (rank 0 gathers every rank's into
        ``result.ranks``); ``keep``: as this profiler's own profile (its result, its modules
        readable by the module getters), not only measured for rank 0."""
        if self._timed is not None and not self._timed.done:  # its step never reached the boundary
            self._timed.remove()
            self._timed = None
        # gathered here (_stop), once the timed step's figures are in each rank's result
        options = ProfileOptions(optimizer=engine, ignore_modules=ignore_list, gather_timeout=None,
                                 parallel=engine_parallel(engine), memory=self._memory)
        announce()  # its Profiler gathers nothing: this one does when it stops (with_ranks)
        self._profiler = Profiler(self.model, options=options).start()
        if engine.global_rank == 0:  # the rank that reports: a process ending meanwhile still reports
            self._profiler.save_at_exit(self._save_incomplete, steps=self._steps)
        if keep:
            self._result = None
            self.started = True
            self._register()

    def _save_incomplete(self, result: ProfileResult) -> None:
        """The process ends while the step(s) are profiled (an exception, a launcher tearing the
        ranks down, fewer steps than ``steps``): rank 0 writes what it measured, marked
        incomplete, to the block's ``output_file`` (on stdout it would follow a traceback: one
        line on stderr says where to ask for it instead)."""
        engine = self.ds_engine
        output_file = engine.flops_profiler_output_file()
        self._result = result
        if output_file is None:
            print(f"flopsight: {result.metadata.incomplete}; no report printed (an output_file in the "
                  "flops_profiler block keeps an incomplete one)", file=sys.stderr)
            return
        FlopsProfiler.print_model_profile(
            self, profile_step=engine.global_steps, module_depth=engine.flops_profiler_module_depth(),
            top_modules=engine.flops_profiler_top_modules(), detailed=engine.flops_profiler_detailed(),
            output_file=output_file)

    def _wrap_steps(self) -> None:
        self._unwrap_steps = wrap_method(self.ds_engine, "step", self._one_of_the_steps)

    def _unwrap(self) -> None:
        unwrap, self._unwrap_steps = self._unwrap_steps, None
        if unwrap is not None:
            unwrap()

    def _one_of_the_steps(self, call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        engine = self.ds_engine
        before = engine.global_steps
        try:
            out = call(*args, **kwargs)
        except BaseException:
            self._end_steps(report=False)  # a failed step leaves nothing installed
            raise
        if engine.global_steps != before:  # the update ran: one profiled step is over
            self._steps_done += 1
            if self._steps_done < self._steps:
                # the next step's capture installs its own step wrapper: keep this one outside it
                self._unwrap()
                self._started().step()
                self._wrap_steps()
            else:
                self._end_steps(report=engine.global_rank == 0)
        return out

    def _stop(self) -> ProfileResult | None:
        """Stop measuring: the result, with the timed step's latencies where it was timed
        (``timed.<kind>`` spans), and on rank 0 every rank's (``result.ranks``)."""
        if self.ds_engine is None:
            return super()._stop()
        self._finish_detached(None)
        return self._measured()

    def _finish_detached(self, report: dict | None) -> None:
        """Stop measuring now, and finish off the step's critical path (a thread of its own):
        the result built, with the timed step's latencies where it was timed (``timed.<kind>``
        spans), every rank's gathered on rank 0 (``result.ranks``), and, given ``report``'s
        options (``output_file`` among them), the report written. The getters wait for it."""
        timed, self._timed = self._timed, None
        spans = {}
        if timed is not None:
            timed.remove()
            spans = timed.spans()

        def then(result: ProfileResult) -> None:
            if spans:
                result = result.updated(spans={**result.spans, **spans})
            self._result = result = with_ranks(result, DEFAULT_GATHER_TIMEOUT)
            if report is not None:
                options = dict(report)
                write(result, options.pop("output_file"), **options)

        self._started().stop_detached(then)

    def _measured(self) -> ProfileResult | None:
        if self._profiler is not None:
            self._profiler.wait()  # a detached finish: its result
        return super()._measured()

    def _end_steps(self, report: bool) -> None:
        self._unwrap()
        try:
            if self._profiler_running():
                engine = self.ds_engine
                self._finish_detached(self._report_options(
                    profile_step=engine.global_steps, module_depth=engine.flops_profiler_module_depth(),
                    top_modules=engine.flops_profiler_top_modules(), detailed=engine.flops_profiler_detailed(),
                    output_file=engine.flops_profiler_output_file()) if report else None)
        finally:
            FlopsProfiler.end_profile(self)
            self._remove_hook()

    def _follow(self, engine: Any) -> None:
        """On a rank DeepSpeed does not profile: measure the step too, and stop (publishing
        the result for rank 0) when ``engine.step()`` has completed it."""

        def step(call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            try:
                out = call(*args, **kwargs)
            except BaseException:
                self._end_follow()  # a failed step leaves nothing installed either
                raise
            if self._step_done():
                self._end_follow()
            return out

        self._steps_at_start = engine.global_steps
        # wrapped before the profiler wraps it, so the profiler's wrapper comes off first
        self._unwrap_step = wrap_method(engine, "step", step)
        self._measure(engine, keep=False)

    def _end_follow(self) -> None:
        unwrap, self._unwrap_step = self._unwrap_step, None
        try:
            if self._profiler_running():
                self._finish_detached(None)  # published for rank 0, off the step's critical path
        finally:
            if unwrap is not None:
                unwrap()
            self._remove_hook()

    def _remove_hook(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if not self._profiler_running():  # nothing left installed (a running capture wraps backward too)
            unwrap, self._unwrap_backward = self._unwrap_backward, None
            if unwrap is not None:
                unwrap()
            if self._timed is not None:
                self._timed.remove()
                self._timed = None

    def _step_done(self) -> bool:
        """Whether the profiled step has updated the model (the engine counted it)."""
        if self.ds_engine is None:
            return True
        return self._steps_at_start is not None and self.ds_engine.global_steps != self._steps_at_start

    def start_profile(self, ignore_list: list[type] | None = None) -> None:
        if self.ds_engine is None:
            return super().start_profile(ignore_list)
        if self._profiler_running():
            return  # a later micro-batch of the step being profiled
        if self._steps > 1:
            return self._start_steps(self.ds_engine, ignore_list)
        self._steps_at_start = self.ds_engine.global_steps
        self._measure(self.ds_engine, ignore_list)  # every rank measures the step (see _follow)

    def stop_profile(self) -> None:
        if self._step_done() and not self._several():
            super().stop_profile()

    def print_model_profile(self, profile_step: int = 1, module_depth: int = -1, top_modules: int = 1,
                            detailed: bool = True, output_file: str | None = None, *, ops: int | None = None,
                            collapse: bool = False, detail_depth: int | None = None, peak: Any = None,
                            efficiency: bool = False, dtype: str | None = None) -> None:
        if not self._step_done() or self._several():
            return  # a micro-batch before the boundary, or more steps to profile: it goes on
        # FlopsProfiler's options beyond DeepSpeed's (the engine passes none of them)
        beyond = dict(ops=ops, collapse=collapse, detail_depth=detail_depth, peak=peak, efficiency=efficiency,
                      dtype=dtype)
        if self.ds_engine is None or not self._profiler_running():
            super().stop_profile()
            return super().print_model_profile(profile_step, module_depth, top_modules, detailed, output_file,
                                               **beyond)
        # gathered, rendered and written off the step's critical path: it returns at once
        self._finish_detached(self._report_options(profile_step=profile_step, module_depth=module_depth,
                                                   top_modules=top_modules, detailed=detailed,
                                                   output_file=output_file, **beyond))

    def end_profile(self) -> None:
        if self._step_done() and not self._several():
            super().end_profile()
            self._remove_hook()  # the profiled step is over: nothing stays installed

    def _several(self) -> bool:
        """Several steps are being profiled (their wrapper ends and prints them)."""
        return self.ds_engine is not None and self._steps > 1


def _engine_device(engine: Any) -> torch.device:
    """The device the engine computes on (its own, else its model's)."""
    device = getattr(engine, "device", None)
    return torch.device(device) if device is not None else model_device(engine.module)


def _config_block(engine: Any) -> dict[str, Any] | None:
    """The engine's raw ``flops_profiler`` block, or None."""
    params = getattr(getattr(engine, "_config", None), "_param_dict", None)
    block = params.get("flops_profiler") if isinstance(params, dict) else None
    return block if isinstance(block, dict) else None
