"""The native backend's module-call tracking: the recorder's C++ hooks see every module call
and record the ones inside a top-level call into its stream, in order with the ops; Python
hears only of the calls it must (top-level ones, and calls that begin or end while an
exception is handled), through the Python backend's hooks. When the stream is charged
(the backend settles), each recorded call is replayed onto the module stack, as the Python hooks
would have pushed and popped it.

A timing session (no op counted) drains the stream itself (:class:`CallRecords`), and keeps
torch's fast call path where it can (:class:`WrappedForwards`): any global module hook sends
every module call down torch's slow path, so there each hook-free module's ``forward`` is
wrapped for the session instead, and the modules with hooks of their own get the C++ hooks
as theirs (docs/native.md, "module calls in a timed pass"). Where it times the operators too
(:mod:`.stamps`), their stamps come in the same stream, each run charged to the call it ran in.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator

from torch import nn

from ...._torch_private import has_own_hooks, module_call_frames
from ...charging.calls import CallRecord, begun, unwind
from ...model.scripted import is_scripted
from ...runtime.context import innermost_path
from ..python.calls import PythonCalls
from .ops import NO_NODE, ROWS
from .recorder import RECORDER, host_offset
from .stamps import OpStamps

__all__ = ["NativeCalls", "CallRecords", "WrappedForwards"]


class NativeCalls(PythonCalls):
    """Module calls through the recorder's C++ hooks (``recorder``: the loaded extension);
    ``drains``: whether this tracker drains the stream itself (a timing session: no op is
    counted, so nothing else settles it), with the ops' ``stamps`` in it where it times them;
    ``settle``: else the op capture's settle."""

    def __init__(self, ctx, recorder, drains: bool, settle=None, stamps: OpStamps | None = None):
        self.stamps = stamps
        self._records = CallRecords(ctx, recorder, self, stamps) if drains else None
        super().__init__(ctx, self._records.settle if self._records is not None else settle)
        self._ctx = ctx
        self._in_order = ctx.events.calls_in_order
        self._rec = recorder
        self._modules: list = []
        self._wrapped: WrappedForwards | None = None

    @property
    def settle(self):
        """What the backend settles with: this tracker's own records' (a timing session), else
        the op capture's, given."""
        return self._settle

    def start(self, ctx) -> None:
        self._modules = self.tracked_modules(ctx)
        self._index_paths = [self.paths[id(m)] for m in self._modules]
        pre, post, _ = self.hooks(ctx)
        # only a timing session wraps forwards: a counting one keeps its global hooks (no
        # callers: torch's call path is not the one recognised, nothing is wrapped either)
        callers = module_call_frames() if self._records is not None and WrappedForwards.fit(self._modules) else ()
        try:
            if self._records is not None:
                self._records.__enter__()
            self._rec.track_modules(self._modules, pre, post, list(callers))
            if callers:
                self.hook_root(ctx)  # first: the root then has hooks of its own
                self._wrapped = WrappedForwards(self._rec, self._modules)
            else:
                self.install(ctx, self._rec.module_pre, self._rec.module_post, self._rec.module_post_late)
        except BaseException:
            self.stop(ctx)
            raise

    def exit_late(self, modules: list) -> None:
        self._rec.exit_late(modules)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        was = self._rec.set_calls_active(False)  # the C++ hooks and wrappers pass calls through
        try:
            with super().paused():
                yield
        finally:
            self._rec.set_calls_active(was)

    def stop(self, ctx) -> None:
        try:
            super().stop(ctx)
        finally:
            try:
                if self._wrapped is not None:
                    wrapped, self._wrapped = self._wrapped, None
                    wrapped.restore()
                if self._records is not None:
                    self._records.__exit__(None, None, None)  # the calls recorded last, replayed
            finally:
                self._rec.untrack_modules()

    def innermost_module(self, stack: list) -> str | None:
        """The path of the innermost module call running, from the C++ hooks' stack: the
        records need not be charged first (a tensor saved for backward asks, in the middle of a
        forward). A module with several paths is placed by its callers: then the stack is
        replayed first."""
        index = self._rec.innermost_module()
        if index < 0:
            return None
        paths = self._index_paths[index]
        if len(paths) == 1:
            return paths[0]
        self._settle()
        return innermost_path(stack)

    def replay(self, kind: int, index: int, recompute: int, seq: int, stamp: float, overhead: float) -> None:
        """A call of the ``index``-th tracked module that the C++ hooks recorded entering
        (``kind`` -1) or leaving (-2), replayed in order with the ops around it:
        ``recompute``, whether a backward node was running; ``seq``, the autograd sequence
        counter then; ``stamp``, its time on the session's clock; ``overhead``, the
        profiler's own seconds until then."""
        ctx = self._ctx
        stack, log = ctx.stack, ctx.calls
        module = self._modules[index]
        rec: CallRecord | None
        if kind == -1:
            # (the stack is never empty: a top-level call goes to the Python hook)
            rec = begun(len(log), self._index_paths[index], stack[-1], "recompute" if recompute else ctx.phase,
                        module, seq)
            rec.ovh_start = overhead
            rec.start = stamp
            log.append(rec)
            stack.append(rec)
            for listener in self._in_order:
                listener.call_begins(rec)
            return
        rec = unwind(stack, module)
        if rec is not None:
            rec.seq_end = seq
            rec.end = stamp
            rec.ovh_end = overhead
            for listener in self._in_order:  # while the call is still the innermost one
                listener.call_ends(rec, None, None, None)
            stack.pop()

    def replay_batch(self, records: list, offset: float, overhead: float, stack: list, phase: str,
                     first: int) -> list[CallRecord]:
        """The calls a timing session's batch of records (recorder.cpp's drain_runs rows: module
        calls, and runs of ops where it stamps them) begins, numbered from ``first`` on, replayed
        onto ``stack`` as :meth:`replay` would (``t * 1e-9 + offset``: a record's stamp;
        ``overhead``: the profiler's own seconds at the batch's start, each op's stamps adding
        their cost; ``phase``: the phase they ran in), each run of ops charged to the call then
        innermost (:meth:`op_run`); one loop, no listener (there is none: see CallRecords)."""
        modules, index_paths = self._modules, self._index_paths
        calls: list[CallRecord] = []
        push, append = stack.append, calls.append
        top = stack[-1] if stack else None
        cost = self.stamps.cost if self.stamps is not None else 0.0
        rec: CallRecord | None
        for kind, index, recompute, seq, _, t, _, _, count, ns in records:
            if kind >= 0:  # a run of ops, ``recompute`` its autograd node: their stamps' cost is the profiler's
                self.op_run(top, phase, kind, recompute, count, ns)
                overhead += count * cost
                continue
            if kind == -1:  # (top is never None: a top-level call goes to the Python hook)
                rec = begun(first + len(calls), index_paths[index], top, "recompute" if recompute else phase,
                            modules[index], seq)
                rec.ovh_start, rec.start = overhead, t * 1e-9 + offset
                append(rec)
                push(rec)
                top = rec
                continue
            module = modules[index]
            rec = top if top is not None and top.module is module else unwind(stack, module)
            if rec is not None:
                rec.seq_end, rec.end, rec.ovh_end = seq, t * 1e-9 + offset, overhead
                stack.pop()
            top = stack[-1] if stack else None
        return calls

    def op_run(self, top: CallRecord | None, phase: str, op_id: int, node_seq: int, count: int, ns: int) -> None:
        """``count`` ops of ``op_id`` in a row, ``ns`` nanoseconds in all, that ran inside call
        ``top`` (None: outside every call, the root's where the profiled call is the model's own
        method), in ``phase``, outside the backward pass's nodes (else not charged: a timed pass
        has none)."""
        if node_seq != NO_NODE or self.stamps is None:
            return
        if top is not None:
            self.stamps.add(top.path, top.phase, op_id, ns)
        elif self._ctx.outside_to_root:
            self.stamps.add("", phase, op_id, ns)

    def collect(self, ctx):
        if self._records is not None:
            self._records.replay_deferred()  # a snapshot while running, too
        return super().collect(ctx)


_ABSENT = object()


class WrappedForwards:
    """The module calls of a timing session, on torch's fast call path: each tracked module
    without hooks of its own gets a wrapper as its ``forward`` (an instance attribute, which
    ``Module._call_impl`` calls without leaving its fast path; the wrapper records the call as
    the C++ hooks would, for calls through ``Module.__call__`` only: a forward called directly
    is no call, as for the hooks); the others (the root, whose inputs hook this session adds,
    a ZeRO-3 module's parameter fetching) get the C++ hooks as their own: the pre-hook first, the
    end of the call last, so their time includes their own hooks, as a counting session's does.
    :meth:`restore` leaves every module as it was."""

    def __init__(self, recorder, modules: list[nn.Module]):
        #: (module, its wrapper, its own ``forward`` attribute before, or _ABSENT)
        self._wrapped: list[tuple] = []
        self._handles: list = []
        try:
            for index, module in enumerate(modules):
                if has_own_hooks(module) or not _instance_forward_wins(module):
                    self._hook(recorder, module)
                else:
                    self._wrap(recorder, module, index)
        except BaseException:
            self.restore()
            raise

    @staticmethod
    def fit(modules: list[nn.Module]) -> bool:
        """Whether a session of ``modules`` may wrap forwards (where torch's call path is the
        one recognised: :func:`module_call_frames`): no module is scripted (the global hooks see
        a scripted call only), and none is a DataParallel (its replicas copy each module's
        attributes: a wrapper would run the original module)."""
        return not any(is_scripted(m) or isinstance(m, nn.DataParallel) for m in modules)

    def _wrap(self, recorder, module: nn.Module, index: int) -> None:
        before = module.__dict__.get("forward", _ABSENT)  # set on the instance (accelerate's hooks)
        wrapper = recorder.wrap_forward(module, index, module.forward)
        self._wrapped.append((module, wrapper, before))
        module.__dict__["forward"] = wrapper  # not setattr: a module's __setattr__ may do more

    def _hook(self, recorder, module: nn.Module) -> None:
        # first among its pre-hooks, as the global one runs before a module's own; last among
        # its hooks, as a counting session's call ends (python/calls.py)
        self._handles.append(module.register_forward_pre_hook(recorder.module_pre, prepend=True))
        self._handles.append(module.register_forward_hook(recorder.module_post_late, always_call=True))

    def restore(self) -> None:
        """Every wrapped module's ``forward`` as it was, unless someone replaced the wrapper
        since (their wrapper calls ours, which then passes calls through); hooks removed."""
        wrapped, self._wrapped = self._wrapped, []
        handles, self._handles = self._handles, []
        for handle in handles:
            handle.remove()
        for module, wrapper, before in wrapped:
            if module.__dict__.get("forward", _ABSENT) is not wrapper:
                continue
            if before is _ABSENT:
                del module.__dict__["forward"]
            else:
                module.__dict__["forward"] = before


def _instance_forward_wins(module: nn.Module) -> bool:
    """Whether an instance attribute ``forward`` is what ``module.forward`` finds (not where its
    class makes ``forward`` a property or another data descriptor)."""
    return not hasattr(type(inspect.getattr_static(type(module), "forward", None)), "__set__")


class CallRecords:
    """A timing session's module calls through the recorder's C++ hooks (no op is recorded):
    the backend's settle, it replays the calls recorded so far onto the module stack.

    A batch drained while no module call is open (only when a top-level call ends: a call
    outside every call goes to the Python hooks, so nothing is recorded between two) changes
    nothing that runs next: its replay is deferred to the end of the session, out of the timed
    calls (``generate()`` calls the model once per token), into slots of the call log reserved
    now (the log stays in call order), from the stack as it was. Not where a source listens to
    each call in order with the other events (the memory source; no timing session has one)."""

    def __init__(self, ctx, recorder, calls: NativeCalls, stamps: OpStamps | None = None):
        self._ctx, self._rec, self._calls, self._stamps = ctx, recorder, calls, stamps
        self._pending = recorder.pending_view().cast("q")
        self._offset = host_offset(recorder)
        #: (records, first slot, stack, phase, overhead) of each deferred batch
        self._deferred: list[tuple] = []

    def __enter__(self) -> CallRecords:
        RECORDER.acquire()
        if self._stamps is not None:
            try:
                self._stamps.start()
            except BaseException:
                RECORDER.release()
                raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self._stamps is not None:
                self._stamps.stop()
            self.settle()
            self.replay_deferred()
        finally:
            RECORDER.release()

    def settle(self) -> None:
        if not self._pending[0]:
            return
        ctx = self._ctx
        overhead = ctx.overhead.seconds
        h0 = ctx.overhead.begin()
        known = RECORDER.tables.ops  # the operators of the stamps' runs, named at the end
        rows, _, ops = self._rec.drain_runs(len(known), True)
        known.extend((name, overload) for _, name, overload in ops)
        records, offset, log = list(ROWS.iter_unpack(rows)), self._offset, ctx.calls
        cost = self._stamps.cost if self._stamps is not None else 0.0
        if ctx.events.calls_in_order:  # heard one by one, in order
            calls, running = self._calls, overhead
            for kind, index, recompute, seq, _, t, _, _, count, ns in records:
                if kind >= 0:
                    calls.op_run(ctx.stack[-1] if ctx.stack else None, ctx.phase, kind, recompute, count, ns)
                    running += count * cost
                else:
                    calls.replay(kind, index, recompute, seq, t * 1e-9 + offset, running)
        elif not self._rec.open_calls():  # a top-level call is ending (its Python hook settles)
            stack = ctx.stack
            self._deferred.append((records, len(log), list(stack), ctx.phase, overhead))
            log.extend([None] * sum(1 for r in records if r[0] == -1))
            # the stack as the hook is about to leave it: its call's record (the bottom one, as
            # the C++ stack had it) on top; the calls above it all ended or were abandoned
            del stack[1:]
        else:
            log.extend(self._calls.replay_batch(records, offset, overhead, ctx.stack, ctx.phase, len(log)))
        if cost:  # the stamps' cost, the profiler's own time from here on (the spans still open leave it out)
            ctx.overhead.seconds += cost * sum(r[8] for r in records if r[0] >= 0)
        ctx.overhead.end(h0)

    def replay_deferred(self) -> None:
        """The deferred batches replayed into their slots."""
        deferred, self._deferred = self._deferred, []
        log = self._ctx.calls
        for records, first, stack, phase, overhead in deferred:
            calls = self._calls.replay_batch(records, self._offset, overhead, stack, phase, first)
            log[first:first + len(calls)] = calls

