"""The module tree and the stack of active modules.

:func:`describe` walks a model once and records, per state_dict-style path, what the
result needs (type, parent, children, parameters, ``extra_repr``). :class:`ModuleTracker`
installs a forward pre-hook and an always-called forward hook on each module object and
keeps a *stack* of active calls, so ops can be attributed to the innermost module,
recursion and re-entry work, and a module object reachable from two parents is
attributed per call to the path that called it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import weakref
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

from .._torch_private import (
    autograd_sequence_nr,
    current_autograd_node,
    original_module,
    remove_global_hook,
    tag_nodes,
)
from ..result.records import LayerSizes
from ..formulas.shapes import nested_tensors
from .inputs import batch_size
from .params import param_numel
from .native.build import loaded
from .scripted import is_scripted, type_name
from .timing import HostClock

__all__ = ["ModuleInfo", "describe", "compiled_paths", "layer_sizes", "ModuleTracker", "ModuleCalls", "CallRecord"]


@dataclass
class ModuleInfo:
    path: str
    module: nn.Module
    type_name: str
    depth: int
    parent: str | None
    children: list[str]
    extra_repr: str
    params: int
    params_trainable: int
    shared_with: list[str] = field(default_factory=list)
    aliases: list[str] = field(default_factory=list)  # other names of this object under the same parent
    layer: LayerSizes | None = None  # a linear or embedding layer's sizes


def layer_sizes(module: nn.Module) -> LayerSizes | None:
    """A linear or embedding layer's sizes, read off its attributes (see :class:`LayerSizes`).

    >>> layer_sizes(nn.Linear(3, 5)), layer_sizes(nn.Embedding(10, 4)), layer_sizes(nn.ReLU())
    (LayerSizes(kind='linear', inputs=3, outputs=5), LayerSizes(kind='embedding', inputs=10, outputs=4), None)
    """
    attributes = vars(module)  # set in __init__; nn.Module.__getattr__ would raise for each one missing
    for kind, inputs, outputs in _LAYER_ATTRIBUTES:
        if inputs in attributes:
            sizes = attributes[inputs], attributes.get(outputs)
            if all(isinstance(v, int) and not isinstance(v, bool) for v in sizes):
                return LayerSizes(kind, *sizes)
    return None


#: (kind, attribute of the inputs, attribute of the outputs) of the layers whose sizes are read
_LAYER_ATTRIBUTES = (
    ("linear", "in_features", "out_features"),
    ("linear", "nx", "nf"),  # transformers' Conv1D (GPT-2): a linear map
    ("embedding", "num_embeddings", "embedding_dim"),
)


#: module -> (its extra_repr, its layer sizes): a module's configuration does not change
#: between profiles, and some reprs are slow (EmbeddingBag's formats its weight tensor)
_CONFIGURATIONS: "weakref.WeakKeyDictionary[nn.Module, tuple[str, LayerSizes | None]]" = weakref.WeakKeyDictionary()


def _configuration(module: nn.Module) -> tuple[str, LayerSizes | None]:
    known = _CONFIGURATIONS.get(module)
    if known is not None:
        return known
    if is_scripted(module):  # TorchScript's is "original_name=Linear": the type name already says it
        text = ""
    else:
        try:
            text = module.extra_repr()
        except Exception:  # a user's extra_repr must never break profiling
            text = ""
    known = _CONFIGURATIONS[module] = (text, layer_sizes(module))
    return known


def describe(model: nn.Module) -> dict[str, ModuleInfo]:
    """Every module path of ``model`` in pre-order (shared modules at each of their paths)."""
    infos: dict[str, ModuleInfo] = {}
    params_of: dict[str, dict[int, object]] = {}  # path -> {id: parameter} of its subtree

    def visit(module: nn.Module, path: str, parent: str | None, depth: int, ancestors: tuple[int, ...]) -> dict:
        extra_repr, layer = _configuration(module)
        info = ModuleInfo(path, module, type_name(module), depth, parent, [], extra_repr, 0, 0, layer=layer)
        infos[path] = info
        # a parameter tied into several submodules is one tensor: collect by identity
        subtree = {id(p): p for p in module._parameters.values() if p is not None}
        named: dict[int, ModuleInfo] = {}  # child object -> its first name under this module
        for key, child in module._modules.items():
            if child is None or id(child) in ancestors:  # skip empty slots and cycles
                continue
            if id(child) in named:  # `self.b = self.a`: one module with two names, reported once
                named[id(child)].aliases.append(key)
                continue
            child_path = f"{path}.{key}" if path else key
            info.children.append(child_path)
            subtree.update(visit(child, child_path, path, depth + 1, ancestors + (id(child),)))
            named[id(child)] = infos[child_path]
        params_of[path] = subtree
        return subtree

    visit(model, "", None, 0, (id(model),))
    visit = None  # the closure refers to itself: break the cycle, so the tree is freed at once

    sizes = {k: (param_numel(p), p.requires_grad) for k, p in params_of[""].items()}  # each tensor once
    by_object: dict[int, list[str]] = {}
    for info in infos.values():
        by_object.setdefault(id(info.module), []).append(info.path)
        for k in params_of[info.path]:
            n, trainable = sizes[k]
            info.params += n
            if trainable:
                info.params_trainable += n
    for paths in by_object.values():
        if len(paths) > 1:
            for p in paths:
                infos[p].shared_with = [q for q in paths if q != p]
    return infos


def _parent_of(path: str) -> str:
    return path.rpartition(".")[0]


def choose_path(paths: list[str], caller: str | None) -> str:
    """The path of a module object for one call, given the path of the calling module.

    >>> choose_path(["enc.norm", "dec.norm"], "dec")
    'dec.norm'
    >>> choose_path(["enc.norm", "dec.norm"], "dec.layer.0")  # closest shared prefix
    'dec.norm'
    """
    if len(paths) == 1 or caller is None:
        return paths[0]
    for p in paths:
        if _parent_of(p) == caller:
            return p

    def shared_prefix(p: str) -> int:
        a, b = p.split("."), caller.split(".")
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    return max(paths, key=shared_prefix)


class CallRecord:
    """One module call: its path, phase, the stamps around it and the autograd nodes it made."""

    __slots__ = (
        "index", "path", "phase", "module", "parent", "start", "end", "ovh_start", "ovh_end", "exc",
        "seq_start", "seq_end", "top_id", "batch_size", "thread",
    )

    def __init__(self, index: int, path: str, phase: str, module: nn.Module, parent: int, exc):
        self.index = index  # position in the call log
        self.path = path
        self.phase = phase  # "forward", or "recompute" for a forward re-run during backward
        self.module = module
        self.parent = parent  # log index of the enclosing call, -1 for none
        self.exc = exc  # the exception being handled when the call began, if any
        self.start = self.end = None
        self.ovh_start = self.ovh_end = 0.0
        # autograd nodes created by this call are numbered seq_start <= n < seq_end
        self.seq_start = self.seq_end = None
        self.top_id = -1  # index among the top-level forward calls, -1 for nested ones
        self.batch_size = None
        #: whose autograd sequence counter numbered its nodes: 0 the profiling thread's, else
        #: the thread ident of the backward thread it was re-run on (CUDA's, see CallOwners)
        self.thread = 0


@dataclass
class ModuleCalls:
    """The module tracker's part of a raw capture: per (path, phase), the calls and the
    seconds spent in the module's own code (its children's spans left out); the top-level
    forward calls; the first inputs the model was called with; the error it raised.

    ``log`` and ``seconds`` (each call record and the seconds its span measured, 0 for one
    that did not end) are what the timeline is placed from."""

    calls: dict[tuple[str, str], int] = field(default_factory=dict)
    latency: dict[tuple[str, str], float] = field(default_factory=dict)
    #: per top-level forward call: (module path, seconds, batch size)
    top_calls: list[tuple[str, float, int | None]] = field(default_factory=list)
    first_inputs: tuple | None = None  # (args, kwargs) of the first top-level module call
    #: device type -> the autocast dtype enabled for it when the first top-level call began
    #: (read inside the span: users enter autocast around the forward, not around the profiler)
    autocast: dict[str, str] = field(default_factory=dict)
    error: str | None = None  # what the profiled call raised, if it did
    log: list = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    @property
    def forward_spans(self) -> list[float]:
        """Seconds of each top-level forward call (the model, or what modules of it the
        caller ran directly): the wall time of the forward phase."""
        return [self.seconds[r.index] for r in self.log if r.parent < 0 and r.phase == "forward"]


class ModuleTracker:
    """Capture source: keeps the stack of active module calls of one model.

    Two process-wide module hooks (a forward pre-hook and an always-called forward hook)
    see every module call; calls of modules outside the model are ignored. Installing
    and removing them costs the same whatever the size of the model. The root also gets a
    pre-hook with keyword arguments, to record what the model was first called with.
    Every call is appended to the session's call log (``ctx.calls``) and pushed on its stack
    (``ctx.stack``); the sources subscribed to ``ctx.events.modules`` hear of each call's
    start (``call_begins(record)``) and end (``call_ends(record, args, kwargs, output)``),
    those subscribed to ``ctx.events.forwards`` of each top-level forward call's start.
    """

    def __init__(self, ctx):
        self._ctx = ctx
        options = ctx.options
        #: forward calls made from outside the model: of the model itself, or of a submodule
        #: called directly (generate() runs an encoder-decoder's encoder that way)
        self.top_calls: list[CallRecord] = []
        self._first_inputs: tuple | None = None
        self._autocast: dict[str, str] | None = None
        self._error: str | None = None
        self._handles: list = []
        self._paths: dict[int, list[str]] = {}  # id(module) -> its paths in the model
        for info in options.infos.values():
            if not options.ignore(info.module):
                self._paths.setdefault(id(info.module), []).append(info.path)
        self._root = options.infos[""].module
        # A scripted or traced root refuses hooks of its own (the global hooks still see its
        # calls): its inputs are recorded from the global pre-hook instead
        self._root_is_script = is_scripted(self._root)
        self._native = None  # the native recorder, while its C++ hooks track the calls
        self._settling = None  # what replays them: the counting source's settle, or a CallRecords

    def start(self, ctx) -> None:
        pre, post = self._make_hooks(ctx)
        compiled = bool(compiled_paths(ctx.options.infos))
        recorder, settling = (None, None) if compiled else _native_recorder(ctx)
        if compiled:
            # dynamo traces the module hooks of the calls inside a compiled region: it would
            # break its graph at a C hook, and at each clock read in a Python one, and warn;
            # so Python hooks, disabled for dynamo: they run as they are
            pre, post = torch.compiler.disable(pre), torch.compiler.disable(post)
        try:
            if recorder is not None:  # the hooks in C++; Python sees the calls it must (top-level ones)
                modules = list({id(info.module): info.module for info in ctx.options.infos.values()
                                if id(info.module) in self._paths}.values())
                settling.__enter__()
                self._settling = settling
                self._native = recorder
                recorder.track_modules(modules, pre, post)
                ctx.replay_call = self._replayer(ctx, modules)
                ctx.pause_hooks = recorder.pause_modules
                pre, post = recorder.module_pre, recorder.module_post
            self._handles.append(register_module_forward_pre_hook(pre))
            # keyword arguments only for listeners that read them (module rules)
            self._handles.append(register_module_forward_hook(post, always_call=True,
                                                              with_kwargs=bool(ctx.events.modules)))
            if not self._root_is_script:
                self._handles.append(self._root.register_forward_pre_hook(self._inputs_hook(ctx), with_kwargs=True))
        except BaseException:
            self.stop(ctx)
            raise

    def stop(self, ctx) -> None:
        for handle in self._handles:
            remove_global_hook(handle)
        self._handles.clear()
        if self._native is not None:
            try:
                self._settling.__exit__(None, None, None)  # the calls recorded last, replayed
            finally:
                self._native.untrack_modules()
                self._native = self._settling = None
                ctx.replay_call = None
                ctx.pause_hooks = lambda paused: None

    def collect(self, ctx) -> ModuleCalls:
        """Each call's span in seconds (the profiler's overhead left out) and, per (path,
        phase), its calls and own time: its span less its children's."""
        log = list(ctx.calls)
        part = ModuleCalls(first_inputs=self._first_inputs, error=self._error, log=log, autocast=self._autocast or {})
        span = part.seconds = [0.0] * len(log)
        for rec in log:
            key = (rec.path, rec.phase)
            part.calls[key] = part.calls.get(key, 0) + 1
            if rec.end is not None:
                span[rec.index] = ctx.span_seconds(rec.start, rec.end, rec.ovh_start, rec.ovh_end)
        children = [0.0] * len(log)
        for rec in reversed(log):  # children are logged after their parent
            if rec.end is None:
                continue
            key = (rec.path, rec.phase)
            part.latency[key] = part.latency.get(key, 0.0) + max(span[rec.index] - children[rec.index], 0.0)
            if rec.parent >= 0:
                children[rec.parent] += span[rec.index]
        part.top_calls = [(rec.path, span[rec.index], rec.batch_size) for rec in self.top_calls]
        return part

    def _inputs_hook(self, ctx):
        def record_inputs(module, args, kwargs) -> None:
            # runs after the global pre-hook, so the root's call record is on top of the stack
            if ctx.paused:
                return
            if self._first_inputs is None:
                self._first_inputs = (args, kwargs)
            if ctx.stack and ctx.stack[-1].top_id >= 0:
                ctx.stack[-1].batch_size = batch_size(args, kwargs)

        return record_inputs

    def _replayer(self, ctx, modules: list):
        """``replay(kind, index, recompute, seq, stamp, overhead)``: a call of ``modules[index]``
        that the C++ hooks recorded entering (``kind`` -1) or leaving (-2), replayed in order
        with the ops around it when they are charged (``ctx.settle``), as the Python hooks
        would have seen it: ``recompute``, whether a backward node was running; ``seq``, the
        autograd sequence counter then; ``stamp``, its time on the session's clock;
        ``overhead``, the profiler's own seconds until then."""
        stack, log, paths_of = ctx.stack, ctx.calls, self._paths
        paths_of_index = [paths_of[id(m)] for m in modules]

        def replay(kind: int, index: int, recompute: int, seq: int, stamp: float, overhead: float) -> None:
            module = modules[index]
            if kind == -1:
                top = stack[-1]  # never empty: a top-level call goes to the Python hook
                paths = paths_of_index[index]
                path = paths[0] if len(paths) == 1 else choose_path(paths, top.path)
                rec = CallRecord(len(log), path, "recompute" if recompute else ctx.phase, module, top.index, None)
                rec.seq_start = seq
                rec.ovh_start = overhead
                rec.start = stamp
                log.append(rec)
                stack.append(rec)
                return
            while stack and stack[-1].module is not module:
                stack.pop()
            if stack:
                rec = stack.pop()
                rec.seq_end = seq
                rec.end = stamp
                rec.ovh_end = overhead

        return replay

    def _make_hooks(self, ctx):
        stack, log, paths_of, top_calls = ctx.stack, ctx.calls, self._paths, self.top_calls
        listeners, forwards = ctx.events.modules, ctx.events.forwards
        overhead, stamp, now = ctx.overhead, ctx.clock.stamp, ctx.overhead.now
        overhead_end = overhead.end
        home = threading.get_ident()  # the profiling thread: its sequence numbers are thread 0's
        script_root, record_inputs = (self._root, self._inputs_hook(ctx)) if self._root_is_script else (None, None)

        def pre_hook(module, args):
            paths = paths_of.get(id(module))
            if paths is None or ctx.paused:  # not a module of this model (or an ignored one)
                return
            ctx.settle()  # the stack is about to change: ops recorded so far ran under the old one
            h0 = now()
            top = stack[-1] if stack else None
            path = paths[0] if len(paths) == 1 else choose_path(paths, top.path if top else None)
            # a forward that runs while the backward pass executes a node is activation
            # checkpointing re-running it
            phase = "recompute" if current_autograd_node() is not None else ctx.phase
            rec = CallRecord(len(log), path, phase, module, top.index if top else -1, sys.exc_info()[1])
            if phase == "recompute" and threading.get_ident() != home:  # CUDA's backward thread
                rec.thread = threading.get_ident()
            if top is None and phase == "forward":
                rec.top_id = len(top_calls)
                top_calls.append(rec)
                if self._autocast is None:
                    self._autocast = autocast_dtypes()
                for listener in forwards:
                    listener.forward_begins(rec)
            rec.seq_start = autograd_sequence_nr()
            log.append(rec)
            stack.append(rec)
            for listener in listeners:
                listener.call_begins(rec)
            if module is script_root:  # a scripted root: no kwargs hook, record its inputs here
                record_inputs(module, args, {})
            overhead_end(h0)
            rec.ovh_start = overhead.seconds
            rec.start = stamp()

        def post_hook(module, args, *kwargs_output):
            # (kwargs, output); torch's path for a forward that raised passes (output,) only
            if id(module) not in paths_of or ctx.paused:
                return
            ctx.settle()  # before the end stamp: a host clock leaves its time out as overhead
            end = stamp()
            h0 = now()
            ovh_end = overhead.seconds
            # Unwind to this module's frame: a child whose exception was caught by user
            # code never reached its own post-hook and is abandoned.
            while stack and stack[-1].module is not module:
                stack.pop()
            if not stack:
                return
            rec = stack[-1]
            rec.seq_end = autograd_sequence_nr()
            exc = sys.exc_info()[1]
            failed = exc is not None and exc is not rec.exc
            if failed:
                # Called from torch's except-block: the forward raised (checkpointing also
                # stops a recompute early by raising, which is not the model failing).
                error = _note_error(rec, exc, root=len(stack) == 1 and rec.phase == "forward")
                if error is not None:
                    self._error = error
            else:
                rec.end = end
                rec.ovh_end = ovh_end
                if rec.thread:  # its nodes are numbered by this thread's counter: say so on them
                    tag_nodes(nested_tensors(kwargs_output[-1]), rec.seq_start, rec.seq_end, rec.thread)
            for listener in listeners:  # while the call is still the innermost one
                kwargs = kwargs_output[0] if len(kwargs_output) == 2 else {}
                listener.call_ends(rec, args, kwargs, None if failed else kwargs_output[-1])
            stack.pop()
            overhead_end(h0)

        return pre_hook, post_hook


def autocast_dtypes() -> dict[str, str]:
    """Device type -> the dtype autocast runs eligible ops in, for each device type where it
    is enabled now.

    >>> with torch.autocast("cpu", dtype=torch.bfloat16):
    ...     autocast_dtypes()
    {'cpu': 'bfloat16'}
    """
    on = {}
    for device_type in ("cuda", "cpu"):
        if torch.is_autocast_enabled(device_type):
            on[device_type] = str(torch.get_autocast_dtype(device_type)).replace("torch.", "")
    return on


def _native_recorder(ctx):
    """(the native recorder, a context that settles the calls it records) where its C++ hooks
    can track this session's module calls, else (None, None): stamps on the host clock, no
    source listening to each call, and either the recorder counting the session's ops or a
    timing session the recorder is free for (the caller rules out compiled modules)."""
    from .native import _in_use, source  # the native package imports the capture modules

    if ctx.events.modules:
        return None, None
    counting = ctx.get(source.NativeCountingSource)
    if counting is not None:
        return (counting.recorder, contextlib.nullcontext()) if counting.host_stamps else (None, None)
    options = ctx.options
    if options.count or options.backend == "python" or not isinstance(ctx.clock, HostClock) or _in_use[0]:
        return None, None
    recorder = loaded()  # a timing pass never builds it (the counting pass before it did)
    return (recorder, source.CallRecords(ctx, recorder)) if recorder is not None else (None, None)


def compiled_paths(infos: dict) -> tuple[str, ...]:
    """The paths of the profiled tree's ``torch.compile``d modules (their wrappers).

    >>> model = nn.Sequential(nn.Linear(2, 2))
    >>> model.append(torch.compile(nn.ReLU(), backend="eager"))
    Sequential(...)
    >>> compiled_paths(describe(model))
    ('1',)
    """
    return tuple(info.path for info in infos.values() if original_module(info.module) is not info.module)


_NOTE_PREFIX = "flopsight: raised in module"


def _note_error(record: CallRecord, exc: BaseException, root: bool) -> str | None:
    """A module's forward raised: name the module on the exception (once, innermost first);
    at the root, say that the profiled call failed (returns what the result records). Counting
    goes on: the caller may catch the exception and run the model again."""
    notes = getattr(exc, "__notes__", None) or []
    if not any(str(n).startswith(_NOTE_PREFIX) for n in notes):
        note = f"{_NOTE_PREFIX} {record.path or '<root>'!r} ({type(record.module).__name__})"
        if hasattr(exc, "add_note"):
            exc.add_note(note)
        else:  # Python 3.10: the attribute add_note would set
            exc.__notes__ = [*notes, note]
    if root:
        return failure_text(exc)
    return None


def failure_text(exc: BaseException) -> str:
    """What raised and where, read off the note :func:`_note_error` put on the exception (the
    innermost module's): ``"RuntimeError raised in module 'fc' (Linear)"``; the exception's
    type alone if no module of a profiled model raised it.

    >>> failure_text(ValueError("x"))
    'ValueError'
    """
    prefix = _NOTE_PREFIX + " "
    where = next((str(n)[len(prefix):] for n in getattr(exc, "__notes__", None) or () if str(n).startswith(prefix)),
                 None)
    return f"{type(exc).__name__} raised in module {where}" if where else type(exc).__name__
