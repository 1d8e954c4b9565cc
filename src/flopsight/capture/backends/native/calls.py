"""The native backend's module-call tracking: the recorder's C++ hooks see every module call
and record the ones inside a top-level call into its stream, in order with the ops; Python
hears only of the calls it must (top-level ones, and calls that begin or end while an
exception is handled), through the Python backend's hooks. When the stream is charged
(``ctx.settle``), each recorded call is replayed onto the module stack, as the Python hooks
would have pushed and popped it.

A timing session (no op counted) drains the stream itself (:class:`CallRecords`).
"""

from __future__ import annotations

import time

from ...calls import CallRecord, choose_path, unwind
from ..python.calls import PythonCalls
from .build import IN_USE

__all__ = ["NativeCalls", "CallRecords", "host_offset"]


def host_offset(recorder) -> float:
    """Seconds to add to a recorder stamp (ns * 1e-9) to put it on the host clock."""
    return time.perf_counter() - recorder.clock_ns() * 1e-9


class NativeCalls(PythonCalls):
    """Module calls through the recorder's C++ hooks (``recorder``: the loaded extension);
    ``drains``: whether this tracker drains the stream itself (a timing session: no op is
    counted, so nothing else settles it)."""

    def __init__(self, ctx, recorder, drains: bool):
        super().__init__(ctx)
        self._ctx = ctx
        self._in_order = ctx.events.calls_in_order
        self._rec = recorder
        self._modules: list = []
        self._records = CallRecords(ctx, recorder, self.replay) if drains else None

    def start(self, ctx) -> None:
        self._modules = self.tracked_modules(ctx)
        self._index_paths = [self.paths[id(m)] for m in self._modules]
        pre, post = self.hooks(ctx)
        try:
            if self._records is not None:
                self._records.__enter__()
            self._rec.track_modules(self._modules, pre, post)
            self.install(ctx, self._rec.module_pre, self._rec.module_post)
        except BaseException:
            self.stop(ctx)
            raise

    def stop(self, ctx) -> None:
        super().stop(ctx)
        try:
            if self._records is not None:
                self._records.__exit__(None, None, None)  # the calls recorded last, replayed
        finally:
            self._rec.untrack_modules()

    def pause(self, paused: bool) -> None:
        """The C++ hooks ignore (a profile nested inside this one runs) or see the model's calls."""
        self._rec.pause_modules(paused)

    def replay(self, kind: int, index: int, recompute: int, seq: int, stamp: float, overhead: float) -> None:
        """A call of the ``index``-th tracked module that the C++ hooks recorded entering
        (``kind`` -1) or leaving (-2), replayed in order with the ops around it:
        ``recompute``, whether a backward node was running; ``seq``, the autograd sequence
        counter then; ``stamp``, its time on the session's clock; ``overhead``, the
        profiler's own seconds until then."""
        ctx = self._ctx
        stack, log = ctx.stack, ctx.calls
        module = self._modules[index]
        if kind == -1:
            top = stack[-1]  # never empty: a top-level call goes to the Python hook
            paths = self._index_paths[index]
            path = paths[0] if len(paths) == 1 else choose_path(paths, top.path)
            rec = CallRecord(len(log), path, "recompute" if recompute else ctx.phase, module, top.index, None)
            rec.seq_start = seq
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


class CallRecords:
    """A timing session's module calls through the recorder's C++ hooks (no op is recorded):
    installed as ``ctx.settle``, it replays the calls recorded so far onto the module stack."""

    def __init__(self, ctx, recorder, replay):
        self._ctx, self._rec, self._replay = ctx, recorder, replay
        self._pending = recorder.pending_view().cast("q")
        self._offset = host_offset(recorder)

    def __enter__(self) -> "CallRecords":
        IN_USE[0] += 1
        self._ctx.settle = self.settle
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.settle()
        finally:
            self._ctx.settle = _nothing
            IN_USE[0] -= 1

    def settle(self) -> None:
        if not self._pending[0]:
            return
        ctx = self._ctx
        overhead = ctx.overhead.seconds
        h0 = ctx.overhead.begin()
        replay, offset = self._replay, self._offset
        # ops_known past every operator: none is handed over (a counting drain still gets them)
        for kind, index, recompute, seq, _, t, _, _ in self._rec.drain(2**31 - 1)[0]:
            replay(kind, index, recompute, seq, t * 1e-9 + offset, overhead)
        ctx.overhead.end(h0)


def _nothing() -> None:
    pass
