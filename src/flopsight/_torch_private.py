"""Every private or version-dependent torch API flopsight touches, in one place.

The rest of the package imports from here, so a torch upgrade that moves one of
these is a one-file change. Nothing in this module patches torch.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
from typing import TYPE_CHECKING, NamedTuple, cast

import torch
import torch.nn.modules.module as _module_mod
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

from ._quiet import ignoring, native_stderr_without

if TYPE_CHECKING:
    from torch.distributed.distributed_c10d import GroupName
    from torch.nested._internal.nested_tensor import NestedTensor

#: Types of ``torch.ops.<ns>.<op>.<overload>`` and ``torch.ops.<ns>.<op>``.
OpOverload = torch._ops.OpOverload
OpOverloadPacket = torch._ops.OpOverloadPacket

__all__ = [
    "EagerDispatchMode",
    "OpOverload",
    "OpOverloadPacket",
    "TorchDispatchMode",
    "active_dispatch_modes",
    "active_function_modes",
    "exit_mode",
    "innermost_dispatch_mode",
    "function_modes_disabled",
    "global_module_hooks",
    "remove_global_hook",
    "module_call_frames",
    "has_own_hooks",
    "has_own_forward_hooks",
    "original_module",
    "may_compile",
    "force_eager",
    "autograd_sequence_nr",
    "current_autograd_node",
    "torch_function_subclasses",
    "is_higher_order_op",
    "queue_engine_callback",
    "ACCUMULATE_GRAD_SEQUENCE_NR",
    "node_sequence_nr",
    "node_thread",
    "tag_nodes",
    "accumulated_parameter",
    "op_schema",
    "native_op",
    "op_overload_name",
    "op_overload_names",
    "builtin_aten_op",
    "tensor_address",
    "compiler_stance",
    "dispatch_mode_flags",
    "set_dispatch_mode_flags",
    "modes_disabled",
    "jagged_layout",
    "flex_attention_ops",
    "allow_under_mode",
    "process_group",
    "dtensor_class",
    "fake_mode_now",
    "pipeline_methods",
    "schedule_plan",
    "fsdp_module_class",
    "on_work_done",
    "python_work",
    "work_class",
    "default_store",
    "storage_key",
    "tensor_storage",
    "dtensor_local",
    "saved_tensors_hooks_active",
    "trace_range",
    "kineto_events",
    "kineto_device_work",
    "KINETO_ACTIVITY_TYPES",
    "kineto_running",
    "kineto_quiet",
    "KINETO_LOG_LINE",
]


def may_compile() -> bool:
    """Whether code in this process may compile with dynamo: ``torch._dynamo`` is imported (by
    ``torch.compile``, or a library), or flex attention's module, whose eager call compiles.
    Without either, nothing in a profiled span can be compiled before it starts, and importing
    dynamo (a second or more) is left to what needs it."""
    return "torch._dynamo" in sys.modules or "torch.nn.attention.flex_attention" in sys.modules


def force_eager():
    """torch.compile's ``force_eager`` stance, set now (a context manager: its exit restores)."""
    # torch's dynamo import notes a missing NumPy, which flopsight does not use
    with ignoring("Failed to initialize NumPy"):
        return torch.compiler.set_stance("force_eager")


#: Sequence number of the next autograd node this thread creates (nodes are numbered as
#: they are created, so a module call's nodes fall in the range seen around it).
autograd_sequence_nr = torch._C._autograd._get_sequence_nr
#: The autograd node being executed by the backward pass, or None outside backward.
current_autograd_node = torch._C._current_autograd_node


def is_higher_order_op(f) -> bool:
    """Whether ``f`` is a higher-order operator (flex attention's): a Python object the
    dispatcher never sees, called through its class's ``__call__``."""
    # (its class's MRO read, not isinstance: that goes through ABCMeta, a microsecond for each
    # function a session routes, at every start)
    return torch._ops.HigherOrderOperator in type(f).__mro__


def torch_function_subclasses() -> list[type]:
    """The tensor subclasses defined so far that take torch-level calls over in Python: those
    whose own ``__torch_function__`` is a classmethod other than torch's disabled one (a jagged
    nested tensor's, a MaskedTensor's), parents first."""
    disabled = torch._C._disabled_torch_function_impl
    found, todo = [], list(torch.Tensor.__subclasses__())
    while todo:
        cls = todo.pop(0)
        todo.extend(cls.__subclasses__())
        own = cls.__dict__.get("__torch_function__")
        if isinstance(own, classmethod) and own.__func__ is not getattr(disabled, "__func__", disabled):
            found.append(cls)
    return found


def queue_engine_callback(callback) -> None:
    """Run ``callback()`` when the autograd engine finishes the backward pass running now
    (after its last node and the callbacks queued before this one; only from inside it)."""
    torch.autograd.Variable._execution_engine.queue_callback(callback)
#: ``AccumulateGrad`` nodes carry this sequence number instead of a creation index.
ACCUMULATE_GRAD_SEQUENCE_NR = 2**64 - 1


def node_sequence_nr(node) -> int:
    """The creation index of an autograd node (``ACCUMULATE_GRAD_SEQUENCE_NR`` for AccumulateGrad)."""
    return node._sequence_nr()


_THREAD_TAG = "flopsight.thread"


def node_thread(node) -> int:
    """The thread tag :func:`tag_nodes` gave ``node`` (0: none, made on the profiling thread)."""
    return node.metadata.get(_THREAD_TAG, 0)


def tag_nodes(outputs, seq_start: int, seq_end: int, thread: int) -> int:
    """Tag with ``thread`` every autograd node behind the tensors ``outputs`` numbered
    ``seq_start <= n < seq_end`` (those a call on that thread made: a node's Python object does not say its
    thread, but its ``metadata`` dict lives with the node). Returns how many were tagged.

    >>> x = torch.ones(2, requires_grad=True)
    >>> y = (x * 2).sum()
    >>> tag_nodes([y], 0, 2**62, thread=5), node_thread(y.grad_fn), node_thread(y.grad_fn.next_functions[0][0])
    (2, 5, 5)
    """
    stack = [t.grad_fn for t in outputs if t.grad_fn is not None]
    seen, tagged = set(), 0
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        seq = node._sequence_nr()
        if not seq_start <= seq < seq_end:
            continue  # made before the call: its inputs' history
        node.metadata[_THREAD_TAG] = thread
        tagged += 1
        stack.extend(fn for fn, _ in node.next_functions)
    return tagged


def accumulated_parameter(node):
    """The tensor an ``AccumulateGrad`` node accumulates into."""
    return node.variable


def modes_disabled():
    """A context in which no dispatch or function mode is active (to read tensor values
    without the profiler counting the reads)."""
    from torch.utils._python_dispatch import _disable_current_modes

    return _disable_current_modes()


def jagged_layout(t: torch.Tensor) -> tuple:
    """(lengths or None, offsets, total length, cached max length or None) of a jagged nested
    tensor's ragged dimension (its internals, read without touching values)."""
    nested = cast("NestedTensor", t)  # a jagged nested tensor is a NestedTensor (the subclass declares these fields)
    cached = getattr(nested, "_metadata_cache", None) or {}
    max_len = cached["max_seqlen"].shape[0] if "max_seqlen" in cached else None
    return nested._lengths, nested._offsets, nested._values.shape[nested._ragged_idx - 1], max_len


def flex_attention_ops() -> tuple:
    """flex_attention's forward and backward higher-order operators."""
    from torch._higher_order_ops.flex_attention import flex_attention, flex_attention_backward

    return flex_attention, flex_attention_backward


def allow_under_mode(hop, mode_type: type) -> None:
    """Let higher-order operator ``hop`` run while a dispatch mode of ``mode_type`` is active:
    its dense (CompositeExplicitAutograd) implementation runs with the mode re-entered, so the
    aten ops inside are seen by the mode. Torch has no rule for an unknown mode and raises
    otherwise. The rule is keyed by ``mode_type`` and so is inert for every other mode."""
    if mode_type in hop.python_key_table:
        return
    dense = hop.py_kernels[torch._C.DispatchKey.CompositeExplicitAutograd]

    def run(mode, *args, **kwargs):
        with mode:
            return dense(*args, **kwargs)

    hop.py_impl(mode_type)(run)


def compiler_stance() -> str:
    """The name of torch.compile's current stance (``"default"`` unless set; without importing
    dynamo where nothing has: then nothing set it)."""
    if "torch._dynamo" not in sys.modules:
        return "default"
    from torch._dynamo.eval_frame import _stance

    return _stance.stance


class EagerDispatchMode(TorchDispatchMode):
    """A TorchDispatchMode whose handler torch does not wrap in ``torch._dynamo.disable``.

    Torch wraps every subclass's ``__torch_dispatch__`` so that dynamo never traces it, at
    about 2.5 us per op. flopsight counts under the ``force_eager`` compiler stance, where
    dynamo traces nothing, so the wrapper only costs time.
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False


def op_schema(op: OpOverload):
    """The ``FunctionSchema`` of an op overload: its arguments' names, types and defaults."""
    return op._schema


def tensor_address(t: torch.Tensor) -> int:
    """The address of ``t``'s TensorImpl: how C++ code (the native recorder) names a tensor."""
    return t._cdata


def builtin_aten_op(function) -> OpOverloadPacket | None:
    """The aten op a torch builtin function calls straight away (``torch.lstm_cell`` ->
    ``aten::lstm_cell``), or None (a Python function, or no aten op of that name)."""
    if not isinstance(function, type(torch.add)):
        return None
    try:
        packet = getattr(torch.ops.aten, function.__name__)
    except (AttributeError, RuntimeError):
        return None
    return packet if isinstance(packet, OpOverloadPacket) else None


def op_overload_name(op: OpOverload) -> str:
    """``"ns::name.overload"`` of an op overload, as the native recorder names it (``default``
    for the unnamed overload).

    >>> op_overload_name(torch.ops.aten.add.Tensor), op_overload_name(torch.ops.aten.relu.default)
    ('aten::add.Tensor', 'aten::relu.default')
    """
    return f"{op._schema.name}.{op._overloadname}"


def op_overload_names(packet: OpOverloadPacket) -> list[str]:
    """``"ns::name.overload"`` of each overload of an op packet (``"default"`` for the unnamed one)."""
    qualname = packet._qualified_op_name
    return [f"{qualname}.{overload}" for overload in packet.overloads()]


def native_op(name: str, overload: str) -> OpOverload | None:
    """The overload ``torch.ops.<ns>.<op>.<overload>`` of a C++ operator name such as
    ``"aten::addmm"`` (None when torch.ops does not know it)."""
    namespace, _, op = name.partition("::")
    try:
        return getattr(getattr(getattr(torch.ops, namespace), op), overload)
    except (AttributeError, RuntimeError):
        return None


def active_dispatch_modes() -> list:
    """The TorchDispatchModes currently on this thread's stack (innermost last)."""
    return list(_get_current_dispatch_mode_stack())


#: A context in which torch function modes and subclasses are not consulted: formulas run
#: inside it, so their tensor-method calls (``x.numel()``, ``x.dim()``) skip the profiler's
#: own function mode (about 0.6 us a call).
function_modes_disabled = torch._C.DisableTorchFunction


def innermost_dispatch_mode():
    """The TorchDispatchMode on top of this thread's stack, or None."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    return _get_current_dispatch_mode()


def active_function_modes() -> list:
    """The TorchFunctionModes currently on this thread's stack (innermost last)."""
    return list(torch.overrides._get_current_function_mode_stack())


def exit_mode(mode) -> None:
    """Take a dispatch or function mode off this thread's stack, wherever it is on it.

    ``mode.__exit__`` pops the innermost mode, whichever that is: when two profilers stop in
    the order they started, the first would pop the second's mode and leave its own on the
    stack, to be freed while in use (a crash on torch <= 2.9). So the modes above ``mode``
    leave first, innermost first, and enter again after it, each through its own
    ``__exit__``/``__enter__``: torch's flags stay in step on every version.

    >>> from torch.overrides import TorchFunctionMode
    >>> a, b = TorchFunctionMode(), TorchFunctionMode()
    >>> _ = a.__enter__(); _ = b.__enter__()
    >>> exit_mode(a)
    >>> active_function_modes() == [b]
    True
    >>> exit_mode(b); active_function_modes()
    []
    """
    stack = active_dispatch_modes() if isinstance(mode, TorchDispatchMode) else active_function_modes()
    at = next((i for i, m in enumerate(stack) if m is mode), None)
    if at is None:
        return
    above = stack[at + 1:]
    for other in reversed(above):
        other.__exit__(None, None, None)
    try:
        mode.__exit__(None, None, None)
    finally:
        for other in above:
            other.__enter__()


def global_module_hooks() -> dict[str, int]:
    """Sizes of torch's process-wide module hook registries (all 0 when nothing is installed)."""
    names = (
        "_global_forward_pre_hooks",
        "_global_forward_hooks",
        "_global_forward_hooks_with_kwargs",
        "_global_forward_hooks_always_called",
        "_global_backward_pre_hooks",
        "_global_backward_hooks",
    )
    return {n: len(getattr(_module_mod, n, {})) for n in names}


def remove_global_hook(handle) -> None:
    """Remove a process-wide module hook, and the mark torch keeps of it having keyword
    arguments: ``handle.remove()`` leaves that mark behind (torch 2.x), and while any mark is
    left torch believes a global hook is installed (every call of a ``torch.compile``d module
    then warns about it).

    >>> from torch.nn.modules.module import register_module_forward_hook
    >>> remove_global_hook(register_module_forward_hook(lambda m, a, k, o: None, with_kwargs=True))
    >>> global_module_hooks()["_global_forward_hooks_with_kwargs"]
    0
    """
    handle.remove()
    getattr(_module_mod, "_global_forward_hooks_with_kwargs", {}).pop(handle.id, None)


def module_call_frames() -> tuple:
    """The code objects of the frames ``Module.__call__`` calls a module's ``forward`` from:
    ``_call_impl`` (its fast path) and the closure its slow path calls it from; empty where
    torch's call path is not the one recognised (no ``forward_call`` there).

    >>> sorted(code.co_name for code in module_call_frames())
    ['_call_impl', 'inner']
    """
    code = getattr(getattr(torch.nn.Module, "_call_impl", None), "__code__", None)
    if code is None or "forward_call" not in code.co_varnames + code.co_cellvars:
        return ()
    return (code, *(c for c in code.co_consts if isinstance(c, type(code)) and "forward_call" in c.co_freevars))


def has_own_hooks(module: torch.nn.Module) -> bool:
    """Whether ``module`` has forward or backward hooks of its own (torch then calls it through
    its slow path, as it does every module while any global hook is installed)."""
    return bool(module._forward_pre_hooks or module._forward_hooks or module._backward_pre_hooks
                or module._backward_hooks)


def has_own_forward_hooks(module: torch.nn.Module) -> bool:
    """Whether ``module`` has forward hooks of its own (that run after the global ones)."""
    return bool(module._forward_hooks)


def original_module(model: torch.nn.Module) -> torch.nn.Module:
    """The eager module behind a ``torch.compile``d one, or ``model`` itself.

    Counting runs a dispatch mode through the model; doing that through the compiled
    wrapper can leave it running eagerly afterwards, so counting uses the original.
    """
    inner = getattr(model, "_orig_mod", None)
    if isinstance(inner, torch.nn.Module) and type(model).__name__ == "OptimizedModule":
        return inner
    return model


# -- torch.distributed, as seen at the dispatch level --------------------------------------
def process_group(group) -> tuple[int | None, object]:
    """(ranks in a collective's group, what identifies the group across its calls) for a
    ``ProcessGroup`` script object (c10d ops) or a group name (functional collectives). The
    size is None when this torch build cannot read the group back. The identity is the group's
    name; the ``ProcessGroup`` object's own where it has none (a c10d op's script object is a
    new wrapper each call, so its ``id`` would not do)."""
    if group is None:
        return None, None
    if isinstance(group, str):
        try:
            from torch.distributed.distributed_c10d import _resolve_process_group

            # GroupName is a NewType over str: a functional collective's group name is one
            return int(_resolve_process_group(cast("GroupName", group)).size()), group
        except Exception:  # not a group this torch build can resolve: the size stays unknown
            return None, group
    try:
        from torch._C._distributed_c10d import ProcessGroup

        unboxed = ProcessGroup.unbox(group)
    except Exception:  # not a process group this torch build can read back
        return None, id(group)
    try:
        size = int(unboxed.size())
    except Exception:
        size = None
    return size, getattr(unboxed, "group_name", None) or id(unboxed)


@functools.cache
def work_class():
    """torch's c10d ``Work`` class (what a collective's handle is in Python), or None without
    torch.distributed (looked up once: every collective of a profile asks)."""
    try:
        from torch._C._distributed_c10d import Work
    except ImportError:
        return None
    return Work


def functional_collectives():
    """torch's ``torch.distributed._functional_collectives`` module (its ``wait_tensor`` is what
    an ``AsyncCollectiveTensor`` calls when an op first uses it), once imported (DTensor
    imports it), else None: asking costs no import."""
    module = sys.modules.get("torch.distributed._functional_collectives")
    return module if callable(getattr(module, "wait_tensor", None)) else None


def python_work(work):
    """The ``Work`` Python holds for the c10d ``Work`` script object an op returned: while it is
    kept, the handle the caller gets is this same object. None for anything else."""
    try:
        return work_class().unbox(work)
    except Exception:  # not a Work
        return None


def on_work_done(work, callback) -> bool:
    """Call ``callback()`` when the c10d ``Work`` script object an op returned completes
    (from the backend's thread; at once if it already has). False if it cannot be watched:
    not a Work, or a Work with no future (gloo's reduce-scatter into one tensor)."""
    handle = python_work(work)
    try:
        handle.get_future().add_done_callback(lambda _future: callback())
        return True
    except Exception:  # not a Work, or a backend whose work has no future
        return False


def default_store():
    """The key-value store the default process group rendezvoused through (None if there
    is none): ranks exchange results through it without a collective, so a rank that never
    arrives cannot make the others hang."""
    try:
        from torch.distributed.distributed_c10d import _get_default_store

        return _get_default_store()
    except Exception:  # no process group, or a backend set up without a store
        return None


def dtensor_local(tensor: torch.Tensor) -> torch.Tensor | None:
    """The tensor a DTensor holds on this rank, without dispatching an op (``to_local`` runs
    one); None for any other tensor. A DTensor's own storage is a wrapper's, of its global size."""
    return getattr(tensor, "_local_tensor", None) if type(tensor) is not torch.Tensor else None


def dtensor_class() -> type | None:
    """``DTensor``, when ``torch.distributed.tensor`` has been imported (a model can hold none
    before), else None: the check costs no import."""
    module = sys.modules.get("torch.distributed.tensor._api")
    return getattr(module, "DTensor", None)


def fsdp_module_class() -> type | None:
    """FSDP2's ``FSDPModule`` (the class ``fully_shard`` mixes into a module), when
    ``torch.distributed.fsdp`` has been imported, else None."""
    module = sys.modules.get("torch.distributed.fsdp")
    return getattr(module, "FSDPModule", None)


#: the methods of ``torch.distributed.pipelining``'s PipelineStage that run its submodule on
#: meta tensors to learn the shapes it sends (torch 2.9 to 2.12: one; 2.13 on: forward and backward)
_STAGE_INFERENCE = ("_shape_inference", "_forward_metadata_inference", "_backward_metadata_inference")


def pipeline_methods() -> tuple[list[tuple[type, str]], list[tuple[type, str]]]:
    """(the PipelineStage methods that infer shapes on meta tensors, the methods that run a
    schedule's step: ``torch.distributed.pipelining``'s schedules' ``step``, DeepSpeed's
    ``PipelineEngine.train_batch`` and ``eval_batch``) as (class, name) pairs; empty for a
    package not imported."""
    inference: list[tuple[type, str]] = []
    steps: list[tuple[type, str]] = []
    stage = sys.modules.get("torch.distributed.pipelining.stage")
    schedules = sys.modules.get("torch.distributed.pipelining.schedules")
    if stage is not None and schedules is not None:
        inference = [(stage.PipelineStage, name) for name in _STAGE_INFERENCE if name in vars(stage.PipelineStage)]
        steps = [(cls, "step") for cls in (getattr(schedules, "PipelineScheduleSingle", None),
                                           getattr(schedules, "PipelineScheduleMulti", None))
                 if cls is not None and "step" in vars(cls)]
    engine = getattr(sys.modules.get("deepspeed.runtime.pipe.engine"), "PipelineEngine", None)
    if engine is not None:
        steps += [(engine, name) for name in ("train_batch", "eval_batch") if name in vars(engine)]
    return inference, steps


class _DeepSpeedStage(NamedTuple):
    """A DeepSpeed pipeline engine's stage, read as a torch schedule's stages are."""

    stage_index: int
    submod: object
    num_stages: int


#: the modules that call ``redistribute_local_tensor`` by a name of their own (imported)
_REDISTRIBUTING = ("torch.distributed.tensor._redistribute", "torch.distributed.tensor._dispatch",
                   "torch.distributed.tensor._api")


def redistribute_bindings() -> list[tuple[object, str]]:
    """Where DTensor's ``redistribute_local_tensor`` (every change of placement: an op's
    inputs resharded for it, ``redistribute()``, their backward) is bound, as (module, name)
    pairs; empty before ``torch.distributed.tensor`` is imported."""
    return [(module, "redistribute_local_tensor") for name in _REDISTRIBUTING
            if callable(getattr(module := sys.modules.get(name), "redistribute_local_tensor", None))]


def schedule_plan(schedule) -> tuple[str, int, list]:
    """A pipeline schedule's (class name, micro-batches per step, stages this rank runs); for
    DeepSpeed's ``PipelineEngine`` (its ``TrainSchedule``, one stage a rank): ("PipelineEngine",
    its micro-batches, its stage)."""
    if hasattr(schedule, "micro_batches") and hasattr(schedule, "stage_id"):  # DeepSpeed's engine
        stage = _DeepSpeedStage(int(schedule.stage_id), schedule.module, int(schedule.num_stages))
        return type(schedule).__name__, int(schedule.micro_batches), [stage]
    stages = getattr(schedule, "_stages", None)
    if stages is None:
        stages = [schedule._stage]
    return type(schedule).__name__, int(schedule._n_microbatches), list(stages)


def fake_mode_now() -> object | None:
    """The fake tensor mode in effect on this thread (DTensor propagates shardings under one),
    or None."""
    return torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE)


def storage_key(tensor: torch.Tensor) -> int | None:
    """An identity for the storage behind ``tensor`` (shared by its views), on any device,
    meta included (where data pointers are all 0); None for a tensor without one (sparse,
    nested, some subclasses)."""
    storage = tensor_storage(tensor)
    return None if storage is None else storage._cdata


def tensor_storage(tensor: torch.Tensor):
    """The untyped storage behind ``tensor`` (its identity: ``._cdata``, see
    :func:`storage_key`), or None for a tensor without one."""
    try:
        return tensor.untyped_storage()
    except (RuntimeError, NotImplementedError, AttributeError, TypeError):
        return None


def saved_tensors_hooks_active() -> bool:
    """Whether a ``saved_tensors_hooks`` context is in effect on this thread."""
    return torch._C._autograd._top_saved_tensors_default_hooks(False) is not None


def trace_range(name: str):
    """A named range in torch.profiler's trace (a context manager): ``_RecordFunctionFast``
    records it in C++ without going through the dispatcher, so a dispatch mode never sees it."""
    return torch._C._profiler._RecordFunctionFast(name)


def kineto_events(prof) -> list:
    """The raw events of a finished ``torch.profiler.profile`` (``_KinetoEvent``: name,
    start_ns, duration_ns, start_thread_id, sequence_nr, fwd_thread_id, correlation_id,
    linked_correlation_id, device_type; what it is: :func:`kineto_device_work`), without building torch's
    ``FunctionEvent`` tree, which costs seconds on a large trace."""
    return prof.profiler.kineto_results.events()


#: Whether raw Kineto events say what they are (``activity_type()``: 2.13 and 2.15 have it, 2.9 and 2.11 not).
KINETO_ACTIVITY_TYPES = hasattr(torch._C._autograd._KinetoEvent, "activity_type")
_DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")


def _device_work_by_activity(event) -> bool:
    return event.device_type() != torch.autograd.DeviceType.CPU and event.activity_type() in _DEVICE_WORK


def _device_work_by_annotation(event) -> bool:
    # before activity_type, the device's events are its kernels, copies and memsets, and the
    # user annotations (a torch.profiler range mirrored on the device's timeline)
    return event.device_type() != torch.autograd.DeviceType.CPU and not event.is_user_annotation()


#: ``kineto_device_work(event)``: whether a raw Kineto event is work the device did (a kernel,
#: a copy or a memset), by the event's activity type where torch has it, else by elimination.
kineto_device_work = _device_work_by_activity if KINETO_ACTIVITY_TYPES else _device_work_by_annotation


#: a line of Kineto's own log (libkineto's Logger: ``USDT:2026-12-07 04:22:48 29247:29247
#: SyncActivityProfilerHandler.cpp:52] profiler_start``, ``ERROR:... DeviceProperties.cpp:44]
#: gpuGetDeviceCount failed with code 35``), or one of torch's C++ warnings from its profiler's
#: Kineto glue (c10's ``[W1207 04:22:48.123456 29247 torch/csrc/profiler/kineto_shim.cpp:...]``)
KINETO_LOG_LINE = re.compile(
    rb"(?:(?:VERBOSE|INFO|WARNING|ERROR|STAGE|USDT):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ [\w./-]+:\d+\] "
    rb"|\[[VIWEF](?:\d{4} [\d:.]+ \d+)? ?[\w./-]*(?:kineto|profiler)[\w./-]*:\d+\] )", re.I)


def kineto_quiet():
    """A context manager around torch.profiler's calls (start, stop, reading its events): the
    lines Kineto and torch's Kineto glue print from C++ straight to the process's stderr, which
    no Python setting can catch, are dropped (the rest written on; :func:`flopsight._quiet.native_stderr_without`).

    Kineto's own level (``KINETO_LOG_LEVEL``, 6 to hide its ``USDT`` start and stop marks) is read
    once per process, when the first torch.profiler starts, and holds for the whole process
    after it: setting it for the user would hide their own later profiles' messages (CUPTI's
    errors too), and does nothing where a profiler already ran. So flopsight leaves it alone and
    drops the lines of its own calls. Where the user set ``KINETO_LOG_LEVEL``, they asked for
    Kineto's lines at that level: nothing is dropped.

    >>> [bool(KINETO_LOG_LINE.match(line)) for line in (
    ...     b"USDT:2026-12-07 04:22:48 29247:29247 SyncActivityProfilerHandler.cpp:52] profiler_start",
    ...     b"ERROR:2026-12-07 04:22:48 29247:29247 DeviceProperties.cpp:44] gpuGetDeviceCount failed with code 35",
    ...     b"[W1207 04:22:48.123456 29247 torch/csrc/profiler/kineto_shim.cpp:337] Adding profiling metadata ...",
    ...     b"the model's own print", b"ERROR: the user's own words")]
    [True, True, True, False, False]
    """
    if "KINETO_LOG_LEVEL" in os.environ:
        return contextlib.nullcontext()
    return native_stderr_without(KINETO_LOG_LINE)


def kineto_running() -> bool:
    """Whether a torch.profiler (or autograd profiler) session is already recording: Kineto
    runs one at a time."""
    return bool(torch.autograd.profiler._is_profiler_enabled)


#: torch.utils._python_dispatch's process-wide flags that TorchDispatchMode.__enter__ sets and its
#: __exit__ restores to the value it saw: two modes on two threads that exit in the order they entered
#: (profilers stopping in the order they started) leave them set, and dynamo then refuses to compile
_DISPATCH_MODE_FLAGS = ("_is_in_torch_dispatch_mode", "_is_in_non_infra_torch_dispatch_mode",
                        "_is_in_any_mode_without_ignore_compile_internals")


def dispatch_mode_flags() -> dict[str, bool]:
    """The dispatch-mode flags of this torch release (the ones it has)."""
    import torch.utils._python_dispatch as dispatch

    return {name: getattr(dispatch, name) for name in _DISPATCH_MODE_FLAGS if hasattr(dispatch, name)}


def set_dispatch_mode_flags(flags: dict[str, bool]) -> None:
    """Put the flags back as :func:`dispatch_mode_flags` read them."""
    import torch.utils._python_dispatch as dispatch

    for name, value in flags.items():
        setattr(dispatch, name, value)

