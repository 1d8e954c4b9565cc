"""The Python backend's module-call tracking: two process-wide Python hooks (a forward
pre-hook and an always-called forward hook) see every module call; calls of modules outside
the model are ignored. Installing and removing them costs the same whatever the size of the
model. The root also gets a pre-hook with keyword arguments, to record what the model was
first called with.

Every call is appended to the session's call log (``ctx.calls``) and pushed on its stack
(``ctx.stack``); the sources subscribed to ``ctx.events.modules`` hear of each call's start
(``call_begins(record)``) and end (``call_ends(record, args, kwargs, output)``), those
subscribed to ``ctx.events.forwards`` of each top-level forward call's start
(``forward_begins(record)``) and return (``forward_ends(record, output)``).

A global forward hook runs before a module's own forward hooks, so a module with hooks of its
own (tensor parallelism's output redistribution, ZeRO-3's and FSDP2's parameter release) has
its call end at a hook of its own, added after them (:func:`late_exits`): what its hooks do is
part of its call, a collective they run charged to it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

from ...._torch_private import (
    autograd_sequence_nr,
    current_autograd_node,
    has_own_forward_hooks,
    remove_global_hook,
    tag_nodes,
)
from ....formulas.shapes import nested_tensors
from ...charging.calls import CallTracking, autocast_dtypes, begun, note_error, unwind
from ...model.modules import compiled_paths
from ...runtime.running import RUNNING

__all__ = ["PythonCalls", "late_exits"]


def late_exits(modules) -> list:
    """The modules whose calls end at a hook of their own, after their own forward hooks (see
    the module docstring)."""
    return [m for m in modules if has_own_forward_hooks(m)]


class PythonCalls(CallTracking):
    """Tracks module calls with Python hooks (see the module docstring)."""

    def __init__(self, ctx, settle=None):
        super().__init__(ctx)
        self._handles: list = []
        self._late: set[int] = set()  # ids of the modules whose calls end at their own last hook
        self._pause = [0]  # above 0: calls not tracked (:meth:`paused`)
        #: the backend's settle: what ran so far is charged before the stack changes
        self._settle = settle if settle is not None else _nothing

    def start(self, ctx) -> None:
        pre, post, late_post = self.hooks(ctx)
        if compiled_paths(ctx.options.infos):
            # dynamo traces the module hooks of the calls inside a compiled region: it would
            # break its graph at a C hook, and at each clock read in a Python one, and warn;
            # so Python hooks, disabled for dynamo: they run as they are
            pre, post, late_post = (torch.compiler.disable(pre), torch.compiler.disable(post),
                                    torch.compiler.disable(late_post))
        try:
            self.install(ctx, pre, post, late_post)
        except BaseException:
            self.stop(ctx)
            raise

    def install(self, ctx, pre, post, late_post=None) -> None:
        """Install ``pre`` and ``post`` as the global module hooks, and the root's inputs hook;
        ``late_post`` (default ``post``) as the last own hook of each module whose call ends
        there (``post`` then passes its calls by)."""
        self._handles.append(register_module_forward_pre_hook(pre))
        # keyword arguments only for listeners that read them (module rules)
        with_kwargs = bool(ctx.events.modules)
        late = late_exits(self.tracked_modules(ctx))
        self.exit_late(late)
        # with no module to pass by, the global hook is the late one itself (one call less each)
        self._handles.append(register_module_forward_hook(post if late else late_post or post, always_call=True,
                                                          with_kwargs=with_kwargs))
        for module in late:
            self._handles.append(module.register_forward_hook(late_post or post, always_call=True,
                                                              with_kwargs=with_kwargs))
        self.hook_root(ctx)

    def hook_root(self, ctx) -> None:
        """The root's inputs hook (a scripted root refuses hooks: the pre-hook records them)."""
        if not self.root_is_script:
            self._handles.append(self.root.register_forward_pre_hook(self.record_inputs(ctx), with_kwargs=True))

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No module call is tracked meanwhile (the model run not for real)."""
        self._pause[0] += 1
        try:
            yield
        finally:
            self._pause[0] -= 1

    def exit_late(self, modules: list) -> None:
        """The global post-hook passes the calls of ``modules`` by: they end at their own last hook."""
        self._late.update(id(m) for m in modules)

    def stop(self, ctx) -> None:
        for handle in self._handles:
            remove_global_hook(handle)
        self._handles.clear()
        self._late.clear()

    def hooks(self, ctx):
        """(pre-hook, post-hook) that keep the stack and the call log."""
        stack, log, paths_of, top_calls = ctx.stack, ctx.calls, self.paths, self.top_calls
        listeners, forwards = ctx.events.modules, ctx.events.forwards
        in_order = ctx.events.calls_in_order  # heard as they happen: in order with the ops
        overhead, stamp, now = ctx.overhead, ctx.clock.stamp, ctx.overhead.now
        overhead_end = overhead.end
        home = threading.get_ident()  # the profiling thread: its sequence numbers are thread 0's
        settle = self._settle
        script_root, record_inputs = (self.root, self.record_inputs(ctx)) if self.root_is_script else (None, None)

        pause = self._pause

        def pre_hook(module, args):
            paths = paths_of.get(id(module))
            if paths is None or pause[0] or RUNNING.elsewhere(home):  # not a module of this model (or an ignored one)
                return
            settle()  # the stack is about to change: what ran so far ran under the old one
            h0 = now()
            top = stack[-1] if stack else None
            # a forward that runs while the backward pass executes a node is activation
            # checkpointing re-running it
            phase = "recompute" if current_autograd_node() is not None else ctx.phase
            rec = begun(len(log), paths, top, phase, module, autograd_sequence_nr(), sys.exc_info()[1])
            if phase == "recompute" and threading.get_ident() != home:  # CUDA's backward thread
                rec.thread = threading.get_ident()
            if top is None and phase == "forward":
                rec.top_id = len(top_calls)
                top_calls.append(rec)
                if self.autocast is None:
                    self.autocast = autocast_dtypes()
                for listener in forwards:
                    listener.forward_begins(rec)
            log.append(rec)
            stack.append(rec)
            for listener in listeners:
                listener.call_begins(rec)
            for listener in in_order:
                listener.call_begins(rec)
            # a scripted root: no kwargs hook, record its inputs here (record_inputs: set with script_root)
            if module is script_root and record_inputs is not None:
                record_inputs(module, args, {})
            overhead_end(h0)
            rec.ovh_start = overhead.seconds
            rec.start = stamp()

        late = self._late

        def post_hook(module, args, *kwargs_output):
            # (kwargs, output); torch's path for a forward that raised passes (output,) only
            if id(module) in late:  # its call ends at its own last hook: late_post_hook
                return
            late_post_hook(module, args, *kwargs_output)

        def late_post_hook(module, args, *kwargs_output):
            if id(module) not in paths_of or pause[0] or RUNNING.elsewhere(home):
                return
            settle()  # before the end stamp: a host clock leaves its time out as overhead
            end = stamp()
            h0 = now()
            ovh_end = overhead.seconds
            rec = unwind(stack, module)
            if rec is None:
                return
            rec.seq_end = autograd_sequence_nr()
            exc = sys.exc_info()[1]
            failed = exc is not None and exc is not rec.exc
            if failed and exc is not None:  # (failed implies exc: repeated for the type checker)
                # Called from torch's except-block: the forward raised (checkpointing also
                # stops a recompute early by raising, which is not the model failing).
                error = note_error(rec, exc, root=len(stack) == 1 and rec.phase == "forward")
                if error is not None:
                    self.error = error
            else:
                rec.end = end
                rec.ovh_end = ovh_end
                # its nodes are numbered by this thread's counter: say so on them (seq_start: set by begun)
                if rec.thread and rec.seq_start is not None:
                    tag_nodes(nested_tensors(kwargs_output[-1]), rec.seq_start, rec.seq_end, rec.thread)
            for listener in listeners:  # while the call is still the innermost one
                kwargs = kwargs_output[0] if len(kwargs_output) == 2 else {}
                listener.call_ends(rec, args, kwargs, None if failed else kwargs_output[-1])
            for listener in in_order:
                listener.call_ends(rec, None, None, None)
            stack.pop()
            if rec.top_id >= 0 and not failed:
                for listener in forwards:
                    listener.forward_ends(rec, kwargs_output[-1])
            overhead_end(h0)

        return pre_hook, post_hook, late_post_hook


def _nothing() -> None:
    pass
