"""The operators of a timed pass, timed in it: the recorder's stamps only (``recorder.cpp``,
``start(stamps=True)``).

A timing session times the module calls alone, so that nothing else is in their time. The
operator table's times then came from the counting pass, the model's first, cold call, run
apart: an operator there could take longer than the module it ran in took in the timed pass.
Here the recorder also stamps each op it would count (chosen as in a counting session, with
nothing described: no signature, no value), into the stream that carries the module calls;
:class:`~.calls.CallRecords` charges each run of them to the innermost call then running, so
every operator's time comes from the pass that times its module and fits inside it.

The stamps cost each op RecordFunction's own work and the callbacks' (a fraction of a
microsecond), which the module spans would hold: a stamp's cost, measured once per process
(:meth:`~.recorder.Recorder.stamp_cost`), is counted as the profiler's own time for each op
stamped, so every span leaves out that much per op it ran, as it leaves out the profiler's other
work (``benchmarks/overhead.py`` measures what still reaches the forward's latency).
"""

from __future__ import annotations

from ...charging.counts import OpTimes
from .ops import configure_tables, operator_of
from .recorder import RECORDER, see_through_dtensors

__all__ = ["OpStamps"]


class OpStamps:
    """The ops' stamps of one timing session on ``recorder`` (the loaded extension), charged
    by the session's call records (:meth:`add`), named by the ``registry``'s entries at the
    end (:meth:`collect`); ``cost``: the seconds one op's stamps cost it."""

    def __init__(self, recorder, registry):
        self._rec, self._registry = recorder, registry
        self.cost = RECORDER.stamp_cost()  # (measured while no session runs: before this one starts)
        #: (path, phase) -> operator id -> nanoseconds
        self.by_call: dict[tuple[str, str], dict[int, int]] = {}
        self._running = False

    def start(self) -> None:
        self._tables = configure_tables(self._rec, self._registry)
        see_through_dtensors(self._rec)
        self._rec.start(None, True)
        self._running = True

    def stop(self) -> None:
        if self._running:
            self._running = False
            self._rec.stop()

    def add(self, path: str, phase: str, op_id: int, ns: int) -> None:
        """Runs of operator ``op_id``, ``ns`` nanoseconds in all, inside the call of ``path`` in ``phase``."""
        ops = self.by_call.get((path, phase))
        if ops is None:
            ops = self.by_call[(path, phase)] = {}
        ops[op_id] = ops.get(op_id, 0) + ns

    def collect(self) -> OpTimes:
        """The times per (path, phase), per operator as the counting session names it."""
        names: dict[int, str | None] = {}
        seconds: dict[tuple[str, str], dict[str, float]] = {}
        for key, ops in self.by_call.items():
            timed = seconds[key] = {}
            for op_id, ns in ops.items():
                name = names.get(op_id, "")
                if name == "":
                    op = operator_of(self._tables, self._registry, op_id, RECORDER.tables.ops)
                    name = names[op_id] = None if op is None else op.name
                if name is not None:
                    timed[name] = timed.get(name, 0.0) + ns * 1e-9
        return OpTimes(seconds)
