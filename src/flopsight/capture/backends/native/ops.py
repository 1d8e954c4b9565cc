"""Capture source: the counting source on the native recorder (``recorder.cpp``).

The recorder observes the ops a dispatch mode would see, in C++, and records each one's
operator, signature, autograd node and stamps. The Python side charges them through the
same attribution object and the same registry formulas as the dispatch-mode path, in
batches: whenever the state that decides where a cost goes is about to change (a module
call begins or ends, a phase, a call counted whole), the backend settles (the context asks it,
:meth:`NativeCountingSource.settle`), and what was recorded under the old state is charged
under it. So every
op lands where the dispatch mode would have put it. The recorder hands a batch over in runs
(``recorder.cpp``'s drain_runs): consecutive ops of one signature under one state as one row
with their count and summed time, and the blocks of memory allocated and released under one
state as the few figures the memory source needs from them, so Python runs per run, not per op.

A formula runs once per signature (operator, dtypes, shapes, scalar and list arguments), on
meta tensors of the signature's shapes; later ops of that signature reuse the cost. The
recorder keeps no tensor past its op, except for the operators whose formulas read tensor
values (the attention family: masks, packed sequences' offsets) and for values a signature
cannot describe (nested or sparse tensors): those ops are costed one by one on their values.
The ops a source claims (the collectives) come to :meth:`NativeCountingSource._claimed` as they
return, with their values; the source's handler charges what was recorded before one (it
settles) and then the op itself. A user formula that reads values through
:func:`~flopsight.formulas.attention.entries.read_values` on an operator the recorder was not
told about gets meta tensors (no values): it is warned about, and ``backend="python"`` counts it.
"""

from __future__ import annotations

import collections
import struct
import warnings
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch

from ...._process import WARNED
from ...._torch_private import (
    ACCUMULATE_GRAD_SEQUENCE_NR,
    builtin_aten_op,
    native_op,
    op_overload_name,
    op_overload_names,
    op_schema,
    tensor_address,
)
from ....formulas.attention import entries as attention_entries
from ....formulas.attention.convention import reads_values
from ....formulas.registry import READS_VALUES, ZERO
from ....result.stats import ZERO_STATS
from ...charging.attribution import NodeSeen, whole_call_bytes
from ...charging.costs import evaluate
from ...charging.counts import Counts, collect_counts
from ...runtime.context import CaptureContext, past_hidden_waits
from ...runtime.events import OpEvent
from ...runtime.running import RUNNING
from ...runtime.stance import EAGER_STANCE
from ...runtime.timing import FakeClock
from .recorder import RECORDER, Tables, host_offset, see_through_dtensors
from .scalars import ScalarCosts, split_doubles

__all__ = ["NativeCountingSource", "NO_NODE", "ROWS", "configure_tables", "operator_of"]

NO_NODE = -(2**63)  # the recorder's node sequence number for an op outside the backward pass
MEMORY = -3  # a memory run's row (recorder.cpp's kMemory)
RELEASED = -4  # a block released outside the memory run it was allocated in (kReleased)
RELEASED_BEFORE = -5  # a block allocated before the session, released (kReleasedBefore)
MARK = -6  # an action of in_order's, in order with the ops (kMark: (MARK, 0, NO_NODE, its number, ...))
ROWS = struct.Struct("=10q")  # drain_runs' rows


class Costed(NamedTuple):
    """What one signature costs: its registry ``entry`` (None: an operator torch.ops does not
    know), ``cost`` (None: no formula), the bytes it moves (a unit's: the bytes it reads);
    for a unit, its ``backward`` cost (None for an op) and the bytes it ``written``."""

    entry: Any
    cost: Any
    nbytes: int
    backward: Any = None
    written: int = 0


class _Failed:
    """A resolved op (or unit) whose formula failed on this signature: charging it reports
    the error again (so every call is listed as unsupported, as the dispatch-mode path lists
    them)."""

    __slots__ = ("name", "formula", "error", "backward")

    def __init__(self, entry, error: Exception):
        self.name, self.formula, self.error = entry.name, entry.formula, error
        self.backward = getattr(entry, "backward", None)

    def cost(self, *payload):
        raise self.error


def _costed_as(entry, found) -> tuple:
    """(the entry to charge, its cost or None) from :func:`~...costs.evaluate`'s answer: a
    formula that failed on this signature is charged as failed (each call listed)."""
    if isinstance(found, Exception):
        return _Failed(entry, found), None
    return entry, found


class _Op:
    """A recorded operator: its registry entry (or, for a unit, its :class:`Unit`) and how
    the recorder's positional inputs split into the schema's positional and keyword arguments."""

    __slots__ = ("entry", "unit", "n_positional", "kw_names", "n_returns")

    def __init__(self, entry, schema, unit=None):
        self.entry, self.unit = entry, unit
        arguments = schema.arguments
        self.n_positional = sum(not a.kwarg_only for a in arguments)
        self.kw_names = [a.name for a in arguments if a.kwarg_only]
        self.n_returns = len(schema.returns)

    @property
    def name(self) -> str:
        """The name its calls are charged under (the unit's, for a unit)."""
        return self.unit.name if self.unit is not None else self.entry.name

    def call_values(self, inputs, outputs) -> tuple:
        """(out, args, kwargs) as a dispatch mode would have seen them."""
        n = self.n_positional
        kwargs = dict(zip(self.kw_names, inputs[n:]))
        out = outputs[0] if self.n_returns == 1 and len(outputs) == 1 else tuple(outputs)
        return out, tuple(inputs[:n]), kwargs


def _configure(recorder, registry, claimed: tuple = ()) -> _RegistryTables:
    """The recorder set up for ``registry`` and the ops a source claims (``claimed``: their
    names), the process's tables (:class:`~.recorder.Tables`) forgotten when the operator names
    change."""
    known: Tables = RECORDER.tables
    tables = known.registries.get(registry)
    if tables is None or tables.version != registry.version:
        tables = known.registries[registry] = _RegistryTables(registry)
    names = (*tables.names, claimed)
    if names != known.names:
        # the operator and signature ids start again: what a stopped session has not charged
        # yet is charged under the ones it was recorded with first
        for source in list(RECORDER.uncharged):
            source.settle()
        recorder.configure(*names)
        known.names = names
        known.ops.clear()
        for other in known.registries.values():
            other.forget()
    return tables


def _claimed_names(claims) -> tuple[str, ...]:
    """The sorted ``"ns::name.overload"`` of the claimed op overloads (the same ones at every
    start of a distributed run: their names are looked up once per process, by the overloads'
    ids, which torch keeps for the process)."""
    known = RECORDER.tables.claimed
    ids = tuple(map(id, claims))
    names = known.get(ids)
    if names is None:
        names = known[ids] = tuple(sorted(map(op_overload_name, claims)))
    return names


def configure_tables(recorder, registry) -> _RegistryTables:
    """The recorder set up for ``registry`` where it is not already, whatever ops a session
    claimed (a timed pass's stamps claim none, and record a claimed op as any other); the
    registry's tables (see :func:`_configure`)."""
    known = RECORDER.tables
    tables = known.registries.get(registry)
    if tables is not None and tables.version == registry.version and known.names is not None \
            and known.names[:3] == tables.names:
        return tables
    return _configure(recorder, registry)


def operator_of(tables: _RegistryTables, registry, op_id: int, known: list) -> _Op | None:
    """The operator of id ``op_id`` as ``registry`` charges it (None: one torch.ops does not
    know), from ``tables`` (filled up to it); ``known``: the process's operators by id."""
    ops, units = tables.ops, tables.units
    while len(ops) <= op_id:
        name, overload = known[len(ops)]
        op = native_op(name, overload)
        ops.append(None if op is None else _Op(registry.resolve(op), op_schema(op), units.get(f"{name}.{overload}")))
    return ops[op_id]


class _RegistryTables:
    """One registry's entries per operator id and costs per signature (see :class:`~.recorder.Tables`)."""

    def __init__(self, registry) -> None:
        self.version = registry.version
        self.names, self.units = operator_names(registry)
        self.ops: list[_Op | None] = []  # by operator id
        self.claimed_ops: dict[int, tuple] = {}  # operator id -> (op overload, _Op) of a claimed op
        self.costs: dict[int, Costed] = {}  # signature -> what it costs
        self.scalars = ScalarCosts()  # what signatures cost whatever their float scalars
        #: keys of signatures whose formulas may read values but read none on a call's values:
        #: what one costs (their later ops keep no values: recorder.cpp's g_unread)
        self.unread: dict[bytes, Costed] = {}

    def forget(self) -> None:
        self.ops.clear()
        self.claimed_ops.clear()
        self.costs.clear()
        self.scalars.clear()
        self.unread.clear()


class _ThreadOff:
    """The recorder off on this thread meanwhile (as it was after). A plain object, not a
    generator: a collective's handler enters one per call."""

    __slots__ = ("_rec", "_was")

    def __init__(self, rec) -> None:
        self._rec = rec

    def __enter__(self) -> None:
        self._was = self._rec.set_thread_enabled(False)

    def __exit__(self, *exc: object) -> None:
        self._rec.set_thread_enabled(self._was)


class NativeCountingSource:
    """Counts through the native recorder (``recorder``: the loaded extension); see the
    module docstring. Used when the session's backend is native."""

    backend = "native"

    def __init__(self, ctx: CaptureContext, recorder, memory: bool = False):
        self._ctx = ctx
        self._rec = recorder
        #: also track memory: the blocks the allocators report, published to ``ctx.events.allocations``
        self.memory = memory
        self._not_model: set[int] = set()  # the memory runs that were not the model's (nor their releases)
        self._op_names: dict[int, str | None] = {}  # operator id -> the name its blocks are listed under
        #: the units recorded whole here (aten ops, and functions that reach one), so the function
        #: mode lets their calls on plain tensors run as they are; a call on a tensor subclass that takes it over at
        #: the torch-function level (a nested tensor's or CausalBias's own attention) still goes
        #: to the unit's Python handler, which counts it as on the Python path
        self.passthrough = _aten_units(ctx.registry)
        self._tables: _RegistryTables  # set by start (nothing is charged before it)
        self._values: dict[int, tuple] = {}  # signature -> (key, inputs, outputs) handed over
        self._on_values: set[str] = set()  # the operators costed on their own values
        self._running = False
        self._by_address: dict | None = None
        self._actions: dict[int, Callable[[], None]] = {}  # in_order's, by their marks' numbers
        self._next_action = 0
        self._pending = recorder.pending_view().cast("q")  # records not yet charged
        #: the batches drained and set aside uncharged, in order: (rows, values, the phase they
        #: ran in, whether they count, the profiler's own seconds when drained)
        self._aside: collections.deque[tuple] = collections.deque()
        #: what must happen in order with them: (the batch it comes before, what to do)
        self._in_order: collections.deque[tuple[int, Callable[[], None]]] = collections.deque()
        self._drained = self._charged = 0  # batches drained, and charged, since the start
        #: the recorder's own seconds in its callbacks, per phase they ran in (recorder.cpp's OwnTime)
        self._own: dict[str, float] = {}
        #: replays a module call the C++ hooks recorded (the backend's call tracker sets it)
        self.replay_call: Callable[[int, int, int, int, float, float], None] | None = None
        clock = ctx.clock
        # exactly one of the two: the offset of the recorder's stamps, or a test clock's stamp
        self._offset: float | None
        self._stamp: Callable[[], int] | None
        if isinstance(clock, FakeClock):  # a test's clock: ops stamped on it as charged
            self._offset = None
            self._stamp = clock.stamp
        else:  # the recorder's stamps, moved onto the host clock; on a device clock (CUDA events,
            # which time the module calls and phases) an op's time is its host time: no per-op event
            self._offset = host_offset(recorder)
            self._stamp = None
        #: whether a change of state sets the records aside (charged at the next settle) rather
        #: than charging them: not on a test's clock, which stamps each op as it is charged
        self._defers = self._offset is not None

    @property
    def recorder(self):
        """The loaded extension (the call tracker installs its C++ hooks)."""
        return self._rec

    def start(self, ctx: CaptureContext) -> None:
        claims = ctx.events.claims
        self._tables = _configure(self._rec, ctx.registry, _claimed_names(claims))
        EAGER_STANCE.acquire()
        try:
            if self.memory and not self._rec.start_memory():  # checked when the backend was chosen
                raise RuntimeError("memory: torch.profiler's state is on this thread; profile with backend='python'")
            see_through_dtensors(self._rec)
            self._rec.set_unread(list(self._tables.unread))
            self._rec.start(self._claimed if claims else None)
        except BaseException:
            if self.memory:
                self._rec.stop_memory()
            EAGER_STANCE.release()
            raise
        RECORDER.acquire()
        self._running = True

    def stop(self, ctx: CaptureContext) -> None:
        if not self._running:
            return
        self._running = False
        try:
            if self.memory:
                self._rec.stop_memory()
            self._rec.stop()
            self._set_aside()
            if not self._defers:
                self.settle()
            elif self._aside or self._in_order:  # charged when the capture is collected (perhaps on another thread)
                RECORDER.uncharged.add(self)
        finally:
            RECORDER.release()
            EAGER_STANCE.release()

    def collect(self, ctx: CaptureContext) -> Counts:
        self.settle()  # what ran so far (a snapshot while running)
        return collect_counts(ctx, self.backend, on_values=self._on_values, profiler_seconds=dict(self._own))

    def aside(self):
        """Record nothing while a call counted whole runs (its ops are not counted again):
        RecordFunction is off on this thread meanwhile, so its ops run at full speed."""
        return self._thread_off()

    def unrecorded(self):
        """The profiler's own code runs torch ops meanwhile (a formula on a signature's meta
        tensors, a collective's handler): no session records them (see ...running), this one
        with RecordFunction off on the thread."""
        return RUNNING.own_code(self._thread_off())

    def _thread_off(self) -> _ThreadOff:
        return _ThreadOff(self._rec)

    def _claimed(self, op_id: int, inputs: tuple, outputs: tuple, t0: int, t1: int) -> None:
        """A claimed op (a collective) returned, on the thread that ran it. Its handler settles
        (charges what was recorded before it) once it has watched the op's completion, and
        charges it where it ran, as under the dispatch mode."""
        claimed = self._tables.claimed_ops
        op = claimed.get(op_id)
        if op is None:
            func = native_op(*self._rec.operator(op_id))
            if func is None:  # (never: a source claims an overload torch.ops has, by its name)
                raise RuntimeError(f"native recorder: claimed operator {op_id} is not in torch.ops")
            op = claimed[op_id] = (func, _Op(self._ctx.registry.resolve(func), op_schema(func)))
        func, op = op
        handler = self._ctx.events.claims.get(func)
        if handler is None or self._ctx.suppressed:
            return
        out, args, kwargs = op.call_values(inputs, outputs)
        if self._offset is not None:
            start, end = t0 * 1e-9 + self._offset, t1 * 1e-9 + self._offset
        else:  # a test's clock: _stamp is set with it
            start, end = self._stamp(), self._stamp()  # type: ignore[misc]
        overhead = self._ctx.overhead
        before, h0 = overhead.seconds, overhead.begin()
        try:
            with self.unrecorded():
                handler(OpEvent(op.entry, func, args, kwargs, out, start, end, None, None))
        finally:
            overhead.seconds = before  # the handler's settle counted its own part: count the whole once
            overhead.end(h0)

    # -- charging -------------------------------------------------------------------------
    def settle_later(self) -> None:
        """The state that decides where a cost goes is about to change: what was recorded so
        far is set aside with the state it ran under, and charged at the next :meth:`settle`
        (whatever reads what was charged, or changes it otherwise, settles first). On a test's
        clock it is charged now."""
        if not self._defers:
            self.settle()
        else:
            self._set_aside()

    def settle(self) -> None:
        """Charge what was recorded so far, each batch under the state it ran in: the batches
        set aside, then what the recorder holds (while it runs) under the state now."""
        if self._running and self._pending[0]:
            self._set_aside()
        if self._aside or self._in_order:
            self._charge_aside()

    def in_order(self, action: Callable[[], None]) -> None:
        """Do ``action`` where it falls among the records: while the recorder runs, a mark in
        its stream that :meth:`_charge` does it at (no drain: a claimed op's handler does this
        for every collective, a DTensor redistribution as it begins and ends); else once every
        batch set aside before now is charged (at once if none waits)."""
        if self._defers and self._running and (self._pending[0] or self._aside):
            self._next_action += 1
            self._actions[self._next_action] = action
            self._rec.mark(self._next_action)
            return
        self.settle_later()
        if self._aside:
            self._in_order.append((self._drained, action))
        else:
            action()

    def _set_aside(self) -> None:
        """The recorder's records drained into a batch of their own, with the state they ran
        under (the context's, now); its own time in its callbacks since the last drain, to
        the phase they ran in."""
        ctx = self._ctx
        own = self._rec.take_own_ns()
        if own:
            self._own[ctx.phase] = self._own.get(ctx.phase, 0.0) + own * 1e-9
        if not self._pending[0]:
            return
        # the profiler's own time until now: what it was at every module boundary since the last one
        overhead = ctx.overhead.seconds
        h0 = ctx.overhead.begin()
        # repeats merged unless a listener needs each op's interval
        known = RECORDER.tables.ops
        rows, values, ops = self._rec.drain_runs(len(known), not ctx.events.ran)
        known.extend((name, overload) for _, name, overload in ops)
        self._aside.append((rows, values, ctx.phase, not ctx.suppressed, overhead))
        self._drained += 1
        ctx.overhead.end(h0)

    def _charge_aside(self) -> None:
        """Charge the batches set aside, in order, each in the phase it ran in, with what must
        happen in order among them. After the session (on whichever thread collects it), the
        profiler's own time is no longer counted: the span is over."""
        ctx = self._ctx
        with RECORDER.charging:
            if ctx.attribution is None:  # the session was let go uncollected (abandoned): nothing reads them
                self._aside.clear()
                self._in_order.clear()
                self._actions.clear()
                RECORDER.uncharged.discard(self)
                return
            h0 = ctx.overhead.begin() if self._running else None
            phase = ctx.phase
            try:
                while self._aside:
                    rows, values, ctx.phase, counting, overhead = self._aside.popleft()
                    self._run_in_order(self._charged)
                    self._charged += 1
                    for sig, key, inputs, outputs in values:
                        self._values[sig] = (key, inputs, outputs)
                    try:
                        self._charge(ROWS.iter_unpack(rows), counting, overhead)
                    finally:
                        self._values.clear()
                self._run_in_order(self._drained)
            finally:
                ctx.phase = phase
                if h0 is not None:
                    ctx.overhead.end(h0)
                if not self._running:
                    RECORDER.uncharged.discard(self)

    def _run_in_order(self, batch: int) -> None:
        """Do what must happen before batch number ``batch`` is charged."""
        waiting = self._in_order
        while waiting and waiting[0][0] <= batch:
            waiting.popleft()[1]()

    def _op(self, op_id: int) -> _Op | None:
        return operator_of(self._tables, self._ctx.registry, op_id, RECORDER.tables.ops)

    def _charge(self, rows, counting: bool, overhead: float) -> None:
        """Charge the op runs (when ``counting``) and the memory runs, and replay the module
        calls and do the actions marked among them (``rows``: recorder.cpp's drain_runs)."""
        ctx = self._ctx
        attribution = ctx.attribution
        place_at = attribution.place_at
        replay_call = self.replay_call
        costs, offset = self._tables.costs, self._offset
        stamp: Callable[[], int] = self._stamp  # type: ignore[assignment]  # set where offset is None, its one use
        ran = ctx.events.ran  # listeners to the ops' intervals (ops overlapping collectives), told once below
        starts: list[float] = []
        ends: list[float] = []
        waits = ctx.hidden_waits
        seen, node = (NO_NODE, 0), None  # the last op's node: the ops of a node come in a row
        for op_id, sig, node_seq, seq_before, seq_after, t0, t1, variable, count, ns in rows:
            if op_id < 0:
                if op_id == MEMORY:  # a memory run (see _memory_run for its fields)
                    self._memory_run(sig, node_seq, seq_before, seq_after, t0, t1, variable, count, ns)
                elif op_id == RELEASED:  # (run, bytes, temporary)
                    if sig not in self._not_model:
                        for listener in ctx.events.allocations:
                            listener.freed(node_seq, seq_before == 1)
                elif op_id == RELEASED_BEFORE:  # (0, bytes, address)
                    for listener in ctx.events.allocations:
                        listener.freed_before(node_seq, seq_before)
                elif op_id == MARK:  # an action of in_order's
                    self._actions.pop(seq_before)()
                else:  # a module call entered or left (recorder.cpp's kEnter, kExit)
                    # (recorded only where the C++ hooks track the calls: their tracker set replay_call)
                    replay_call(op_id, sig, node_seq, seq_before, t0 * 1e-9 + offset, overhead)  # type: ignore[misc]
                continue
            if not counting:
                continue
            known = costs.get(sig)
            if known is None:
                known = self._cost(op_id, sig)
            entry, cost, nbytes, backward, written = known
            if entry is None:
                continue
            if (node_seq, variable) != seen:
                seen, node = (node_seq, variable), self._node(node_seq, variable)
            if offset is None:  # a test's clock: each op stamped as it is charged, in turn
                t0, t1 = stamp(), stamp()
                for _ in range(count - 1):
                    s0 = stamp()
                    t1 += stamp() - s0
            elif count == 1:
                t0, t1 = t0 * 1e-9 + offset, t1 * 1e-9 + offset
                if waits:  # it waited for a collective inside
                    t0 = past_hidden_waits(waits, t0, t1)
            else:  # ``count`` repeats: their summed time
                t0 = t0 * 1e-9 + offset
                t1 = t0 + ns * 1e-9
            if backward is None:
                place_at(node, seq_after, entry, t0, t1, (), cost, nbytes, count)
            else:  # a unit: (unit, cost, read, backward cost, written)
                attribution.charge_whole_costed(node, seq_after, entry, t0, t1, cost, backward, nbytes, written,
                                                seq_before, seq_after)
            if ran:
                starts.append(t0)
                ends.append(t1)
        if starts:
            ctx.events.publish_ran_many(starts, ends)

    def _memory_run(self, run: int, node_seq: int, accumulated: int, change: int, peak: int, largest: int,
                    op_id: int, temporaries: int, temporaries_peak: int) -> None:
        """A run of blocks the allocator handed out (and took back) while autograd node
        ``node_seq`` ran (an AccumulateGrad's parameter at TensorImpl ``accumulated``), under
        one state: see recorder.cpp's drain_runs and :meth:`MemorySource.allocated_run`."""
        where = self._ctx.attribution.locate(self._node(node_seq, accumulated))  # as an op's cost
        if where is None:  # not the model's: neither are its releases
            self._not_model.add(run)
            return
        path, phase = where
        name = self._op_names.get(op_id, False)
        if name is False:
            op = self._op(op_id) if op_id >= 0 else None
            name = self._op_names[op_id] = op.entry.name if op is not None else None
        for listener in self._ctx.events.allocations:
            listener.allocated_run(path, phase, change, peak, largest, name, temporaries, temporaries_peak)

    def _node(self, node_seq: int, variable: int):
        """What attribution reads of the autograd node a record ran in (None: none)."""
        if node_seq == NO_NODE:
            return None
        if node_seq == -1:  # AccumulateGrad
            node_seq = ACCUMULATE_GRAD_SEQUENCE_NR
        return NodeSeen(node_seq, self._parameter(variable) if variable else None)

    def _parameter(self, address: int):
        """The model's parameter at TensorImpl ``address`` (the recorder knows an
        AccumulateGrad node's variable by it; attribution looks parameters up by ``id``)."""
        if self._by_address is None:
            params = self._ctx.params
            self._by_address = {tensor_address(p): p for p in params.tensors} if params is not None else {}
        return self._by_address.get(address)

    def _cost(self, op_id: int, sig: int) -> Costed:
        """(entry, cost or None, bytes moved) of a signature, costed on meta tensors of its
        shapes (cached, and learnt across its float scalars), or on an op's own values (not
        cached: ``sig < 0``)."""
        ops = self._tables.ops
        if op_id < len(ops):
            op = ops[op_id]
        else:  # resolving an operator seen first may run torch's own code: not the model's
            with self.unrecorded():
                op = self._op(op_id)
        if op is None:  # an operator torch.ops does not know: not counted
            return Costed(None, None, 0)
        key, inputs, outputs = self._values.get(sig) or (self._rec.signature(sig), None, None)
        if inputs is None and outputs is None and sig >= 0:  # described by its signature alone
            known = self._by_signature(op, key)
        else:
            # kept for a formula that may read values, with a key that describes it ('X' marks
            # a value it cannot): one that read none costs the same on any call of its key
            describes = inputs is not None and sig < 0 and b"X" not in key and not _declared_reading(op)
            unread = self._tables.unread
            if describes and key in unread:
                return unread[key]
            reads = attention_entries.values_read()
            with self.unrecorded():  # the formulas' and the meta tensors' ops are not the model's
                if inputs is None or outputs is None:  # described by the signature: meta tensors of its shapes
                    described = _decode(key, _dtypes(self._rec))
                    inputs = described[0] if inputs is None else inputs
                    outputs = described[1] if outputs is None else outputs
                known = self._evaluate(op, inputs, outputs, sig >= 0)
            if describes and attention_entries.values_read() == reads:
                unread[key] = known
                self._rec.add_unread(key)
            elif inputs is not None:  # costed on its values
                self._on_values.add(op.entry.name)
        if sig >= 0:
            self._tables.costs[sig] = known
        return known

    def _by_signature(self, op: _Op, key: bytes) -> Costed:
        """What signature ``key`` costs: learnt for any value of its float scalars where the
        formula only compares them with constants (see :mod:`.scalars`), else evaluated."""
        masked, floats = split_doubles(key)
        scalars = self._tables.scalars
        if floats:
            known = scalars.find(masked, floats)
            if known is not None:
                return known
        dtypes = _dtypes(self._rec)
        with self.unrecorded():
            known = self._evaluate(op, *_decode(key, dtypes), True)
            if floats and known.entry is not None and not isinstance(known.entry, _Failed):
                scalars.learn(masked, floats, known,
                              lambda values: self._evaluate(op, *_decode(key, dtypes, iter(values)), False))
        return known

    def _evaluate(self, op: _Op, inputs: tuple, outputs: tuple, warn: bool) -> Costed:
        """What ``op`` costs on ``inputs`` and ``outputs`` (``warn``: when its formula wanted
        tensor values it was not given)."""
        out, args, kwargs = op.call_values(inputs, outputs)
        if op.unit is not None:
            return self._cost_unit(op.unit, out, args, kwargs)
        entry = op.entry
        io = entry.io
        nbytes = io(out, args, kwargs) if io is not None else 0
        reads = attention_entries.values_read()
        entry, cost = _costed_as(entry, evaluate(entry, (out, args, kwargs)))
        if warn and attention_entries.values_read() != reads:  # it wanted values it was not given
            _warn_values(entry.name)
        return Costed(entry, cost, nbytes)

    def _cost_unit(self, unit, out, args, kwargs) -> Costed:
        """(unit, cost or None, bytes read, backward cost, bytes written) of a unit's call."""
        bound = unit.bind(args, kwargs)  # None if no schema fits: its formula then fails
        read, written = whole_call_bytes(out, bound)
        entry, cost = _costed_as(unit, evaluate(unit, (out, bound)))
        backward = ZERO_STATS
        if unit.backward is not None:
            backward = self._ctx.attribution.evaluate(unit.backward_entry, out, bound)
        return Costed(entry, cost, read, backward, written)


def _aten_units(registry) -> frozenset:
    """The registry's units the recorder counts whole, per version: those that are builtin aten
    ops (``torch.lstm_cell``...) and the functions that reach one at the same cost (``F.dropout``)."""
    cache = RECORDER.tables.aten_units
    known = cache.get(registry)
    if known is None or known[0] != registry.version:
        units = registry.units()
        aten = {f for f in units if builtin_aten_op(f) is not None}
        known = cache[registry] = (registry.version, frozenset(
            aten | {f for f, unit in units.items() if unit.reaches is not None and unit.reaches in aten}))
    return known[1]


def _declared_reading(op: _Op) -> bool:
    """Whether ``op``'s formula was registered with ``reads_values=True``: it may read values
    its own way, not through :func:`~...attention.entries.read_values` (which is counted)."""
    formulas = (op.entry.formula, op.unit.formula, op.unit.backward) if op.unit is not None else (op.entry.formula,)
    return any(getattr(f, READS_VALUES, False) for f in formulas)


def _dtypes(recorder) -> list:
    """torch.dtype by ScalarType index (signatures name dtypes by index)."""
    known = RECORDER.tables.dtypes
    if not known:
        known.extend(recorder.dtypes())
    return known


def operator_names(registry) -> tuple[tuple, dict]:
    """What the recorder is configured with: ``"ns::name.overload"`` of every operator whose
    formula reads tensor values (the recorder keeps those ops' values), of every operator
    with a formula that costs, and of every operator a unit counts whole (a builtin such as
    ``torch.lstm_cell``); and the unit of each of the last by name."""
    reading, costed = [], []
    for key, formula in registry.ops().items():
        if formula is None or formula is ZERO or isinstance(key, str):
            continue
        names = op_overload_names(key)
        costed.extend(names)
        if reads_values(formula):
            reading.extend(names)
    units: dict = {}
    for function, unit in registry.units().items():
        packet = builtin_aten_op(function)
        if packet is not None:
            names = op_overload_names(packet)
            units.update(dict.fromkeys(names, unit))
            if reads_values(unit.formula) or reads_values(unit.backward):
                reading.extend(names)
            else:  # a PackedSequence's batch sizes are shape information its formula reads
                reading.extend(n for n in names if _takes_batch_sizes(packet, n))
    return (reading, costed, sorted(units)), units


def _takes_batch_sizes(packet, name: str) -> bool:
    overload = getattr(packet, name.rpartition(".")[2])
    return any(a.name == "batch_sizes" for a in op_schema(overload).arguments)


def _warn_values(name: str) -> None:
    if WARNED.first(f"native values {name}"):
        warnings.warn(f"flopsight: the formula for {name} reads tensor values, which the native backend "
                      "does not keep for it: counted on shapes alone; register it with reads_values=True "
                      "(or use backend='python') to count it on values", RuntimeWarning, stacklevel=2)


# -- signatures (recorder.cpp's describe) -------------------------------------------------
_I32, _I64, _F64 = struct.Struct("<i"), struct.Struct("<q"), struct.Struct("<d")
_META = torch.device("meta")


def _decode(key: bytes, dtypes: list, floats: Iterator | None = None) -> tuple[tuple, tuple]:
    """(inputs, outputs) of a signature, tensors as meta tensors of its shapes and dtypes;
    ``floats``: what stands for its float scalars, in turn (else their values)."""
    pos = 4  # the operator's id
    inputs: list = []
    outputs: list = []
    for values in (inputs, outputs):
        (n,) = _I32.unpack_from(key, pos)
        pos += 4
        for _ in range(n):
            value, pos = _value(key, pos, dtypes, floats)
            values.append(value)
    return tuple(inputs), tuple(outputs)


def _value(key: bytes, pos: int, dtypes: list, floats: Iterator | None = None):
    tag = key[pos:pos + 1]
    pos += 1
    if tag == b"t":
        dtype, _device, requires_grad, ndim = struct.unpack_from("<bbbb", key, pos)
        pos += 4
        sizes = struct.unpack_from(f"<{ndim}q", key, pos)
        strides = struct.unpack_from(f"<{ndim}q", key, pos + 8 * ndim)
        pos += 16 * ndim
        t = torch.empty_strided(sizes, strides, dtype=dtypes[dtype], device=_META)
        if requires_grad:
            t.requires_grad_(True)
        return t, pos
    if tag in (b"n", b"u", b"X"):
        return None, pos
    if tag == b"i":
        return _I64.unpack_from(key, pos)[0], pos + 8
    if tag == b"d":
        return (_F64.unpack_from(key, pos)[0] if floats is None else next(floats)), pos + 8
    if tag == b"b":
        return bool(key[pos]), pos + 1
    if tag == b"s":
        end = key.index(b"\0", pos)
        return key[pos:end].decode(), end + 1
    if tag in (b"I", b"D", b"B"):
        (n,) = _I32.unpack_from(key, pos)
        pos += 4
        if tag == b"B":
            return [bool(b) for b in key[pos:pos + n]], pos + n
        values = struct.unpack_from(f"<{n}{'q' if tag == b'I' else 'd'}", key, pos)
        return list(values), pos + 8 * n
    if tag in (b"L", b"T"):
        (n,) = _I32.unpack_from(key, pos)
        pos += 4
        items = []
        for _ in range(n):
            item, pos = _value(key, pos, dtypes, floats)
            items.append(item)
        return (items if tag == b"L" else tuple(items)), pos
    if tag == b"v":
        return _META, pos + 1
    if tag == b"c":
        real, imag = struct.unpack_from("<dd", key, pos)
        return complex(real, imag), pos + 16
    raise ValueError(f"flopsight: unknown value tag {tag!r} in a native signature")
