"""Capture source: every collective the profiled code issues, seen at the dispatch level.

``torch.distributed``'s calls, its functional collectives, DDP's gradient buckets, FSDP2 and
DeepSpeed ZeRO all reach the dispatcher as ``c10d::*`` or ``_c10d_functional::*`` ops, so
the counting mode sees each one; this source claims those ops (``ctx.events.claims``: free
ops pay one test, and only once a process group exists). Each collective is charged to a
module and phase by :meth:`~.attribution.Attribution.charge_collective`, with its kind, payload
bytes per rank (see :mod:`flopsight.result.communication`) and group size. Its time runs from
issue to completion: the ``Work`` the op returns reports completion from the backend's
thread; a functional collective completes when ``wait_tensor`` returns for its result; a
``Work`` with no future (gloo's reduce-scatter into one tensor), when its wait returns
(:mod:`.work_waits`).

On CUDA the host sees a collective complete as soon as it is queued, so its time is GPU
time instead: a CUDA event recorded on the issuing stream when it is issued, and one on
the stream torch hands the completion callback (made to wait for the collective's
kernels) or, for a functional collective, on the stream that waited for its result.

Under the native backend a claimed op comes to its handler as it returns, before the ops
recorded ahead of it are charged: each handler first does what must happen at once (watch the
``Work``, stamp a completion), then charges it: the attribution object has the backend charge
the ops before it first.

While collectives are in flight, the ops and the calls counted whole that run (heard from
``ctx.events``) are compute overlapping them: the rest of a flight the rank waited for.
"""

from __future__ import annotations

import copy
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from operator import le

import torch

from ..._process import PROCESS
from ..._torch_private import on_work_done, process_group, storage_key
from ...formulas.binding import Binder
from ...formulas.shapes import first_tensor
from ...result.stats import ZERO_STATS
from ..model.wrappers import local_shard
from ..runtime.context import CaptureContext
from ..runtime.events import OpEvent
from .work_waits import TENSOR_WAITS, WAITS

__all__ = ["CollectivesSource", "Communication", "InFlight", "COLLECTIVE_OPS", "payload_bytes", "merged_flights",
           "common_path"]

# op -> (kind, the argument holding this rank's payload, the argument naming the group);
# reduce-scatter's functional form takes the whole input: its share is input / group size
_C10D = {
    "allreduce_": ("all_reduce", "tensors"),
    "allreduce_coalesced_": ("all_reduce", "tensors"),
    "allgather_": ("all_gather", "input_tensors"),
    "_allgather_base_": ("all_gather", "input_tensor"),
    "allgather_coalesced_": ("all_gather", "input_list"),
    "allgather_into_tensor_coalesced_": ("all_gather", "inputs"),
    "reduce_scatter_": ("reduce_scatter", "output_tensors"),
    "_reduce_scatter_base_": ("reduce_scatter", "output_tensor"),
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter", "outputs"),
    "broadcast_": ("broadcast", "tensors"),
    "reduce_": ("reduce", "tensors"),
    "gather_": ("gather", "input_tensors"),
    "scatter_": ("scatter", "output_tensors"),
    "alltoall_": ("all_to_all", "input_tensors"),
    "alltoall_base_": ("all_to_all", "input"),
    "barrier": ("barrier", None),
    "monitored_barrier_": ("barrier", None),
    "send": ("send", "tensors"),
    "recv_": ("recv", "tensors"),
    "recv_any_source_": ("recv", "tensors"),
}
_FUNCTIONAL = {
    "all_reduce": ("all_reduce", "input"),
    "all_reduce_": ("all_reduce", "input"),
    "all_reduce_coalesced": ("all_reduce", "inputs"),
    "all_reduce_coalesced_": ("all_reduce", "inputs"),
    "all_gather_into_tensor": ("all_gather", "input"),
    "all_gather_into_tensor_out": ("all_gather", "input"),
    "all_gather_into_tensor_coalesced": ("all_gather", "inputs"),
    "reduce_scatter_tensor": ("reduce_scatter", "input"),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", "inputs"),
    "all_to_all_single": ("all_to_all", "input"),
    "broadcast": ("broadcast", "input"),
    "broadcast_": ("broadcast", "input"),
    "isend": ("send", "tensor"),
    "irecv": ("recv", "tensor"),
}


def collective_ops() -> dict:
    """op overload -> (kind, payload argument, group argument) of every collective this
    torch build has."""
    ops = {}
    for namespace, table, group_arg in (("c10d", _C10D, "process_group"),
                                        ("_c10d_functional", _FUNCTIONAL, "group_name")):
        ns = getattr(torch.ops, namespace)
        for name, (kind, payload) in table.items():
            try:
                packet = getattr(ns, name)
            except (AttributeError, RuntimeError):  # not in this torch build
                continue
            for overload in packet.overloads():
                ops[getattr(packet, overload)] = (kind, payload, group_arg)
    return ops


def _overloads(namespace: str, name: str) -> tuple:
    try:
        packet = getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        return ()
    return tuple(getattr(packet, o) for o in packet.overloads())


class CollectiveOps:
    """The collective ops, read once per process on first use (once torch.distributed is
    initialised; :data:`PROCESS`'s ``"collective ops"``): each op's (kind, payload argument,
    group argument), the functional collectives' ``wait_tensor``, each op's arguments'
    binder, made at its first call (an op's schema never changes), and the (op, group) whose
    handles have no future (gloo's sends and receives: asking for one raises, and a raised
    error's traceback costs a tenth of a millisecond a call)."""

    def __init__(self) -> None:
        self.kinds: dict = {}
        self.waits: list = []
        self.binders: dict = {}
        self.no_future: set = set()

    def read(self) -> None:
        if not self.kinds:
            self.kinds.update(collective_ops())
            self.waits.extend(_overloads("_c10d_functional", "wait_tensor"))

    def binder(self, op) -> Binder:
        binder = self.binders.get(op)
        if binder is None:
            binder = self.binders[op] = Binder.of_op(op)
        return binder

    def reset(self) -> None:
        self.kinds.clear()
        self.waits.clear()
        self.binders.clear()
        self.no_future.clear()


COLLECTIVE_OPS: CollectiveOps = PROCESS.own("collective ops", CollectiveOps)
#: data movement around collectives that torch.distributed defines in Python when first used
#: (so unknown to the registry when flopsight is imported): the functional collectives'
#: autograd wrapper, FSDP2's copies into and out of its all-gather and reduce-scatter buffers
#: (``chunk_cat_mixed_dtype``: torch 2.15's, for gradients of several dtypes)
FREE_OP_NAMES = (("_c10d_functional", "_wrap_tensor_autograd"), ("fsdp", "all_gather_copy_in"),
                 ("fsdp", "split_with_sizes_copy"), ("fsdp", "chunk_cat"), ("fsdp", "chunk_cat_mixed_dtype"),
                 ("fsdp", "copy_"))


def payload_bytes(value) -> int:
    """Bytes of a tensor, or of every tensor in a (nested) list of them.

    >>> payload_bytes([torch.ones(3), [torch.ones(2, dtype=torch.float64)]])
    28
    """
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(payload_bytes(v) for v in value)
    return 0


class _Call:
    """One collective: where it was charged, its size, its issue and completion times, when
    it began running (``start``: its issue, or the completion of the collective before it in
    its group, see :func:`queue_in_groups`), and how much of its flight the rank spent running
    ops (``overlapped``)."""

    __slots__ = ("kind", "path", "phase", "bytes", "group_size", "issued", "returned", "done", "overlapped",
                 "device", "events", "group", "start", "peer")

    def __init__(self, kind, path, phase, nbytes, group_size, issued, returned, device=None, group=None):
        self.kind, self.path, self.phase, self.bytes, self.group_size = kind, path, phase, nbytes, group_size
        self.issued, self.returned = issued, returned
        self.group = group  # what identifies its process group: its collectives run one after another
        self.start = issued
        self.peer = -1  # a send's or receive's other rank (its rank in the group), else -1
        self.done: float | None = None
        self.overlapped = 0.0
        #: on CUDA: the tensor's device, and [issue event, completion event or None] on its stream
        self.device = device
        self.events: list | None = [_cuda_event(device), None] if device is not None else None

    def placed(self, where: tuple[str, str]) -> None:
        """Charged to module path and phase ``where`` (in order with the ops around it: the
        backend may charge after the span)."""
        self.path, self.phase = where

    def complete(self) -> None:
        if self.done is None:
            self.done = time.perf_counter()
            if self.events is not None:
                # on the tensor's device, whichever thread (the backend's) saw it complete
                self.events[1] = _cuda_event(self.device)

    def resolve_gpu_time(self) -> None:
        """On CUDA, once the device is synchronized: completion is issue plus the GPU time
        between the two events (the host saw the collective complete when it was queued);
        host times where the events cannot be compared (recorded during graph capture)."""
        if self.events is not None and self.events[1] is not None:
            try:
                self.done = self.issued + self.events[0].elapsed_time(self.events[1]) / 1e3
            except RuntimeError:
                pass
            self.events = None

    @property
    def end(self) -> float:
        """Completion (the op's return when completion was never seen)."""
        return self.done if self.done is not None else self.returned

    @property
    def seconds(self) -> float:
        """From when it began running (its issue, or the previous collective's completion in
        its group) to its completion."""
        return max(self.end - self.start, 0.0)


def queue_in_groups(calls: list) -> None:
    """Set each call's ``start``: a group's collectives run one after another (one NCCL
    stream, one gloo queue), so one issued while the one before it in its group still ran
    began when that one completed; its time until then was the queue's, already counted in
    the earlier call (summing issue-to-completion would count it twice).

    >>> class C:
    ...     def __init__(self, group, issued, end):
    ...         self.group, self.issued, self.end, self.start = group, issued, end, issued
    >>> calls = [C("g", 0.0, 4.0), C("g", 1.0, 6.0), C("h", 1.0, 2.0), C("g", 7.0, 8.0)]
    >>> queue_in_groups(calls); [c.start for c in calls]
    [0.0, 4.0, 1.0, 7.0]
    """
    last_end: dict = {}
    for c in sorted(calls, key=lambda c: c.issued):
        previous = last_end.get(c.group)
        c.start = max(c.issued, previous) if previous is not None else c.issued
        last_end[c.group] = max(c.end, previous) if previous is not None else c.end


def _cuda_event(device: torch.device):
    """A timing event recorded now on ``device``'s current stream (not the current device's:
    a rank's tensors on ``cuda:1`` without ``set_device(1)``)."""
    event = torch.cuda.Event(enable_timing=True)
    event.record(torch.cuda.current_stream(device))
    return event


class InFlight:
    """The collectives not yet complete, and the ops the rank ran meanwhile.

    The backend reports each op's host interval here, in order, perhaps after the collective
    completed (the native backend charges ops in batches): the part of it inside a flight is
    compute overlapping communication; the rest of a collective's flight the rank waited for
    it (exposed).
    """

    def __init__(self) -> None:
        self.calls: list[_Call] = []

    def add(self, call: _Call) -> None:
        self.calls.append(call)

    def ran(self, starts: Sequence[float], ends: Sequence[float]) -> None:
        """Ops ran from ``starts[i]`` to ``ends[i]`` (host seconds, in order, one after the
        other) while collectives were in flight: each call's share of them is added to its
        ``overlapped``, from the ops' running total of seconds (two bisections a call, however
        many ops; op by op where they overlap, as two threads' may). A call complete before the
        last op ends is dropped (no later op overlaps it).

        >>> flight = InFlight()
        >>> a, b = _Call("all_reduce", None, None, 0, 0, 1.0, 1.0), _Call("send", None, None, 0, 0, 2.5, 2.5)
        >>> a.done = 3.5
        >>> flight.add(a); flight.add(b)
        >>> flight.ran([0.0, 2.0, 3.0], [1.5, 3.0, 4.0])  # a: 0.5 + 1.0 + 0.5; b: 0.5 + 1.0
        >>> a.overlapped, b.overlapped, flight.calls == [b]
        (2.0, 1.5, True)
        """
        if not starts:
            return
        if len(starts) > 1 and not all(map(le, ends, starts[1:])):  # (ops of two threads): op by op
            for t0, t1 in zip(starts, ends):
                self.ran((t0,), (t1,))
            return
        total = [0.0, *accumulate(e - s for s, e in zip(starts, ends))]  # seconds of the ops before i
        last = ends[-1]
        still = []
        for call in self.calls:
            issued, done = call.issued, call.done
            i = bisect_right(ends, issued)  # the first op that ends after the call was issued
            # and past the last that starts before it completes
            j = len(starts) if done is None else bisect_left(starts, done)
            if i < j:
                # (an op's part before the issue and, of the last, after completion, are not inside it)
                overlap = total[j] - total[i] - max(0.0, issued - starts[i])
                if done is not None:
                    overlap -= max(0.0, ends[j - 1] - done)
                if overlap > 0:
                    call.overlapped += overlap
            if done is None or done > last:  # later ops may still overlap it
                still.append(call)
        self.calls = still


@dataclass
class Communication:
    """The collectives source's part of a raw capture: each collective, resolved (its CUDA
    time read), and its record ``(module path, phase, kind, payload bytes per rank, group
    size, seconds, seconds of it the rank spent running ops, the peer of a send or receive)``;
    the flights merged where they
    overlap, as ``communication`` (their seconds) and ``communication_overlapped`` (the ops'
    seconds during them) spans."""

    calls: list = field(default_factory=list)

    @property
    def records(self) -> list[tuple[str, str, str, int, int, float, float, int]]:
        return [(c.path, c.phase, c.kind, c.bytes, c.group_size, c.seconds, min(c.overlapped, c.seconds), c.peer)
                for c in self.calls]

    def spans(self) -> dict[str, list[float]]:
        flights = merged_flights(self.calls)
        return {"communication": [end - start for start, end, _ in flights],
                "communication_overlapped": [overlapped for _, _, overlapped in flights]}


class CollectivesSource:
    """Records collectives while a process group exists: claims their ops from the counting
    source, and hears every op and call counted whole to credit the overlap."""

    def __init__(self, ctx: CaptureContext):
        self._ctx = ctx
        #: storage of each parameter as this rank holds it (an FSDP2 shard) -> its module's path
        self._param_paths: dict = {}
        #: storage of an FSDP2 all-gather buffer -> the module whose parameters it gathers
        self._gathers: dict = {}
        self.calls: list[_Call] = []
        #: id(result) -> (completes its functional call, the result kept alive until waited for)
        self._awaiting: dict[int, tuple[Callable[[], None], torch.Tensor]] = {}
        #: handles with no future watched until their wait returns (:mod:`.work_waits`)
        self._watched: list[tuple[int, Callable[[], None]]] = []
        self._waits_open = False
        self._issue_time = lambda stamp: stamp
        #: collectives in flight; None until a process group exists
        self.in_flight: InFlight | None = None
        self._hears_ops = False  # whether ops' intervals tell the overlap (host stamps)
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()):
            return
        COLLECTIVE_OPS.read()
        self._param_paths = {storage_key(local_shard(p)): path for p, path in ctx.params.owned}
        self.in_flight = InFlight()
        claims = ctx.events.claims
        for op in COLLECTIVE_OPS.kinds:
            claims[op] = self._collective
        for op in COLLECTIVE_OPS.waits:
            claims[op] = self._wait
        for namespace, name in FREE_OP_NAMES:  # looked up each time: they appear once used
            for op in _overloads(namespace, name):
                claims[op] = self._free
        if ctx.clock.stamp is time.perf_counter:  # host stamps: ops overlapping communication
            # (each op's interval heard only while a collective is in flight: see _ran)
            self._hears_ops = True
        else:  # device or fake stamps: time calls on the host
            self._issue_time = lambda stamp: time.perf_counter()

    def start(self, ctx: CaptureContext) -> None:
        if self.in_flight is not None:  # handles with no future complete when waited for
            WAITS.open()
            TENSOR_WAITS.open(self._tensor_waited)
            self._waits_open = True

    def stop(self, ctx: CaptureContext) -> None:
        self._awaiting.clear()
        if self._waits_open:
            self._waits_open = False
            WAITS.close(self._watched)
            TENSOR_WAITS.close(self._tensor_waited)
            self._watched.clear()

    def collect(self, ctx: CaptureContext) -> Communication | None:
        """The calls, their CUDA times read (one synchronize per device they ran on)."""
        if not self.calls:
            return None
        timed = [c for c in self.calls if c.events is not None]
        if timed:
            for device in {c.device for c in timed}:
                torch.cuda.synchronize(device)
            for c in timed:
                c.resolve_gpu_time()
        if any(c.done is None for c in self.calls):
            # a completion is stamped by a Python callback on the backend's thread, which needs
            # the GIL: let one that is due run before the calls are read
            time.sleep(0.001)
        # copies: a completion stamped later changes none of them, so every figure read from
        # this capture (records, timeline) reads the same times
        calls = [copy.copy(c) for c in self.calls]
        queue_in_groups(calls)
        return Communication(calls)

    def _ran(self, starts: Sequence[float], ends: Sequence[float]) -> None:
        """An op ran while a collective was in flight (subscribed by :meth:`_collective`):
        compute overlapping communication. Once none is in flight, the ops are heard no more
        (a backend then merges their repeats and tells no listener of each)."""
        flight: InFlight = self.in_flight  # type: ignore[assignment]  # (set: the calls are claimed with it)
        flight.ran(starts, ends)
        if not flight.calls:
            self._ctx.events.ran.remove(self._ran)

    def _collective(self, event: OpEvent) -> None:
        func, args, kwargs, out = event.func, event.args, event.kwargs, event.out
        kind, payload, group_arg = COLLECTIVE_OPS.kinds[func]
        # watched before it is charged: a collective may complete while this runs (its completion
        # is stamped then; one complete before it is watched is stamped as it is)
        tensor = first_tensor(args)  # the payload's, or its output's: on the same device
        call = _Call(kind, None, None, 0, 0, self._issue_time(event.t0), self._issue_time(event.t1),
                     device=tensor.device if tensor is not None and tensor.is_cuda else None)
        self.calls.append(call)
        if self.in_flight is not None:  # (set: the collectives are claimed with it)
            self.in_flight.add(call)
            if self._hears_ops and self._ran not in self._ctx.events.ran:
                self._ctx.events.ran.append(self._ran)
        complete = call.complete  # from the backend's thread, or at once
        bound = COLLECTIVE_OPS.binder(func).bind(args, kwargs)
        size, call.group = process_group(bound.get(group_arg))
        if func.namespace == "_c10d_functional":  # done when its result is waited for
            for t in out if isinstance(out, (list, tuple)) else (out,):
                self._awaiting[id(t)] = (complete, t)
        else:
            work = out[-1] if isinstance(out, tuple) else out
            no_future = COLLECTIVE_OPS.no_future
            if (func, call.group) in no_future or not on_work_done(work, complete):
                no_future.add((func, call.group))  # (a handle with no future: done when its wait returns)
                watched = WAITS.watch(work, complete)
                if watched is None:
                    complete()  # no Work to watch: treat the call as synchronous
                else:
                    self._watched.append(watched)
        call.group_size = size or 0
        call.bytes = payload_bytes(bound.get(payload)) if payload else 0
        if func.namespace == "_c10d_functional" and kind == "reduce_scatter" and call.group_size:
            call.bytes //= call.group_size  # the whole input is passed; this rank keeps 1/n of it
        if kind in ("send", "recv"):
            peer = bound.get("dst", bound.get("src", bound.get("peer")))
            call.peer = peer if isinstance(peer, int) else -1
        owner = None
        if kind == "all_gather" and self._gathers and isinstance(bound.get(payload), torch.Tensor):
            # FSDP2 gathers a layer's parameters ahead of its use (prefetching): the layer's
            owner = self._gathers.get(storage_key(bound[payload]))
        self._ctx.attribution.charge_collective(event.entry, event.t0, event.t1, owner, call.placed)

    def _free(self, event: OpEvent) -> None:
        self._ctx.attribution.charge_in_order(event.entry, event.t0, event.t1, (), ZERO_STATS)
        func, args, out = event.func, event.args, event.out
        if func.name().startswith("fsdp::all_gather_copy_in") and self._param_paths:
            # FSDP2 copies a layer's parameter shards into the buffer it then all-gathers
            owners = {self._param_paths.get(storage_key(t)) for t in (args[0] if args else ())} - {None}
            if owners and isinstance(out, tuple) and len(out) == 2:
                self._gathers[storage_key(out[1])] = common_path(owners)

    def _tensor_waited(self, tensor, t0: float, t1: float) -> None:
        """A functional collective's result was waited for from ``t0`` to ``t1``: where no
        claimed ``wait_tensor`` op said so (:meth:`_wait`), inside the op that first used it
        (an ``AsyncCollectiveTensor``'s). The collective completed then, and the wait is not
        that op's time: the backends take it out of the op's (``ctx.hidden_waits``)."""
        complete = self._awaited(tensor)
        if complete is None:  # waited for in view (:meth:`_wait`), or not this session's
            return
        complete()
        if self._hears_ops:  # host stamps, as the ops'
            self._ctx.hidden_waits.append((t0, t1))

    def _awaited(self, tensor) -> Callable[[], None] | None:
        """What completes the functional collective whose result ``tensor`` is, forgotten (None:
        none in flight): the same object, or another on its storage (funcol's autograd wraps
        the result into a new tensor before an ``AsyncCollectiveTensor`` holds it)."""
        awaiting = self._awaiting
        if not awaiting or not isinstance(tensor, torch.Tensor):
            return None
        pending = awaiting.pop(id(tensor), None)
        if pending is not None:
            return pending[0]
        key = storage_key(tensor)
        for ident, (complete, result) in awaiting.items():
            if key is not None and storage_key(result) == key:
                del awaiting[ident]
                return complete
        return None

    def _wait(self, event: OpEvent) -> None:
        tensor = event.args[0] if event.args else event.kwargs.get("tensor")
        complete = self._awaited(tensor)
        if complete is not None:
            complete()
        self._ctx.attribution.charge_in_order(event.entry, event.t0, event.t1, (), ZERO_STATS)


def merged_flights(calls) -> list[tuple[float, float, float]]:
    """The collectives' flights merged where they overlap: (start, end, seconds of ops run
    meanwhile), the last from each call's ``overlapped`` (an op seen by two overlapping
    calls counts once: the largest share is kept).

    >>> class C:
    ...     def __init__(self, a, b, o): self.issued, self.end, self.overlapped = a, b, o
    >>> merged_flights([C(0.0, 2.0, 0.5), C(1.0, 3.0, 1.0), C(5.0, 6.0, 0.0)])
    [(0.0, 3.0, 1.0), (5.0, 6.0, 0.0)]
    """
    merged: list[list[float]] = []
    for c in sorted(calls, key=lambda c: c.issued):
        if merged and c.issued <= merged[-1][1]:
            m = merged[-1]
            m[1] = max(m[1], c.end)
            m[2] = max(m[2], c.overlapped)
        else:
            merged.append([c.issued, c.end, c.overlapped])
    return [(a, b, min(o, b - a)) for a, b, o in merged]


def common_path(paths) -> str:
    """The innermost module that contains every one of ``paths``.

    >>> common_path({"layers.0.attn", "layers.0.mlp"}), common_path({"layers.0", "head"})
    ('layers.0', '')
    """
    parts = [p.split(".") if p else [] for p in paths]
    common = []
    for level in zip(*parts):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return ".".join(common)
