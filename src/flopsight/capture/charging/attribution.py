"""Where a cost goes: one function decides the module path and phase of everything counted.

* outside the backward pass: the innermost active module call (``forward``, or
  ``recompute`` for a forward re-run while backward executes, activation checkpointing),
  else the root, in the phase of the span running: ``step`` (inside ``optimizer.step()``),
  ``backward`` (inside a backward call but outside its autograd nodes: a wrapper's gradient
  reduction), or, outside both, when the profiled call is the model's own method; else
  nowhere (ops of user code around a profiled module);
* in the backward pass: the module whose forward created the autograd node being executed
  (its sequence number falls in the range seen around that module's call),
  ``AccumulateGrad`` to the module owning the parameter; a node made by a call counted
  whole (a unit, a module rule, an autograd function) charges that call's backward formula
  once, whichever kernels run; a node created *by* the backward pass (``create_graph=True``,
  gradient penalties) belongs to the module whose backward created it.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from functools import partial

from ..._torch_private import (
    ACCUMULATE_GRAD_SEQUENCE_NR,
    accumulated_parameter,
    autograd_sequence_nr,
    current_autograd_node,
    node_sequence_nr,
    node_thread,
)
from ...formulas.bytes_moved import tensors_bytes
from ...result.records import REDISTRIBUTE
from ...result.stats import ZERO_STATS, Stats
from ..runtime.context import CaptureContext
from .costs import evaluate
from .notices import warn_formula_failed, warn_unprofiled_forward, warn_unsupported

__all__ = ["Attribution", "NodeSeen", "WholeCall", "whole_call_bytes"]


class NodeSeen:
    """What attribution reads of the autograd node a call ran in, as it was seen then: its
    sequence number and, for an ``AccumulateGrad``, its parameter. Where the call is charged
    later (the node may be gone): a native record's node, or a claimed op's (:func:`node_seen`,
    which keeps the node's ``metadata`` too: its thread tag)."""

    __slots__ = ("_seq", "variable", "metadata")
    metadata: dict  # (set by node_seen only)

    def __init__(self, seq: int, variable=None) -> None:
        self._seq, self.variable = seq, variable

    def _sequence_nr(self) -> int:
        return self._seq


def node_seen() -> NodeSeen | None:
    """The autograd node running now, as :class:`NodeSeen` (None: none)."""
    node = current_autograd_node()
    if node is None:
        return None
    seq = node_sequence_nr(node)
    seen = NodeSeen(seq, accumulated_parameter(node) if seq == ACCUMULATE_GRAD_SEQUENCE_NR else None)
    seen.metadata = node.metadata  # type: ignore[assignment]  # (a dict: node_thread reads its thread tag there)
    return seen


class WholeCall:
    """A call counted whole whose backward is charged once, from a formula, when it runs."""

    __slots__ = ("seq_start", "seq_end", "path", "name", "cost", "charged", "nbytes")

    def __init__(self, seq_start: int, seq_end: int, path: str, name: str, cost: Stats, nbytes: int = 0):
        self.seq_start, self.seq_end, self.path, self.name, self.cost = seq_start, seq_end, path, name, cost
        self.nbytes = nbytes  # bytes its backward moves (see whole_call_bytes)
        self.charged = False


def whole_call_bytes(out, bound) -> tuple[int, int]:
    """(bytes read, bytes written) by a call counted whole: its tensor arguments, its outputs."""
    read = sum(tensors_bytes(v) for v in bound.values()) if bound else 0
    return read, tensors_bytes(out)


class CallOwners:
    """Autograd sequence number -> path of the innermost module call whose forward created
    that node, over the session's call log (``ctx.calls``, written by the call tracker).

    Sequence numbers count per thread: the forward's calls take the profiling thread's
    (``thread`` 0), a forward re-run on CUDA's backward thread (activation checkpointing)
    takes that thread's, which starts low again. So each thread has its own list: calls are
    logged in the order they start and a thread's numbers only grow, so each list is sorted
    by ``seq_start``; the lists are extended lazily as the log grows.

    >>> class Rec:
    ...     def __init__(self, path, start, end, thread=0, parent=-1):
    ...         self.path, self.seq_start, self.seq_end, self.thread, self.parent = path, start, end, thread, parent
    >>> owners = CallOwners([Rec("l0", 100, 110), Rec("l1", 110, 120), Rec("l1", 0, 10, thread=7)])
    >>> owners(105), owners(5), owners(5, thread=7), owners(105, thread=7)
    ('l0', None, 'l1', None)
    """

    def __init__(self, log: list):
        self._log = log
        self._seen = 0  # how many records of the log are in the lists
        self._lists: dict[int, tuple[list, list[int]]] = {}  # thread -> (log indices, their seq_start)

    def _extend(self) -> None:
        log = self._log
        for rec in log[self._seen:]:
            indices, starts = self._lists.setdefault(rec.thread, ([], []))
            indices.append(self._seen)
            starts.append(rec.seq_start)
            self._seen += 1

    def __call__(self, sequence_nr: int, thread: int = 0) -> str | None:
        log = self._log
        if self._seen < len(log):
            self._extend()
        lists = self._lists.get(thread)
        if lists is None:
            return None
        indices, starts = lists
        k = bisect.bisect_right(starts, sequence_nr) - 1
        i = indices[k] if k >= 0 else -1
        while i >= 0:
            rec = log[i]
            if rec.seq_start <= sequence_nr and (rec.seq_end is None or sequence_nr < rec.seq_end):
                return rec.path
            i = rec.parent
        return None

    @property
    def threads(self) -> int:
        """How many threads' counters numbered the calls logged so far."""
        if self._seen < len(self._log):
            self._extend()
        return len(self._lists)


class Attribution:
    """Charges costs to (module path, phase) in the context's tally.

    ``owner_of`` (autograd sequence nr -> path of the call that made it, or None) defaults to
    the session's call log; ``param_owner`` (id of a parameter -> the path that owns it) to
    the context's parameters.
    """

    def __init__(self, ctx: CaptureContext, owner_of=None, param_owner: dict[int, str] | None = None):
        self.ctx = ctx
        self._owner_of = owner_of if owner_of is not None else CallOwners(ctx.calls)
        self._param_owner = param_owner if param_owner is not None else ctx.params.owner_by_id
        self._whole: list[WholeCall] = []
        self._whole_starts: list[int] = []
        # (sequence nr, path, thread) of the last node looked up
        self._owner_cache: tuple[int, str | None, int] = (-1, "", 0)
        self._seq_at_start = autograd_sequence_nr()  # nodes numbered below were made before start
        self._warned_unprofiled = False
        # nodes created by backward ops: [start, end) sequence ranges and the path charged
        self._made_in_backward: list[tuple[int, int, str]] = []
        self._made_starts: list[int] = []
        self._seq_seen: int | None = None  # sequence nr after the last backward op, in a backward pass

    def charge(self, entry, t0, t1, payload: tuple = (), cost: Stats | None = None, nbytes: int = 0) -> str | None:
        """Charge one call of ``entry`` that a source charges itself, after the ops recorded
        before it (see :meth:`place`); returns the module path charged, or None when the call
        is not the profiled model's."""
        self.ctx.backend.settle()
        where = self.place(entry, t0, t1, payload, cost, nbytes)
        return None if where is None else where[0]

    def charge_in_order(self, entry, t0, t1, payload: tuple = (), cost: Stats | None = None,
                        nbytes: int = 0) -> None:
        """:meth:`charge` in order with the ops recorded around the call (a claimed op): the
        backend may do it later, under the state the call ran in."""
        self._in_order(self._place_seen, entry, t0, t1, payload, cost, nbytes)

    def _in_order(self, place: Callable, *args) -> None:
        """``place(node, seq_after, phase, *args)`` in order with the ops recorded, with the
        state of now: the autograd node running, the sequence counter, the phase."""
        ctx = self.ctx
        ctx.backend.in_order(partial(place, node_seen(), autograd_sequence_nr(), ctx.phase, *args))

    def _place_seen(self, node, seq_after: int, phase: str, entry, t0, t1, payload: tuple,
                    cost: Stats | None, nbytes: int) -> tuple[str, str] | None:
        ctx = self.ctx
        phase_now, ctx.phase = ctx.phase, phase
        try:
            return self.place_at(node, seq_after, entry, t0, t1, payload, cost, nbytes)
        finally:
            ctx.phase = phase_now

    def place(self, entry, t0, t1, payload: tuple = (), cost: Stats | None = None,
              nbytes: int = 0) -> tuple[str, str] | None:
        """Charge one call of ``entry`` (a resolved op, a unit...: it has ``name``,
        ``formula`` and ``cost(*payload)``) that ran from stamp ``t0`` to ``t1`` and moved
        ``nbytes``. Its cost is ``cost`` if given, else ``entry.cost(*payload)``, evaluated
        only once the call is known to be counted. Returns where it went, (module path,
        phase), or None when the call is not the profiled model's. (Runs for every op:
        arguments are positional.)"""
        return self.place_at(current_autograd_node(), None, entry, t0, t1, payload, cost, nbytes)

    def place_at(self, node, seq_after: int | None, entry, t0, t1, payload: tuple = (),
                 cost: Stats | None = None, nbytes: int = 0, calls: int = 1) -> tuple[str, str] | None:
        """:meth:`place` for a call that ran while autograd node ``node`` executed (None: none)
        and left the thread's sequence counter at ``seq_after`` (None: read it now), with the
        module stack and phase as they are now: an op recorded natively, charged later;
        ``calls`` of it in a row (the native recorder's repeats), ``t1 - t0`` their time.
        Where it goes is :meth:`locate`'s rule; a node made by a backward op is noted here."""
        ctx = self.ctx
        stack = ctx.stack
        path: str | None  # (a str wherever the call is charged)
        if node is None or (stack and stack[-1].phase == "recompute"):
            self._seq_seen = None
            where = self._outside_nodes()
            if where is None:
                return None
            path, phase, top_id = where
        else:
            top_id = -1
            whole = self._whole_call_of(node)
            if whole is not None:
                self._charge_whole_backward(whole, t0, t1)
                return whole.path, "backward"
            path = self._backward_owner(node)
            seq, before = autograd_sequence_nr() if seq_after is None else seq_after, self._seq_seen
            self._seq_seen = seq
            if path is None:
                return None
            phase = "backward"
            if before is not None and seq > before:  # this op made nodes: a graph of the gradient
                self._made_in_backward.append((before, seq, path))
                self._made_starts.append(before)
        if cost is None:
            cost = self.evaluate(entry, *payload, calls=calls)
        if calls != 1:
            cost, nbytes = cost * calls, nbytes * calls
        name = entry.name
        if ctx.redistribution and (cost[0] or cost[1]):  # work a change of placement added
            name = REDISTRIBUTE + name
        ctx.tally.add(path, phase, name, cost, t0, t1, calls, top_id, nbytes)
        return path, phase

    def locate(self, node) -> tuple[str, str] | None:
        """Where something that happened now, while autograd node ``node`` ran (None: none),
        belongs: the rule :meth:`place_at` charges by, charging nothing: (module path, phase),
        or None when it is not the profiled model's (a block of memory the native backend saw
        allocated)."""
        stack = self.ctx.stack
        if node is None or (stack and stack[-1].phase == "recompute"):
            where = self._outside_nodes()
            return where[:2] if where is not None else None
        whole = self._whole_call_of(node)
        if whole is not None:
            return whole.path, "backward"
        path = self._backward_owner(node)
        return (path, "backward") if path is not None else None

    def _outside_nodes(self) -> tuple[str, str, int] | None:
        """Outside the backward pass's nodes (or in a forward it re-runs): the innermost module
        call running, else the root in a step or a backward span, or when the profiled call is
        the model's own method: (path, phase, the top-level forward call's index or -1); None
        where it is not the model's (user code around a profiled module)."""
        ctx = self.ctx
        stack = ctx.stack
        if stack:
            top = stack[-1]
            return top.path, top.phase, stack[0].top_id if top.phase == "forward" else -1
        if ctx.phase != "forward" or ctx.outside_to_root:
            return "", ctx.phase, -1
        return None

    def charge_collective(self, entry, t0, t1, owner: str | None = None,
                          then: Callable[[tuple[str, str]], None] | None = None) -> None:
        """Charge a collective op like any free op and say where the collective belongs:
        (path, phase), told to ``then``. One issued by a gradient hook while the backward pass
        accumulates a parameter's gradient (DDP's bucket all-reduce, ZeRO's gradient reduction)
        carries the gradients of many modules: the root's backward. One issued outside the
        model's calls and the spans is the root's too, in the phase of the forward call,
        backward or step that came last. ``owner``: the module the collective works for when
        its issuer knows better than where it was issued (FSDP2 gathers a layer's parameters
        ahead of its use). In order with the ops recorded around it, as :meth:`charge`."""
        self._in_order(self._place_collective, self.ctx.last_phase, entry, t0, t1, owner, then)

    def _place_collective(self, node, seq_after: int, phase: str, last_phase: str, entry, t0, t1,
                          owner: str | None, then: Callable[[tuple[str, str]], None] | None) -> None:
        tally = self.ctx.tally
        where: tuple[str, str] | None
        if node is not None and node_sequence_nr(node) == ACCUMULATE_GRAD_SEQUENCE_NR:
            tally.add("", "backward", entry.name, ZERO_STATS, t0, t1)
            where = "", "backward"
        else:
            where = self._place_seen(node, seq_after, phase, entry, t0, t1, (), ZERO_STATS, 0)
            if where is None:  # between the model's calls and spans (a wrapper's gradient reduction
                # after backward()): still communication of the profiled step, the root's, in the
                # phase of the forward, backward or step that came last
                tally.add("", last_phase, entry.name, ZERO_STATS, t0, t1)
                where = "", last_phase
        if then is not None:
            then((owner, where[1]) if owner is not None else where)

    def evaluate(self, entry, *payload, calls: int = 1) -> Stats:
        """``entry.cost(*payload)`` (:func:`.costs.evaluate`); an op without a formula, or whose
        formula fails, costs nothing and is listed (and warned about once) as unsupported
        (``calls`` times)."""
        found = evaluate(entry, payload)
        if isinstance(found, Stats):
            return found
        self._unsupported(entry.name, found, calls)
        return ZERO_STATS

    def _unsupported(self, name: str, error: Exception | None, calls: int = 1) -> None:
        counter = self.ctx.tally.unsupported
        counter[name] += calls
        if counter[name] == calls:
            if error is None:
                warn_unsupported(name)
            else:
                warn_formula_failed(name, error)

    # -- calls counted whole ------------------------------------------------------------
    def charge_whole(self, unit, t0, t1, out, bound, seq_start: int, seq_end: int) -> tuple[str, str] | None:
        """A call counted whole (a unit, a module rule, an autograd function) that ran from
        ``t0`` to ``t1`` and made autograd nodes ``seq_start <= n < seq_end``: its cost now,
        its backward formula (if any) once the backward pass runs those nodes. Returns where
        it went (see :meth:`place`)."""
        read, written = whole_call_bytes(out, bound)
        with self.ctx.backend.unrecorded():  # its formulas' own ops (reading a mask's values) are not the model's
            where = self.place(unit, t0, t1, (out, bound), None, read + written)
            if where is not None and unit.backward is not None and seq_end > seq_start:  # a backward will run
                cost = self.evaluate(unit.backward_entry, out, bound)
                # its backward reads the outputs' gradients and the inputs, writes the inputs' gradients
                self.expect_backward(seq_start, seq_end, where[0], unit.name, cost, written + 2 * read)
        return where

    def charge_whole_costed(self, node, seq_after: int | None, unit, t0, t1, cost: Stats | None,
                            backward_cost: Stats, read: int, written: int, seq_start: int,
                            seq_end: int) -> tuple[str, str] | None:
        """:meth:`charge_whole` for a call whose costs are known (a unit the native recorder
        recorded, costed once per signature): ``cost`` None charges it as failed (``unit``
        then raises its error again)."""
        where = self.place_at(node, seq_after, unit, t0, t1, (), cost, read + written)
        if where is not None and unit.backward is not None and seq_end > seq_start:
            self.expect_backward(seq_start, seq_end, where[0], unit.name, backward_cost, written + 2 * read)
        return where

    def expect_backward(self, seq_start: int, seq_end: int, path: str, name: str, cost: Stats,
                        nbytes: int = 0) -> None:
        """A call counted whole made autograd nodes ``seq_start <= n < seq_end``: when the
        backward pass runs them, charge ``cost`` (and ``nbytes`` moved) once as
        ``<name>.backward`` to ``path``."""
        if seq_end > seq_start:
            self._whole.append(WholeCall(seq_start, seq_end, path, name, cost, nbytes))
            self._whole_starts.append(seq_start)

    def _whole_call_of(self, node) -> WholeCall | None:
        if not self._whole:
            return None
        seq = node_sequence_nr(node)
        i = bisect.bisect_right(self._whole_starts, seq) - 1
        if i >= 0 and seq < self._whole[i].seq_end:
            return self._whole[i]
        return None

    def _charge_whole_backward(self, whole: WholeCall, t0, t1) -> None:
        # all the kernels of the call's backward are one entry, costed once by its formula
        first = not whole.charged
        whole.charged = True
        self.ctx.tally.add(whole.path, "backward", f"{whole.name}.backward", whole.cost if first else ZERO_STATS,
                           t0, t1, calls=int(first), nbytes=whole.nbytes if first else 0)

    # -- backward owners ----------------------------------------------------------------
    def _backward_owner(self, node) -> str | None:
        """Path of the module whose forward created autograd node ``node``."""
        seq = node_sequence_nr(node)
        # a node made by a forward re-run on another thread carries that thread's tag
        thread = node_thread(node) if getattr(self._owner_of, "threads", 1) > 1 else 0
        if seq == self._owner_cache[0] and thread == self._owner_cache[2]:
            return self._owner_cache[1]
        if seq == ACCUMULATE_GRAD_SEQUENCE_NR:  # gradient accumulation into a parameter
            return self._param_owner.get(id(accumulated_parameter(node)), "" if self.ctx.outside_to_root else None)
        path = self._owner_of(seq, thread) if thread else self._owner_of(seq)
        if path is None and self._made_in_backward:
            i = bisect.bisect_right(self._made_starts, seq) - 1
            if i >= 0 and seq < self._made_in_backward[i][1]:
                path = self._made_in_backward[i][2]
        if path is None:
            if seq < self._seq_at_start:
                # its forward ran before profiling started: the root is the best we can say
                if not self._warned_unprofiled:
                    self._warned_unprofiled = True
                    warn_unprofiled_forward()
                path = ""
            elif self.ctx.outside_to_root:
                path = ""
        self._owner_cache = (seq, path, thread)
        return path
