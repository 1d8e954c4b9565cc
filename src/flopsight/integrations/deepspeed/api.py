"""DeepSpeed-compatible API: ``get_model_profile``, ``FlopsProfiler`` and the module getters.

Same names, arguments, defaults and return values as DeepSpeed 0.19's
``deepspeed.profiling.flops_profiler``, so switching is one import line. Built on the
native :func:`flopsight.profile` / :class:`flopsight.Profiler`; nothing is patched and
no attribute is set on the user's modules.

>>> import torch
>>> from flopsight import get_model_profile
>>> model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU())
>>> get_model_profile(model, input_shape=(4, 64), print_profile=False)
('16.64 K', '8.19 KMACs', '2.08 K')
"""

from __future__ import annotations

import warnings
import weakref
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import nn

from ..._checks import is_int
from ..._process import PROCESS
from ...analysis.report_figures import ParallelInfo, model_forward
from ...analysis.report_options import ReportOptions
from ...capture.model.modules import describe, walk
from ...capture.model.recursion import room_for
from ...options import ProfileOptions
from ...profiler import Profiler, as_args, as_kwargs, check_model, profile
from ...renderers.numbers import duration_to_string, macs_to_string, number_to_string, params_to_string
from ...renderers.output import check_output_file, write
from ...renderers.text_renderer import render_aggregated
from ...result.profile_result import ProfileResult

if TYPE_CHECKING:
    from collections.abc import Callable

    from ...result.tree import ModuleNode

__all__ = [
    "get_model_profile",
    "FlopsProfiler",
    "get_module_flops",
    "get_module_macs",
    "get_module_duration",
]

#: a getter's number: an int (FLOPs, MACs) or a float (seconds)
_Number = TypeVar("_Number", int, float)


class Profiled:
    """Module object -> (profiler, path): what the get_module_* helpers read. Weak, so a
    profiled model is never kept alive, and nothing is stored on the module itself."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.modules: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


#: the process's modules profiled by a FlopsProfiler
PROFILED: Profiled = PROCESS.own("profiled modules", Profiled)


def engine_parallel_info(ds_engine: Any) -> ParallelInfo | None:
    """The report's parallel sizes and batch size per GPU, read off a DeepSpeed engine."""
    if ds_engine is None:
        return None
    # With sequence parallelism (Ulysses) DeepSpeed folds the data-parallel replicas into the
    # sequence-data-parallel group and sets dp_world_size to None: it reports that group
    dp_size = ds_engine.dp_world_size
    if dp_size is None:
        dp_size = getattr(ds_engine, "seq_dp_world_size", None) or 1
    return ParallelInfo(
        world_size=ds_engine.world_size,
        dp_size=dp_size,
        mp_size=ds_engine.mp_world_size,
        batch_size=ds_engine.train_micro_batch_size_per_gpu(),
    )


class FlopsProfiler:
    """Measures the latency, MACs, FLOPs and parameters of each module of ``model``.

    DeepSpeed's training-workflow API::

        prof = FlopsProfiler(model)
        prof.start_profile()
        loss = model(batch)
        prof.stop_profile()
        flops, macs, params = prof.get_total_flops(), prof.get_total_macs(), prof.get_total_params()
        prof.print_model_profile(profile_step=5)
        prof.end_profile()

    Put ``start_profile()``/``stop_profile()`` around a whole training step (forward,
    ``loss.backward()``, ``optimizer.step()``) and the backward pass and the step are
    measured too: ``get_total_backward_flops/macs/duration``, ``get_total_step_duration``
    and ``get_total_iteration_duration`` read them, and ``print_model_profile`` prints
    DeepSpeed's training lines from them. The other getters keep DeepSpeed's meaning (the
    forward). Any optimizer's ``step()`` counts. ``recompute_fwd_factor`` is DeepSpeed's: its
    training lines estimate the backward as ``2 + recompute_fwd_factor`` times the forward,
    as DeepSpeed does; the measured lines after them count the recomputed forward.

    Start twice, stop without start and end twice are harmless.
    """

    def __init__(self, model: nn.Module, ds_engine: Any = None, recompute_fwd_factor: float = 0.0):
        self.model = check_model(model)
        self.ds_engine = ds_engine
        self.recompute_fwd_factor = recompute_fwd_factor
        self.started = False
        self._profiler: Profiler | None = None
        self._result: ProfileResult | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def start_profile(self, ignore_list: list[type] | None = None) -> None:
        """Start counting and timing everything the model runs, its backward pass and
        any optimizer's step included (restarts if running)."""
        if self._profiler is not None and self._profiler.running:
            self._profiler.stop()
        self._result = None
        # DeepSpeed's API profiles where it is called (often rank 0 only): no gathering
        self._profiler = Profiler(self.model, options=ProfileOptions(ignore_modules=ignore_list, gather_timeout=None)
                                  ).start()
        self.started = True
        self._register()

    def stop_profile(self) -> None:
        """Stop counting; the profile stays available to the getters and printers."""
        if self._profiler_running():
            self._result = self._stop()

    def _stop(self) -> ProfileResult | None:
        """Stop the running profiler: its result."""
        return self._started().stop()

    def reset_profile(self) -> None:
        """Discard what was measured so far (and keep profiling if running)."""
        if self._profiler_running():
            self._stop()
            self._started().start()
        self._result = None

    def end_profile(self) -> None:
        """Stop and clean up; the last profile's totals stay readable."""
        self.stop_profile()
        self.started = False
        profiled = PROFILED.modules
        for module in list(profiled.keys()):
            if profiled.get(module, (None,))[0] is self:
                del profiled[module]

    def _profiler_running(self) -> bool:
        """Whether a capture is running (started, not yet stopped)."""
        return self._profiler is not None and self._profiler.running

    def _started(self) -> Profiler:
        """The profiler of the last start: where it is asked for, one was started."""
        if self._profiler is None:
            raise RuntimeError("FlopsProfiler: start_profile() was never called")
        return self._profiler

    def _register(self) -> None:
        for name, module in self.model.named_modules():
            PROFILED.modules[module] = (self, name)

    # -- results --------------------------------------------------------------------------
    @property
    def result(self) -> ProfileResult:
        """The native :class:`~flopsight.ProfileResult` (a snapshot while still running)."""
        result = self._measured()
        if result is None:
            raise RuntimeError("FlopsProfiler: nothing measured yet; call start_profile() and run the model")
        return result

    def _measured(self) -> ProfileResult | None:
        """What was measured so far (None before start_profile() and after reset_profile()
        until the model runs again)."""
        if self._result is not None:
            return self._result
        if self._profiler is not None and self._profiler.running:
            snapshot = self._profiler.snapshot()
            return snapshot if snapshot.total.ran or snapshot.spans.get("backward") else None
        return None

    def _total(self, read: Callable[[ProfileResult], _Number], as_string: bool,
               fmt: Callable[[float], str]) -> _Number | str:
        """``read(result)``, 0 when nothing was measured (DeepSpeed's getters read 0 then)."""
        result = self._measured()
        value = read(result) if result is not None else 0
        return fmt(value) if as_string else value

    def _duration(self, read: Callable[[ProfileResult], float], as_string: bool) -> float | str:
        """A time, as :meth:`_total`; as a string ``"n/a"`` on the meta device, as the report
        prints it (nothing ran on hardware; the number keeps DeepSpeed's type)."""
        result = self._measured()
        if as_string and result is not None and result.metadata.device_type == "meta":
            return "n/a"
        return self._total(read, as_string, duration_to_string)

    def get_total_flops(self, as_string: bool = False) -> int | str:
        """Forward FLOPs of the whole model."""
        return self._total(lambda r: r.total.forward.flops, as_string, number_to_string)

    def get_total_macs(self, as_string: bool = False) -> int | str:
        """Forward MACs of the whole model."""
        return self._total(lambda r: r.total.forward.macs, as_string, macs_to_string)

    def get_total_duration(self, as_string: bool = False) -> float | str:
        """Forward latency of the whole model, in seconds (a timed step's where the engine
        timed one apart from the counted step: ``result.iteration.timed``)."""
        return self._duration(lambda r: model_forward(r, r.iteration).latency, as_string)

    def get_total_params(self, as_string: bool = False) -> int | str:
        """Parameters of the model (each tensor once; known before anything ran, as in DeepSpeed)."""
        result = self._measured()
        params = result.total.params if result is not None else describe(self.model)[""].params
        return params_to_string(params) if as_string else params

    # Beyond DeepSpeed (which estimates the backward as 2 * forward): what the backward
    # pass and optimizer.step() between start_profile() and stop_profile() really cost.
    def get_total_backward_flops(self, as_string: bool = False) -> int | str:
        """Measured backward FLOPs of the whole model (0 if no backward ran)."""
        return self._total(lambda r: r.iteration.backward.flops, as_string, number_to_string)

    def get_total_backward_macs(self, as_string: bool = False) -> int | str:
        """Measured backward MACs of the whole model (0 if no backward ran)."""
        return self._total(lambda r: r.iteration.backward.macs, as_string, macs_to_string)

    def get_total_backward_duration(self, as_string: bool = False) -> float | str:
        """Wall-clock seconds of the backward pass(es)."""
        return self._duration(lambda r: r.iteration.backward.latency, as_string)

    def get_total_step_duration(self, as_string: bool = False) -> float | str:
        """Wall-clock seconds of ``optimizer.step()`` (any optimizer's)."""
        return self._duration(lambda r: r.iteration.step.latency, as_string)

    def get_total_iteration_duration(self, as_string: bool = False) -> float | str:
        """Wall-clock seconds from ``start_profile()`` to ``stop_profile()``."""
        return self._duration(lambda r: r.iteration.latency, as_string)

    # -- printing -------------------------------------------------------------------------
    def print_model_profile(
        self,
        profile_step: int = 1,
        module_depth: int = -1,
        top_modules: int = 1,
        detailed: bool = True,
        output_file: str | None = None,
        *,
        ops: int | None = None,
        collapse: bool = False,
        detail_depth: int | None = None,
        peak: Any = None,
        efficiency: bool = False,
        dtype: str | None = None,
    ) -> None:
        """Print the summary, aggregated and detailed profile (to ``output_file`` if given);
        with the training lines when a backward pass or an optimizer step was measured.

        Beyond DeepSpeed, keyword-only and off by default (DeepSpeed's positional arguments
        and layout are unchanged): ``ops``, ``collapse``, ``detail_depth``, ``peak``,
        ``efficiency`` and ``dtype``, as in
        :func:`~flopsight.renderers.text_renderer.render_text`.
        """
        options = self._report_options(profile_step=profile_step, module_depth=module_depth, top_modules=top_modules,
                                       detailed=detailed, output_file=output_file, ops=ops, collapse=collapse,
                                       detail_depth=detail_depth, peak=peak, efficiency=efficiency, dtype=dtype)
        output_file = options.pop("output_file")
        result = self._measured()  # a snapshot while still running: built once
        if result is None:
            warnings.warn("flopsight: print_model_profile: nothing measured yet; call start_profile() and run the "
                          "model first", UserWarning, stacklevel=2)
            return
        write(result, output_file, **options)

    def _report_options(self, output_file: str | None = None, **report: Any) -> dict[str, Any]:
        """The report's options (``output_file`` among them), checked before anything is read."""
        check_output_file(output_file)
        options = dict(report, parallel=engine_parallel_info(self.ds_engine),
                       recompute_fwd_factor=self.recompute_fwd_factor)
        ReportOptions(**options)
        return {**options, "output_file": output_file}

    def print_model_aggregated_profile(self, module_depth: int = -1, top_modules: int = 1) -> None:
        """Print only the top modules per depth."""
        if not self.started:
            return
        write(render_aggregated(self.result, module_depth=module_depth, top_modules=top_modules))


def _lookup(module: nn.Module) -> ModuleNode:
    if not isinstance(module, nn.Module):
        raise TypeError(f"module: expected a torch.nn.Module, got {type(module).__name__}")
    entry = PROFILED.modules.get(module)
    if entry is None:
        raise ValueError("module: not part of a model profiled by a FlopsProfiler (call start_profile() first)")
    profiler, path = entry
    return profiler.result.module(path)


def get_module_flops(module: nn.Module) -> int:
    """Forward FLOPs of ``module`` and its submodules in the current profile."""
    return _lookup(module).forward.flops


def get_module_macs(module: nn.Module) -> int:
    """Forward MACs of ``module`` and its submodules in the current profile."""
    return _lookup(module).forward.macs


def get_module_duration(module: nn.Module) -> float:
    """Forward latency (seconds) of ``module`` in the current profile; containers sum their children."""
    return _lookup(module).forward.latency


def _check_input_shape(input_shape: Any) -> tuple[int, ...]:
    ok = (
        isinstance(input_shape, tuple)
        and len(input_shape) >= 1
        and all(is_int(d) and d > 0 for d in input_shape)
    )
    if not ok:
        raise TypeError(f"input_shape: expected a non-empty tuple of positive ints, got {input_shape!r}")
    return input_shape


def _input_from_shape(model: nn.Module, shape: tuple[int, ...]) -> torch.Tensor:
    """A tensor of ``shape`` on the model's device and floating dtype (ones, not garbage)."""
    for p in (p for m in walk(model) for p in m._parameters.values() if p is not None):  # model.parameters()
        return torch.ones(shape, dtype=p.dtype if p.is_floating_point() else None, device=p.device)
    return torch.ones(shape)


def get_model_profile(
    model: nn.Module,
    input_shape: tuple[int, ...] | None = None,
    args: list = [],  # noqa: B006  (DeepSpeed's signature; never mutated)
    kwargs: dict = {},  # noqa: B006
    print_profile: bool = True,
    detailed: bool = True,
    module_depth: int = -1,
    top_modules: int = 1,
    warm_up: int = 1,
    as_string: bool = True,
    output_file: str | None = None,
    ignore_modules: list[type] | None = None,
    mode: str = "forward",
    func_name: str | None = None,
    attention: str = "dense",
    timing: str = "auto",
    *,
    ops: int | None = None,
    collapse: bool = False,
    detail_depth: int | None = None,
    peak: Any = None,
    efficiency: bool = False,
    dtype: str | None = None,
    backend: str | None = None,
    repeat: int = 1,
) -> tuple[str, str, str] | tuple[int, int, int]:
    """Profile one forward (or ``generate``, or ``func_name``) call; returns (flops, macs, params).

    As in DeepSpeed, the model is put in eval mode for the run (and, unlike DeepSpeed,
    put back afterwards). ``input_shape`` builds a single tensor of ones on the model's
    device and dtype; otherwise ``args``/``kwargs`` are the call's inputs.

    Beyond DeepSpeed: ``attention``, ``"dense"`` or ``"effective"``, as in
    :func:`flopsight.profile`; ``timing``, how latency is kept free of the profiler's cost,
    as in :func:`flopsight.profile` (by default a separate pass timed with module hooks only
    when ``warm_up >= 1``; ``"subtract"`` times in the counted pass, as DeepSpeed does, with
    the profiler's own measured time taken out). Keyword-only, for the printed report and
    off by default: ``ops`` (operator tables), ``collapse`` (identical repeated layers as one
    entry), ``detail_depth``, ``peak``, ``efficiency`` and ``dtype``, as in
    :func:`~flopsight.renderers.text_renderer.render_text`. ``backend``: which path counts,
    as in :func:`flopsight.profile`. ``repeat``: how many calls are timed (the latencies are
    their medians, the report gives their spread), as in :func:`flopsight.profile`.
    """
    check_model(model)
    # per rank, as DeepSpeed's: no gathering
    profile_options = ProfileOptions(warm_up=warm_up, mode=mode, func_name=func_name, ignore_modules=ignore_modules,
                                     attention=attention, timing=timing, gather_timeout=None, backend=backend,
                                     repeat=repeat)
    call_args, call_kwargs = as_args(args), as_kwargs(kwargs)
    if input_shape is not None:
        if call_args:  # DeepSpeed builds the input from input_shape and ignores args
            warnings.warn("flopsight: input_shape and args both given: the input is built from input_shape and args "
                          "are ignored, as in DeepSpeed", UserWarning, stacklevel=2)
        call_args = (_input_from_shape(model, _check_input_shape(input_shape)),)
    if not call_args and not call_kwargs:
        raise ValueError("input_shape: the model needs inputs; pass input_shape=(...), args=[...] or kwargs={...}")
    check_output_file(output_file)
    options = dict(profile_step=warm_up, module_depth=module_depth, top_modules=top_modules, detailed=detailed,
                   ops=ops, collapse=collapse, detail_depth=detail_depth, peak=peak, efficiency=efficiency, dtype=dtype)
    ReportOptions(**options)  # checked before the model runs

    # walked without recursion, and room made for eval()'s: the model may nest past Python's recursion limit
    flags = [(m, m.training) for m in walk(model)]
    with room_for(model):
        model.eval()
    try:
        result = profile(model, call_args, call_kwargs, options=profile_options)
    finally:
        for m, flag in flags:
            if m.training is not flag:  # nn.Module.__setattr__ is slow: write only what changed
                m.training = flag

    if print_profile:
        write(result, output_file, **options)
    total = result.total
    flops, macs, params = total.forward.flops, total.forward.macs, total.params
    if as_string:
        return number_to_string(flops), macs_to_string(macs), params_to_string(params)
    return flops, macs, params
