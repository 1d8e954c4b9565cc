"""One capture: hooks and modes installed on start, removed on stop, raw facts out.

A session can count (install the counting modes), time (module spans), or both. The
profiler runs one counting session and, where it can, a separate timing session, then
merges them with :func:`build_result`.

Phases. Every op is recorded in a phase:

* ``forward`` — outside the backward pass (the default);
* ``backward`` — run by the autograd engine: attributed to the module whose forward created
  the autograd node being executed (its sequence number falls in the range seen around
  that module's call), ``AccumulateGrad`` to the module owning the parameter;
* ``recompute`` — a module forward re-run during backward (activation checkpointing);
* ``step`` — inside ``optimizer.step()`` (seen through the optimizers' global step hooks).
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from .._compat import (
    ACCUMULATE_GRAD_SEQUENCE_NR,
    active_function_modes,
    autograd_sequence_nr,
    current_autograd_node,
    prime_modes,
)
from ..formulas.registry import ZERO, Cost, Registry
from ..result import CallStats, ModuleStats, OpStats, PhaseStats, ProfileResult
from .dispatch import CountingMode, UnitMode, warn_formula_failed, warn_unprofiled_forward, warn_unsupported
from .modules import ModuleInfo, ModuleTracker
from .timing import Clock

__all__ = ["CaptureSession", "RawCapture", "build_result"]

_NOTE_PREFIX = "flopsight: raised in module"
_FREE = Cost()


@dataclass
class RawCapture:
    """What one session measured, keyed by (module path, phase)."""

    ops: dict[tuple[str, str], dict[str, OpStats]] = field(default_factory=dict)
    latency: dict[tuple[str, str], float] = field(default_factory=dict)
    calls: dict[tuple[str, str], int] = field(default_factory=dict)
    unsupported: dict[str, int] = field(default_factory=dict)
    #: wall-clock seconds of each "forward" (top-level call), "backward" (pass), "step" and
    #: "iteration" (start to stop) span, the profiler's own overhead subtracted
    spans: dict[str, list[float]] = field(default_factory=dict)
    #: (macs, flops, op time) summed over the ops of each (module path, phase)
    totals: dict[tuple[str, str], tuple[int, int, float]] = field(default_factory=dict)
    #: per forward call of the model itself: [macs, flops, latency, batch size]
    root_calls: list[CallStats] = field(default_factory=list)
    error: str | None = None


class _UnitCall:
    """A unit function's forward call, kept to charge its backward once, whole."""

    __slots__ = ("seq_start", "seq_end", "path", "name", "cost", "charged")

    def __init__(self, seq_start: int, seq_end: int, path: str, name: str, cost: Cost):
        self.seq_start, self.seq_end, self.path, self.name, self.cost = seq_start, seq_end, path, name, cost
        self.charged = False


class CaptureSession:
    """Installs the tracker (and, when counting, the modes) between ``start`` and ``stop``.

    ``optimizer``: only this optimizer's ``step()`` is the step phase (default: any).
    """

    def __init__(
        self,
        infos: dict[str, ModuleInfo],
        *,
        registry: Registry,
        clock: Clock,
        count: bool = True,
        ignore: Callable[[nn.Module], bool] = lambda m: False,
        optimizer: torch.optim.Optimizer | None = None,
    ):
        self.registry = registry
        self.clock = clock
        self.count = count
        self.optimizer = optimizer
        self.phase = "forward"  # outside the backward pass: "forward", or "step" in optimizer.step()
        self.overhead = 0.0  # host seconds spent inside the profiler's own code
        self.unit_depth = 0  # > 0 while a unit function runs: its aten ops are not counted again
        self.error: str | None = None
        self.first_inputs: tuple | None = None  # (args, kwargs) of the first top-level module call
        self.root_calls: list = []  # call records of the model's own forward calls
        self.tracker = ModuleTracker(infos, self, ignore)
        self._param_owner = {id(p): path for path, info in reversed(infos.items())
                             for p in info.module._parameters.values() if p is not None}
        self._modes: list = []
        self._handles: list = []
        self._resolved: dict = {}
        self._ops: dict[tuple[str, str], dict[str, list]] = {}
        self._root_costs: list[list[int]] = []
        self._unsupported: Counter = Counter()
        self._units: list[_UnitCall] = []
        self._unit_starts: list[int] = []
        self._spans: list[tuple] = []  # (kind, start stamp, end stamp, overhead at start, at end)
        self._open: dict[str, tuple] = {}  # kind -> (start stamp, overhead) of a span in progress
        self._step_depth = 0
        self._units_paused = False
        self._owner_cache = (-1, "")  # (sequence nr, path) of the last node looked up
        self._linear = clock.scale is not None
        self._seq_at_start = 0  # autograd nodes numbered below were created before start()
        self._warned_unprofiled_forward = False

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        if self.count:
            prime_modes()
        self._seq_at_start = autograd_sequence_nr()
        self.tracker.install()
        try:
            self._handles.append(register_optimizer_step_pre_hook(self._step_begins))
            self._handles.append(register_optimizer_step_post_hook(self._step_ends))
            if self.count:
                for mode in (UnitMode(self), CountingMode(self)):
                    mode.__enter__()
                    self._modes.append(mode)
        except BaseException:
            self._uninstall()
            raise
        self._begin("iteration")

    def stop(self) -> RawCapture:
        """Remove everything that was installed and resolve the measurements."""
        self._end("iteration")
        self._uninstall()
        self.clock.finish()
        return self._resolve()

    def snapshot(self) -> RawCapture:
        """What was measured so far, without stopping (completed calls and spans only)."""
        self.clock.finish()
        return self._resolve()

    def _uninstall(self) -> None:
        try:
            self._exit_modes()
        finally:
            self.tracker.remove()
            for handle in self._handles:
                handle.remove()
            self._handles.clear()

    def _exit_modes(self) -> None:
        while self._modes:
            mode = self._modes.pop()
            if not (self._units_paused and isinstance(mode, UnitMode)):
                mode.__exit__(None, None, None)
        self._units_paused = False

    # -- wall-clock spans ----------------------------------------------------------------
    def _begin(self, kind: str) -> None:
        self._open[kind] = (self.clock.stamp(), self.overhead)

    def _end(self, kind: str) -> None:
        opened = self._open.pop(kind, None)
        if opened is not None:
            self._spans.append((kind, opened[0], self.clock.stamp(), opened[1], self.overhead))

    def _step_begins(self, optimizer, args, kwargs) -> None:
        if self.optimizer is None or optimizer is self.optimizer:
            self._step_depth += 1
            if self._step_depth == 1:
                self.phase = "step"
                self._pause_units()
                self._begin("step")

    def _step_ends(self, optimizer, args, kwargs) -> None:
        if (self.optimizer is None or optimizer is self.optimizer) and self._step_depth:
            self._step_depth -= 1
            if self._step_depth == 0:
                self._end("step")
                self._resume_units()
                self.phase = "forward"

    def _pause_units(self) -> None:
        # An optimizer step runs thousands of small ops (one set per parameter) and calls no
        # unit function: taking the function mode off for it saves a Python call per op.
        mode = self._modes[0] if self._modes else None
        if isinstance(mode, UnitMode) and active_function_modes()[-1:] == [mode]:
            mode.__exit__(None, None, None)
            self._units_paused = True

    def _resume_units(self) -> None:
        if self._units_paused and self._modes:
            self._modes[0].__enter__()
        self._units_paused = False

    def run_backward(self, func, args, kwargs):
        """Run ``Tensor.backward`` / ``torch.autograd.backward`` / ``torch.autograd.grad``
        as one timed backward span (nested calls belong to the outer one)."""
        if "backward" in self._open:
            return func(*args, **kwargs)
        outputs = args[0] if args else kwargs.get("tensors", kwargs.get("outputs"))
        outputs = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs or ())
        if outputs and not any(t.requires_grad for t in outputs if isinstance(t, torch.Tensor)):
            raise RuntimeError(
                "flopsight: backward() on a tensor that does not require grad: its forward ran without "
                "autograd (under torch.no_grad() or torch.inference_mode(), or with every parameter frozen), "
                "so there is no backward pass to measure"
            )
        self._begin("backward")
        try:
            return func(*args, **kwargs)
        finally:
            self._end("backward")

    # -- recording (called from the modes and hooks) --------------------------------------
    def _where(self, node) -> tuple[str, str, int]:
        """(module path, phase, root call index or -1) of the op running now."""
        stack = self.tracker.stack
        if node is not None and not (stack and stack[-1].phase == "recompute"):
            return self._backward_owner(node), "backward", -1
        if stack:
            top = stack[-1]
            return top.path, top.phase, stack[0].root_id if top.phase == "forward" else -1
        return "", self.phase, -1

    def _backward_owner(self, node) -> str:
        """Path of the module whose forward created autograd node ``node``."""
        seq = node._sequence_nr()
        if seq == self._owner_cache[0]:
            return self._owner_cache[1]
        if seq == ACCUMULATE_GRAD_SEQUENCE_NR:  # gradient accumulation into a parameter
            return self._param_owner.get(id(node.variable), "")
        path = self.tracker.owner_of(seq)
        if seq < self._seq_at_start and not self._warned_unprofiled_forward:
            self._warned_unprofiled_forward = True
            warn_unprofiled_forward()
        self._owner_cache = (seq, path)
        return path

    def record_op(self, func, out, args, kwargs, t0, t1) -> None:
        # Runs for every op: the forward case is written out inline (no helper calls).
        node = current_autograd_node()
        stack = self.tracker.stack
        if node is None or (stack and stack[-1].phase == "recompute"):
            if stack:
                top = stack[-1]
                path, phase = top.path, top.phase
                root_id = stack[0].root_id if phase == "forward" else -1
            else:
                path, phase, root_id = "", self.phase, -1
        else:
            unit = self._unit_of(node)
            if unit is not None:
                self._charge_unit_backward(unit, t0, t1)
                return
            path, phase, root_id = self._backward_owner(node), "backward", -1
        entry = self._resolved.get(func)
        if entry is None:
            entry = self._resolved[func] = self.registry.resolve(func)
        name, formula = entry.name, entry.formula
        ops = self._ops.get((path, phase))
        if ops is None:
            ops = self._ops[(path, phase)] = {}
        acc = ops.get(name)
        if acc is None:
            acc = ops[name] = [0, 0, 0, 0.0 if self._linear else []]
        acc[0] += 1
        if self._linear:
            acc[3] += t1 - t0
        else:
            acc[3].append((t0, t1))
        if formula is ZERO:  # most ops (views, copies) cost nothing: skip the formula
            return
        if "out" in kwargs:  # an out= overload: the result is ``out`` itself
            kwargs = {k: v for k, v in kwargs.items() if k != "out"}
        cost = self._cost(entry, out, args, kwargs)
        acc[1] += cost.macs
        acc[2] += cost.flops
        if root_id >= 0:
            self._add_root_cost(root_id, cost)

    def record_unit(self, unit, out, args, kwargs, t0, t1, seq_start: int, seq_end: int) -> None:
        name = unit.name
        path, phase, root_id = self._where(current_autograd_node())
        forward, backward = self._cost(unit, out, args, kwargs, pair=True)
        self._tally(path, phase, root_id, name, forward, t0, t1)
        if backward is not None and seq_end > seq_start:  # it made autograd nodes: a backward will run
            self._units.append(_UnitCall(seq_start, seq_end, path, name, backward))
            self._unit_starts.append(seq_start)

    def _unit_of(self, node) -> _UnitCall | None:
        """The unit call whose forward created ``node``, if any."""
        if not self._units:
            return None
        seq = node._sequence_nr()
        i = bisect.bisect_right(self._unit_starts, seq) - 1
        if i >= 0 and seq < self._units[i].seq_end:
            return self._units[i]
        return None

    def _charge_unit_backward(self, unit: _UnitCall, t0, t1) -> None:
        # all the kernels a unit's backward runs are one entry, costed once by the unit's
        # backward formula, whichever kernels this device runs
        acc = self._accumulator(unit.path, "backward", f"{unit.name}.backward")
        if not unit.charged:
            unit.charged = True
            acc[0] += 1
            acc[1] += unit.cost.macs
            acc[2] += unit.cost.flops
        self._add_time(acc, t0, t1)

    def _cost(self, entry, out, args, kwargs, pair: bool = False):
        name = entry.name
        if entry.formula is None:
            self._unsupported[name] += 1
            if self._unsupported[name] == 1:
                warn_unsupported(name)
            return (_FREE, None) if pair else _FREE
        try:
            return entry.cost(out, args, kwargs)
        except Exception as e:  # a formula bug must not break the user's model
            self._unsupported[name] += 1
            if self._unsupported[name] == 1:
                warn_formula_failed(name, e)
            return (_FREE, None) if pair else _FREE

    def _accumulator(self, path: str, phase: str, name: str) -> list:
        """[calls, macs, flops, time] of op ``name`` in a module and phase; time is summed
        stamp differences on a linear clock, else a list of stamp pairs."""
        key = (path, phase)
        ops = self._ops.get(key)
        if ops is None:
            ops = self._ops[key] = {}
        acc = ops.get(name)
        if acc is None:
            acc = ops[name] = [0, 0, 0, 0.0 if self._linear else []]
        return acc

    def _add_time(self, acc: list, t0, t1) -> None:
        if self._linear:
            acc[3] += t1 - t0
        else:
            acc[3].append((t0, t1))

    def _tally(self, path, phase, root_id, name, cost: Cost, t0, t1) -> None:
        acc = self._accumulator(path, phase, name)
        acc[0] += 1
        acc[1] += cost.macs
        acc[2] += cost.flops
        self._add_time(acc, t0, t1)
        if root_id >= 0:
            self._add_root_cost(root_id, cost)

    def _add_root_cost(self, root_id: int, cost: Cost) -> None:
        costs = self._root_costs
        while len(costs) <= root_id:
            costs.append([0, 0])
        costs[root_id][0] += cost.macs
        costs[root_id][1] += cost.flops

    def on_module_error(self, record, exc: BaseException, root: bool) -> None:
        """A module's forward raised: name it on the exception; end capture at the root."""
        notes = getattr(exc, "__notes__", None) or []
        if not any(str(n).startswith(_NOTE_PREFIX) for n in notes):
            note = f"{_NOTE_PREFIX} {record.path or '<root>'!r} ({type(record.module).__name__})"
            if hasattr(exc, "add_note"):
                exc.add_note(note)
            else:  # Python 3.10: the attribute add_note would set
                exc.__notes__ = [*notes, note]
        if root:
            # The model call failed: stop counting now so no mode outlives the error, even
            # if the caller never reaches stop(). Hooks are removed by stop().
            self.error = f"{type(exc).__name__} raised in module {record.path or '<root>'!r}"
            self._exit_modes()

    # -- resolution ---------------------------------------------------------------------
    def _seconds(self, start, end, ovh_start: float, ovh_end: float) -> float:
        """A span in seconds, minus the profiler's own time inside it (where measurable)."""
        overhead = ovh_end - ovh_start if self.clock.subtracts_overhead else 0.0
        return max(self.clock.seconds(start, end) - overhead, 0.0)

    def _resolve(self) -> RawCapture:
        raw = RawCapture(unsupported=dict(self._unsupported), error=self.error)
        seconds, scale = self.clock.seconds, self.clock.scale
        for key, ops in self._ops.items():
            stats, macs_sum, flops_sum, time_sum = {}, 0, 0, 0.0
            for name, (calls, macs, flops, spent) in ops.items():
                spent = spent * scale if scale is not None else sum(seconds(a, b) for a, b in spent)
                stats[name] = OpStats(name, calls, macs, flops, spent)
                macs_sum, flops_sum, time_sum = macs_sum + macs, flops_sum + flops, time_sum + spent
            raw.ops[key] = stats
            raw.totals[key] = (macs_sum, flops_sum, time_sum)
        log = self.tracker.log
        span = [0.0] * len(log)
        for rec in log:
            key = (rec.path, rec.phase)
            raw.calls[key] = raw.calls.get(key, 0) + 1
            if rec.end is not None:
                span[rec.index] = self._seconds(rec.start, rec.end, rec.ovh_start, rec.ovh_end)
        children = [0.0] * len(log)
        for rec in reversed(log):  # children are logged after their parent
            if rec.end is None:
                continue
            key = (rec.path, rec.phase)
            raw.latency[key] = raw.latency.get(key, 0.0) + max(span[rec.index] - children[rec.index], 0.0)
            if rec.parent >= 0:
                children[rec.parent] += span[rec.index]
        for i, rec in enumerate(self.root_calls):
            macs, flops = self._root_costs[i] if i < len(self._root_costs) else (0, 0)
            raw.root_calls.append(CallStats(macs, flops, span[rec.index], rec.batch_size))
        # forward wall time: the top-level forward calls (the model, or whatever modules
        # of it the caller ran directly)
        raw.spans["forward"] = [span[r.index] for r in log if r.parent < 0 and r.phase == "forward"]
        for kind, start, end, ovh_start, ovh_end in self._spans:
            raw.spans.setdefault(kind, []).append(self._seconds(start, end, ovh_start, ovh_end))
        return raw


def build_result(
    infos: dict[str, ModuleInfo],
    counts: RawCapture,
    times: RawCapture | None = None,
    *,
    ignored: Callable[[nn.Module], bool] = lambda m: False,
    metadata: dict | None = None,
) -> ProfileResult:
    """Merge a counting capture (and optionally a separate timing capture) into a result."""
    times = times or counts
    modules: dict[str, ModuleStats] = {}
    keys = set(counts.ops) | set(counts.calls) | set(times.latency)
    phases_of: dict[str, set[str]] = {}
    for path, phase in keys:
        phases_of.setdefault(path, set()).add(phase)
    for path, info in infos.items():
        self_phases, self_ops = {}, {}
        for phase in sorted(phases_of.get(path, ())):
            key = (path, phase)
            macs, flops, op_time = counts.totals.get(key, (0, 0, 0.0))
            self_phases[phase] = PhaseStats(
                macs=macs,
                flops=flops,
                # module spans for phases that run modules; the ops' own time for the others
                latency=times.latency.get(key, 0.0) if phase in ("forward", "recompute") else op_time,
                calls=counts.calls.get(key, times.calls.get(key, 0)),
            )
            ops = counts.ops.get(key)
            if ops:
                self_ops[phase] = ops
        modules[path] = ModuleStats(
            name=path,
            type_name=info.type_name,
            depth=info.depth,
            parent=info.parent,
            children=list(info.children),
            params=info.params,
            params_trainable=info.params_trainable,
            extra_repr=info.extra_repr,
            shared_with=list(info.shared_with),
            ignored=bool(ignored(info.module)),
            self_phases=self_phases,
            self_ops=self_ops,
        )
    meta = dict(metadata or {})
    if counts.error or (times is not counts and times.error):
        meta["error"] = counts.error or times.error
    root_calls = list(counts.root_calls)
    spans = dict(counts.spans)
    if times is not counts:  # latencies from the timing pass, counts from the counting pass
        for i, timed in enumerate(times.root_calls[: len(root_calls)]):
            c = root_calls[i]
            root_calls[i] = CallStats(c.macs, c.flops, timed.latency, c.batch_size)
        spans.update(times.spans)
    return ProfileResult(modules, dict(counts.unsupported), meta, spans=spans, root_calls=root_calls)
