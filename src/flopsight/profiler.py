"""The native API: :func:`profile` a call, or wrap any code in a :class:`Profiler`.

>>> import torch, flopsight
>>> model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU())
>>> result = flopsight.profile(model, torch.ones(1, 3, 10, 10))
>>> result.module("0").forward.macs  # 8 out-channels * 3*3*3 kernel * 8*8 positions
13824
>>> with flopsight.Profiler(model) as prof:
...     _ = model(torch.ones(2, 3, 10, 10))
>>> prof.result.total.forward.macs
27648
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import platform
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ._background import BACKGROUND
from ._quiet import ignoring
from ._torch_private import kineto_running, original_module
from ._version import __version__
from .capture.assembly.build import build_result, device_timed
from .capture.assembly.gather import announce, gather_ranks, publish_failure, span_failure_text
from .capture.charging.calls import ModuleCalls
from .capture.model.inputs import batch_size, describe_inputs, model_device, model_dtype
from .capture.model.modules import compiled_paths, describe
from .capture.model.parallel import parallel_metadata, warn_data_parallel
from .capture.model.recursion import deep_enough, room_for
from .capture.model.state import ModelState
from .capture.runs.plan import CaptureOptions
from .capture.runs.session import CaptureSession
from .capture.runtime.running import RUNNING
from .capture.runtime.timing import Clock, default_clock, on_device
from .capture.sources.pipeline import PipelineRuns
from .capture.sources.spans import SpanTimes
from .formulas.registry import Registry
from .options import CALL_ONLY, SPAN_ONLY, ProfileOptions
from .result.metadata import Inputs, Metadata, Timing
from .result.profile_result import ProfileResult
from .result.steps import combine_steps
from .timing_plan import timing_plan

if TYPE_CHECKING:
    from types import TracebackType

    from .capture.assembly.raw import RawCapture
    from .capture.model.modules import ModuleInfo

__all__ = ["profile", "Profiler", "ProfileOptions", "CallProfile", "open_session"]

# -- argument checks ---------------------------------------------------------------------
def check_model(model: Any) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    return model


def method_name(model: nn.Module, mode: str, func_name: str | None) -> str:
    """The method to profile: ``func_name`` if given, else the one ``mode`` names."""
    name = func_name if func_name is not None else mode
    if not isinstance(name, str) or not callable(getattr(model, name, None)):
        arg = "func_name" if func_name is not None else "mode"
        raise ValueError(f"{arg}: {type(model).__name__} has no method {name!r} to profile")
    return name


def as_args(args: Any) -> tuple:
    if args is None:
        return ()
    if isinstance(args, torch.Tensor):
        return (args,)
    if isinstance(args, (list, tuple)):
        return tuple(args)
    if isinstance(args, Mapping):  # a batch of named inputs (a dict, transformers' BatchEncoding)
        raise TypeError(f"args: expected a tensor, a tuple or a list of positional arguments, got a "
                        f"{type(args).__name__}; pass named inputs as kwargs=batch (the model is then called as "
                        "model(**batch)), or args=(batch,) for a model that takes the mapping itself")
    raise TypeError(f"args: expected a tensor, a tuple or a list of positional arguments, got {type(args).__name__}")


def as_kwargs(kwargs: Any) -> dict:
    if kwargs is None:
        return {}
    if not isinstance(kwargs, dict):
        raise TypeError(f"kwargs: expected a dict of keyword arguments, got {type(kwargs).__name__}")
    return dict(kwargs)


def _world() -> tuple[int, int]:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


#: torch's new per-backend fp32 precision names, in the legacy API's words
_PRECISION_NAMES = {"ieee": "highest", "tf32": "high", "bf16": "medium"}


def float32_matmul_precision() -> str:
    """torch's fp32 matmul precision in the legacy API's words (``"highest"``, ``"high"``,
    ``"medium"``): the new API first (``torch.backends.cuda.matmul.fp32_precision``, which
    ``torch.backends.fp32_precision`` also sets), then the legacy getter, which raises once the
    two APIs were mixed.

    >>> float32_matmul_precision()
    'highest'
    """
    new = getattr(getattr(getattr(torch.backends, "cuda", None), "matmul", None), "fp32_precision", "none")
    if new in _PRECISION_NAMES:
        return _PRECISION_NAMES[new]
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:  # the APIs mixed, the new one unset for matmuls: fp32 as written
        return "highest"


def cudnn_conv_precision() -> str:
    """How cuDNN runs float32 convolutions: ``"tf32"`` or ``"ieee"``; torch's new API first
    (``torch.backends.cudnn.conv.fp32_precision``), then ``torch.backends.cudnn.allow_tf32``
    (True by default: fp32 convolutions run in tf32 on GPUs that have it).

    >>> cudnn_conv_precision() in ("tf32", "ieee")
    True
    """
    new = getattr(getattr(torch.backends.cudnn, "conv", None), "fp32_precision", "none")
    if new in ("tf32", "ieee"):
        return new
    try:
        return "tf32" if torch.backends.cudnn.allow_tf32 else "ieee"
    except RuntimeError:  # the APIs mixed, the new one unset for convolutions
        return "ieee"


def run_metadata(model: nn.Module, args: tuple, kwargs: dict, *, everything: bool = False,
                 autocast: dict | None = None, **extra: Any) -> Metadata:
    """What the result records about the run besides the measurements (``everything``: a
    span without a model, see :func:`~.capture.inputs.model_device`)."""
    from .hardware import device_name  # the efficiency report looks the peak up by this name

    device = model_device(model, args, kwargs, everything=everything)
    world_size, rank = _world()
    return Metadata(
        flopsight_version=__version__,
        torch_version=torch.__version__.split("+")[0],
        python_version=platform.python_version(),
        model=type(model).__name__,
        model_class=f"{type(model).__module__}.{type(model).__qualname__}",
        device=str(device),
        device_type=device.type,
        # None off CUDA: the CPU's peak is measured on request, never looked up by name
        device_name=device_name(device) or "",
        dtype=str(model_dtype(model, args, kwargs)).replace("torch.", ""),
        float32_matmul_precision=float32_matmul_precision(),
        autocast_dtype=(autocast or {}).get(device.type, ""),
        cudnn_conv_precision=cudnn_conv_precision(),
        world_size=world_size,
        rank=rank,
        inputs=Inputs(describe_inputs(args, kwargs)) if args or kwargs else None,
        batch_size=batch_size(args, kwargs) if args or kwargs else None,
        **extra,
    )


def _span_timing(clock: Clock, phases: bool) -> Timing:
    """How a span (:class:`Profiler`) is timed: counted and timed in the same pass, its phases
    timed at their boundaries on a device (``phases``), else the profiler's own time taken
    out where the clock allows."""
    return Timing("phases" if phases else "subtract" if clock.subtracts_overhead else "single", clock.name)


# -- sessions ------------------------------------------------------------------------------
def open_session(infos: dict, options: ProfileOptions, registry: Registry, clock: Clock, *, count: bool = True,
                 timeline: bool = True, outside_to_root: bool = False, kernels: bool | None = None,
                 op_times: bool = False) -> CaptureSession:
    """A started capture session of the modules ``infos`` for ``options``: how :func:`profile`'s
    passes and :class:`Profiler`'s steps are all captured (``count``: count ops, else time
    module spans only, and the ops where ``op_times`` and the native recorder can stamp them;
    ``kernels``: record kernels, default ``options.kernels``)."""
    capture = CaptureOptions.of(options, infos, count=count, timeline=timeline, outside_to_root=outside_to_root,
                                op_times=op_times, **({} if kernels is None else {"kernels": kernels}))
    session = CaptureSession(capture, registry=registry, clock=clock)
    session.start()
    return session


# -- profile() -----------------------------------------------------------------------------
def profile(model: nn.Module, args: Any = (), kwargs: dict | None = None, *, options: ProfileOptions | None = None,
            **fields: Any) -> ProfileResult:
    """Profile one call of ``model`` (its forward, ``generate``, or any method).

    Args:
        model: the module to profile.
        args, kwargs: what the method is called with (a single tensor is accepted as args).
        options: a :class:`~flopsight.ProfileOptions`; ``fields`` are its fields, given
            here directly (they override ``options``'):

    The fields a call takes:
        warm_up: un-measured calls before the measured ones.
        repeat: how many calls are timed: latencies are their medians, each call's figures
            are kept in ``result.samples`` (counts come from one call: they do not vary).
        mode: ``"forward"`` or ``"generate"``.
        func_name: profile this method instead (overrides ``mode``).
        ignore_modules: module types not broken down; their cost goes to their parent.
        timing: ``"separate"`` counts in one pass and times another with only light
            module hooks (the counting pass doubles as the first warm-up);
            ``"subtract"`` counts and times in one pass and subtracts the profiler's
            measured overhead; ``"auto"`` separates when ``warm_up >= 1``. On CUDA, a
            forward not timed ``"subtract"`` is timed as the device's (``timing.method``
            ``"device"``): each module's latency is its kernels' GPU time, recorded in a
            pass of its own, and the forward's is that of uninstrumented calls, with two CUDA
            events around each; ``result.kernels.busy`` is the GPU's busy time, the rest of
            the forward its idle time (docs/conventions/timing.md).
        attention: ``"dense"`` counts every attention score entry (DeepSpeed's count);
            ``"effective"`` only those a causal mask, a sliding window, a packed batch or a
            block mask leaves in (docs/conventions/attention.md).
        clock: a clock from :mod:`flopsight.capture.runtime.timing` (tests inject ``FakeClock``).
        registry: formulas to count with (default: the global registry).
        gather_timeout: under torch.distributed, every rank profiles and rank 0 gathers their
            results into ``result.ranks``, waiting at most this many seconds for each (a
            rank that failed or never arrives is ``None``); None: no gathering.
        memory: also count memory (``result.memory``, ``result.module(path).memory``):
            activations saved for backward per module, peaks, parameters, gradients and
            optimizer state, from the tensors' storages (see :mod:`flopsight.result.memory`).
        backend: which path counts: ``"native"`` (a C++ recorder, built on first use: the
            same numbers at a fraction of the cost), ``"python"`` (a dispatch mode) or
            ``"auto"`` (native where it can count, see ``result.metadata.backend``);
            None: ``$FLOPSIGHT_BACKEND``, else ``"auto"``.
        kernels: also record kernels per module with torch.profiler in the timed pass:
            on CUDA each kernel's GPU time, on the CPU each operator's self time, charged to
            the module and phase of the op that launched it (``result.kernels``,
            ``result.module(path).record.kernels`` and ``.kernel_time``; see
            :mod:`flopsight.result.kernels`).

    The model is left as found: buffers (BatchNorm statistics), RNG state and training
    flags are restored, and every pass sees the same RNG state. Grad mode is the
    caller's: wrap the call in ``torch.no_grad()`` to profile inference.
    """
    options = ProfileOptions.of(options, **fields).refuse(
        SPAN_ONLY, "profile()", "it profiles one call; Profiler profiles a span of your own code")
    with room_for(check_model(model)):  # torch's own walks (parameters(), eval()) recurse too
        return CallProfile(model, args, kwargs, options).run()


class CallProfile:
    """One call of a model profiled (:func:`profile`): warm-ups, then a counting pass and
    timed passes, each captured by :func:`open_session` as :class:`Profiler`'s steps are, the
    model rewound to the same state before each."""

    def __init__(self, model: nn.Module, args: Any, kwargs: Any, options: ProfileOptions):
        check_model(model)
        self.args, self.kwargs = as_args(args), as_kwargs(kwargs)
        self.options = options
        self.name = method_name(model, options.mode, options.func_name)
        self.registry = options.formulas
        warn_data_parallel(model)
        # Count on the eager module: a dispatch mode run through a torch.compile'd wrapper
        # can leave it running eagerly afterwards. Time the model as given.
        self.target = original_module(model)
        # forward goes through __call__ so the root's hooks fire; other methods (generate)
        # call the model themselves
        self.count_call: Callable[..., Any]
        self.time_call: Callable[..., Any]
        self.count_call, self.time_call = ((self.target, model) if self.name == "forward"
                                           else (getattr(self.target, self.name), getattr(model, self.name)))
        self.infos = describe(self.target)
        compiled = model is not self.target
        # Compiled code runs fused and skips hooks added after compilation: the compiled model is
        # timed as a whole, through its wrapper
        self.time_infos = {"": dataclasses.replace(self.infos[""], module=model)} if compiled else self.infos
        # compiled regions, the model's or its modules': each compiles on its first call, which no
        # timed call may be
        self.regions = ("",) if compiled else compiled_paths(self.infos)
        self.clock = options.clock or default_clock(model_device(self.target, self.args, self.kwargs))
        self.plan = timing_plan(options.timing, options.warm_up, options.repeat, forward=self.name == "forward",
                                compiled=compiled, regions=bool(self.regions), on_device=on_device(self.clock),
                                subtracts=self.clock.subtracts_overhead, profiler_running=kineto_running(),
                                ops_timed=self._ops_timed())
        self.state = ModelState(self.target)
        self.passes = 0

    def _ops_timed(self) -> bool:
        """Whether a timed pass can time the operators too (the native recorder's stamps): not
        where it records kernels (torch.profiler then hears each module call in Python)."""
        if self.options.kernels:
            return False
        from .capture.backends.native import times_ops  # (the counting pass imports it anyway)

        return times_ops(self.options, self.clock, self.infos)

    def run(self) -> ProfileResult:
        options = self.options
        announce(options.gather_timeout)  # under torch.distributed: rank 0 waits for the ranks that profile
        try:
            with deep_enough(max(info.depth for info in self.infos.values())):
                counts, times = self._passes()
        except BaseException as e:
            if options.gather_timeout is not None:
                publish_failure(e)  # rank 0 learns what failed here instead of waiting for it
            raise
        finally:
            self.state.restore()
        # counts is the counting pass's where the plan counts in a pass of its own (plan.separate)
        first = (counts if counts is not None else times[0]).get(ModuleCalls)
        note = "latency of the whole compiled call only; counts from the eager module" if self.plan.compiled else None
        meta = run_metadata(self.target, self.args, self.kwargs, autocast=first.autocast if first is not None else None,
                            mode=options.mode, method=self.name, warm_up=options.warm_up, attention=options.attention,
                            compiled=self.regions, timing=Timing(self.plan.method, self.clock.name, note),
                            **parallel_metadata(self.target))
        timed = [build_result(self.infos, counts if counts is not None else t, t if counts is not None else None,
                              ignored=options.ignore, metadata=meta) for t in times]
        # no warm-up: the first timed call may be the model's first (lazy initialisation, caches)
        return with_ranks(combine_steps(timed, "pass", first_step=options.warm_up == 0), options.gather_timeout)

    def _passes(self) -> tuple[RawCapture | None, list[RawCapture]]:
        """(the counting pass's capture or None, the timed passes' captures), the plan's passes
        run in turn (:mod:`.timing_plan`)."""
        counts: RawCapture | None = None
        times: list[RawCapture] = []
        kernels: RawCapture | None = None
        # the kernels are recorded in the timing pass, or with the counting pass where no timing
        # pass runs (and on a device, in a pass of their own)
        kernels_here = self.options.kernels and self.plan.method != "device"
        for kind in self.plan.passes:
            if kind == "warm":
                self._plain()
            elif kind == "count":
                counts = self._captured(count=True, timeline=False, kernels=False)
            elif kind == "timed":
                times.append(self._captured(count=False, kernels=kernels_here, op_times=self.plan.ops == "timed"))
            elif kind == "counted and timed":
                times.append(self._captured(count=True, kernels=kernels_here))
            elif kind == "kernels":
                kernels = self._captured(count=False, kernels=True)
            else:  # "events"
                if kernels is None:  # a device plan records the kernel pass first (timing_plan)
                    raise RuntimeError(f"timing plan {self.plan.passes}: an events pass before the kernel pass")
                times.append(device_timed(kernels, self._uninstrumented()))
        return counts, times

    def _captured(self, count: bool, timeline: bool = True, kernels: bool = False,
                  op_times: bool = False) -> RawCapture:
        self._rewind()
        # the whole call is the model's: ops between its module calls (generate()'s sampling) are the root's
        session = open_session(self.infos if count else self.time_infos, self.options, self.registry, self.clock,
                               count=count, timeline=timeline, outside_to_root=True, kernels=kernels,
                               op_times=op_times)
        try:
            with self._quiet_compiled():
                (self.count_call if count else self.time_call)(*self.args, **self.kwargs)
        finally:
            raw = session.stop()
        return raw

    def _uninstrumented(self) -> float:
        """Seconds of one call with nothing observing it but the clock's two stamps around it."""
        self._rewind()
        clock = self.clock
        start = clock.stamp()
        self.time_call(*self.args, **self.kwargs)
        end = clock.stamp()
        clock.finish()
        return clock.seconds(start, end)

    def _plain(self) -> None:
        self._rewind()
        with self._quiet_compiled():
            self.time_call(*self.args, **self.kwargs)

    def _rewind(self) -> None:  # every pass starts from the snapshot (the first one already does)
        if self.passes:
            self.state.rewind()
        self.passes += 1

    def _quiet_compiled(self) -> contextlib.AbstractContextManager[None]:
        # torch notes that global hooks (the user's, or a session's) also fire for the compiled
        # wrapper: intended
        return ignoring(r"Using `torch.compile\(module\)` when there are global hooks") if self.regions \
            else contextlib.nullcontext()


def _nothing_stepped(optimizer: Any) -> bool:
    """Whether ``optimizer`` has not stepped yet in this process (a torch optimizer keeps no
    state before its first step; a DeepSpeed engine counts ``global_steps``); False when
    unknown."""
    if isinstance(optimizer, torch.optim.Optimizer):
        return not optimizer.state
    steps = getattr(optimizer, "global_steps", None)
    return steps == 0 if isinstance(steps, int) else False


def with_ranks(result: ProfileResult, gather_timeout: float | None) -> ProfileResult:
    """``result`` with every rank's result on rank 0 (see :mod:`flopsight.capture.assembly.gather`)."""
    if gather_timeout is None:
        return result
    ranks, notes = gather_ranks(result, gather_timeout)
    return result.updated(ranks=tuple(ranks), rank_notes=notes) if ranks else result


# -- Profiler ------------------------------------------------------------------------------
#: seconds a finish detached from the step that stopped its profile waits before its work
#: (Profiler.stop_detached): long enough for the step to return, short beside a report's reading
FINISH_DELAY = 0.01


class Profiler:
    """Profile whatever runs between :meth:`start` and :meth:`stop` (or inside ``with``):
    a forward, a whole training step, several micro-batches, generate().

    The backward pass is measured op by op and attributed to the modules whose forward
    created it, activation checkpointing's recomputed forward is its own phase, and
    ``optimizer.step()`` (of ``optimizer``, or of any optimizer when None) is the step
    phase; ``optimizer`` may also be a wrapper with a ``step()`` of its own (a DeepSpeed ZeRO
    optimizer), whose whole step is then timed. ``result.iteration`` sums up the span.
    ``batch_size`` overrides the batch size
    read from the first dimension of each model call's first input. Options come as a
    :class:`~flopsight.ProfileOptions` (``options``) or as its fields directly: ``attention``,
    ``gather_timeout`` (every rank's result gathered on rank 0), ``memory``, ``backend`` and
    ``kernels`` as in :func:`profile` (kernels are recorded in the counting pass here: on
    CUDA their GPU times are the kernels' own, on the CPU the operators' times include the
    counting). ``parallel`` gives sizes the run's own objects do not tell (e.g.
    ``{"tp": 4, "pp": 2}``); the world size, a DeviceMesh's named dimensions and a
    DeepSpeed engine's are detected (``result.metadata.parallel``).

    Only what runs inside the model's forward calls (and their backward) is counted, as in
    DeepSpeed: give it a submodule and it counts that submodule, whatever the code around
    it runs (a loss computed outside the model is not the model's). Without a model,
    everything the span runs is counted, at the root:

    >>> import torch, flopsight
    >>> with flopsight.Profiler() as prof:
    ...     _ = torch.ones(2, 3) @ torch.ones(3, 4)
    >>> prof.result.total.forward.macs
    24

    Counting and timing happen in the same pass, so latencies have the profiler's own
    measured overhead subtracted (on CPU). Starting twice or stopping when not started
    is harmless.

    Several steps: call :meth:`step` at the end of each; every step is measured on its own,
    ``result.samples`` keeps each one's figures and the result's times are medians (counts
    are one step's). With ``steps=N`` the profiler stops by itself after the N-th:

    >>> model = torch.nn.Linear(4, 2)
    >>> prof = flopsight.Profiler(model, steps=3).start()
    >>> for _ in range(5):
    ...     _ = model(torch.ones(1, 4))
    ...     prof.step()
    >>> prof.running, prof.result.samples.count, prof.result.total.forward.macs
    (False, 3, 8)
    """

    def __init__(self, model: nn.Module | None = None, *, options: ProfileOptions | None = None, **fields: Any):
        options = ProfileOptions.of(options, **fields).refuse(
            CALL_ONLY, "Profiler", "it profiles the code you run; flopsight.profile() profiles one call")
        self.options = options
        self._everything = model is None  # no model: count all the span runs, at the root
        self.model = nn.Module() if model is None else check_model(model)
        model = self.model
        self.optimizer = options.optimizer
        self.batch_size = options.batch_size
        self._target = original_module(model)
        if self._target is not model:
            # Running the counting modes through compiled code leaves the model running
            # eagerly afterwards; only flopsight.profile() can route around that.
            raise ValueError(
                "model: a torch.compile'd module cannot be profiled around your own calls without "
                "de-optimizing it; profile model._orig_mod here, or use flopsight.profile(model, ...), "
                "which counts on the eager module and times the compiled one"
            )
        self._registry = options.formulas
        self._session: CaptureSession | None = None
        self._infos: dict[str, ModuleInfo] = {}  # the modules profiled, described at each start()
        self._result: ProfileResult | None = None
        #: the steps ended so far, each built when the profile finishes (off the critical path
        #: where it finishes on a thread of its own: stop_detached)
        self._measured: list[Callable[[], ProfileResult | None]] = []  # None: a step that ran nothing
        self._finishing: Future | None = None  # see stop_detached
        self._first_step = False
        self._ran_on: torch.device | None = None  # the accelerator the steps so far ran on
        self._snapshot: tuple | None = None  # (what the session had seen, the snapshot of it)
        self._room = contextlib.ExitStack()  # a deep model's recursion limit, while running
        self._save: Callable[[ProfileResult], None] | None = None  # see save_at_exit
        self._planned: int | None = None
        self._unwatch_exit: Callable[[], None] | None = None

    @property
    def running(self) -> bool:
        return self._session is not None

    def start(self) -> Profiler:
        if self._session is None:
            warn_data_parallel(self._target)
            self._infos = describe(self._target)
            self._measured = []
            self._first_step = _nothing_stepped(self.optimizer)
            announce(self.options.gather_timeout)  # under torch.distributed: rank 0 waits for the ranks that profile
            self._room.enter_context(deep_enough(max(info.depth for info in self._infos.values())))
            try:
                self._open()
            except BaseException:
                self._room.close()
                raise
            if self._save is not None:
                self._unwatch_exit = RUNNING.at_exit(self._at_exit)
        return self

    def save_at_exit(self, save: Callable[[ProfileResult], None] | None, steps: int | None = None) -> None:
        """If the process ends while this profiler runs (the script's end, an uncaught exception,
        ``sys.exit``, ``SIGTERM``), stop it and call ``save(result)`` with what it measured so
        far, marked incomplete (``result.metadata.incomplete``) and gathered from no other rank
        (they may be gone); ``steps``: how many steps were to be profiled (default: ``steps``'s
        option), said in the mark. None: nothing saved (the profiler is still stopped cleanly)."""
        self._save, self._planned = save, steps
        if self.running and save is not None and self._unwatch_exit is None:
            self._unwatch_exit = RUNNING.at_exit(self._at_exit)

    def _unwatch(self) -> None:
        unwatch, self._unwatch_exit = self._unwatch_exit, None
        if unwatch is not None:
            unwatch()

    def _at_exit(self) -> None:
        save, planned, done = self._save, self._planned or self.options.steps, len(self._measured)
        result = self._stop(None, gather=False)
        if result is None or save is None:
            return
        ran = f", after {done} of {planned} steps" if planned is not None and planned > 1 else ""
        save(result.updated(metadata=dataclasses.replace(
            result.metadata, incomplete=f"the process ended while it was being profiled{ran}")))

    def _open(self) -> None:
        # the device a step ran on, once one did: a CPU-offloaded model's first step finds its GPU by its inputs
        device = self._ran_on or model_device(self._target, everything=self._everything)
        clock = self.options.clock or default_clock(device)
        self._session = open_session(self._infos, self.options, self._registry, clock,
                                     outside_to_root=self._everything)

    def step(self) -> None:
        """End one step (call it after each ``optimizer.step()``): it is measured on its own
        and the next one begins; after ``steps`` steps the profiler stops (no-op when not
        running)."""
        session, self._session = self._session, None
        if session is None:
            return
        self._measured.append(self._later(session, session.stop()))
        if self.options.steps is not None and len(self._measured) >= self.options.steps:
            self._unwatch()
            self._room.close()  # the recursion limit as it was
            self._finish()
        else:
            self._open()

    def stop(self, error: BaseException | None = None) -> ProfileResult | None:
        """Stop and build the result (returns the last result if not running). What ran
        since the last :meth:`step` is a step of its own if it ran the model or an
        optimizer step, or if it is the only one. ``error``: what ended the span (``with``
        passes it): the result records it (``metadata.error``), so rank 0 names this rank
        failed and leaves it out of its figures over ranks; a rank 0 that raised gathers nothing."""
        return self._stop(error)

    def _stop(self, error: BaseException | None, gather: bool = True) -> ProfileResult | None:
        if not self._end_session():
            return self.result if self._result is not None or self._finishing is not None else None
        return self._finish(error, gather)

    def stop_detached(self, then: Callable[[ProfileResult], None] | None = None) -> None:
        """Stop now (everything installed removed, what ran measured), and finish on a thread
        of its own: the result built, every rank's gathered on rank 0, then ``then(result)``
        (a report rendered and written). What the DeepSpeed engine's drop-in calls at the end of
        the profiled step: none of it is on the step's critical path (the process's background
        thread, started before: :mod:`._background`, begins the work :data:`FINISH_DELAY` later: a
        thread running Python takes the interpreter's lock from the step it shares it with for
        milliseconds at a time). :attr:`result` waits for it; so does the interpreter's exit."""
        if not self._end_session(detached=True):
            return
        measured, self._measured = self._measured, []  # the thread's: a new start() begins anew
        self._finishing = BACKGROUND.submit(self._finish_then, measured, then)

    def _finish_then(self, measured: list[Callable[[], ProfileResult | None]],
                     then: Callable[[ProfileResult], None] | None) -> None:
        time.sleep(FINISH_DELAY)  # the step that stopped the profile goes on meanwhile, alone
        try:
            result = self._finish(measured=measured)
            if then is not None:
                then(result)
        except Exception as e:  # on its own thread: said in one line, the training goes on
            print(f"flopsight: finishing the profile failed: {type(e).__name__}: {e}", file=sys.stderr)

    def _end_session(self, detached: bool = False) -> bool:
        """Stop the running session, keeping what ran since the last :meth:`step` as a step of
        its own if it ran the model or an optimizer step, or if it is the only one; False when
        none was running. ``detached``: its measurements resolved with the result (see
        :meth:`stop_detached`), what the run's objects tell included."""
        self._unwatch()
        session, self._session = self._session, None
        if session is None:
            return False
        try:
            collected = session.stop_deferred()
            only = not self._measured
            if detached:
                depth = max(info.depth for info in self._infos.values())
                self._measured.append(lambda: self._kept(session, collected(), only, depth))
            else:
                raw = collected()
                if self._ran(raw, only):
                    self._measured.append(self._later(session, raw))
        finally:
            self._room.close()  # the recursion limit as it was
        return True

    @staticmethod
    def _ran(raw: RawCapture, only: bool) -> bool:
        calls, spans = raw.get(ModuleCalls), raw.get(SpanTimes)
        return only or bool(calls is not None and calls.top_calls) or bool(spans and spans.seconds().get("step"))

    def _kept(self, session: CaptureSession, raw: RawCapture, only: bool, depth: int) -> ProfileResult | None:
        with deep_enough(depth):  # torch's walks of a deep model recurse (parameters())
            return self._later(session, raw)() if self._ran(raw, only) else None

    def _finish(self, error: BaseException | None = None, gather: bool = True,
                measured: list[Callable[[], ProfileResult | None]] | None = None) -> ProfileResult:
        if measured is None:
            measured, self._measured = self._measured, []
        self._snapshot = None
        built = [build() for build in measured]
        result = combine_steps([r for r in built if r is not None], "step", first_step=self._first_step)
        if error is not None and not result.metadata.error:  # a model's error names its module already
            result = result.updated(metadata=dataclasses.replace(result.metadata, error=span_failure_text(error)))
        if error is not None and self.options.gather_timeout is not None and _world()[1] == 0:
            # rank 0 raised: its exception goes on at once, no waiting for the others' results
            publish_failure(error)
            self._result = result
        else:
            self._result = with_ranks(result, self.options.gather_timeout if gather else None)
        return self._result

    def snapshot(self) -> ProfileResult:
        """The result so far, while still running (module calls in progress are left out;
        of the current step only, after :meth:`step`)."""
        session = self._session
        if session is None:
            return self.result
        # DeepSpeed's getters ask one after another: one synchronize and one build for them all
        progress = (id(session), session.progress)
        if self._snapshot is None or self._snapshot[0] != progress:
            self._snapshot = (progress, self._build(session, session.snapshot()))
        return self._snapshot[1]

    def _build(self, session: CaptureSession, raw: RawCapture) -> ProfileResult:
        return self._later(session, raw)()

    def _later(self, session: CaptureSession, raw: RawCapture) -> Callable[[], ProfileResult]:
        """The result of a stopped session's ``raw`` capture, to build when called: what the
        run's objects tell (its metadata) is read now, while they are as the step left them."""
        calls = raw.get(ModuleCalls)
        args, kwargs = (calls.first_inputs if calls is not None else None) or ((), {})
        pipeline = raw.get(PipelineRuns)
        meta = run_metadata(self._target, args, kwargs, everything=self._everything,
                            autocast=calls.autocast if calls is not None else None, mode="custom",
                            attention=self.options.attention,
                            batch_size_given=self.batch_size,
                            timing=_span_timing(session.clock, session.phases_on_device),
                            pipeline=pipeline.to_dict() if pipeline is not None else None,
                            compiled=compiled_paths(self._infos),
                            **parallel_metadata(self._target, self.options.parallel, pipeline))
        if meta.device_type not in ("cpu", "meta"):
            self._ran_on = torch.device(meta.device)
        return functools.partial(build_result, self._infos, raw, ignored=self.options.ignore, metadata=meta)

    def wait(self) -> None:
        """Wait for the finish :meth:`stop_detached` runs on its own thread (if one does)."""
        finishing = self._finishing
        if finishing is not None:
            finishing.result()  # (its errors are said on its thread: _finish_then)
            self._finishing = None

    @property
    def result(self) -> ProfileResult:
        self.wait()
        if self._result is None:
            raise RuntimeError("result: nothing profiled yet; call start() and stop(), or use `with Profiler(model)`")
        return self._result

    def __enter__(self) -> Profiler:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        # any exception leaving the span (the model's or the code around it) fails this rank's profile
        self.stop(exc)

