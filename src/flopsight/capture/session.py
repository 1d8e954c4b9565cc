"""One capture: hooks and modes installed on start, removed on stop, raw facts out.

A session can count (install the counting modes), time (module spans), or both. The
profiler runs one counting session and, where it can, a separate timing session, then
merges them with :func:`build_result`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from torch import nn

from .._compat import prime_modes
from ..formulas.registry import ZERO, Cost, Registry
from ..result import ModuleStats, OpStats, PhaseStats, ProfileResult
from .dispatch import CountingMode, UnitMode, warn_formula_failed, warn_unsupported
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
    error: str | None = None


class CaptureSession:
    """Installs the tracker (and, when counting, the modes) between ``start`` and ``stop``."""

    def __init__(
        self,
        infos: dict[str, ModuleInfo],
        *,
        registry: Registry,
        clock: Clock,
        count: bool = True,
        ignore: Callable[[nn.Module], bool] = lambda m: False,
    ):
        self.registry = registry
        self.clock = clock
        self.count = count
        self.phase = "forward"
        self.overhead = 0.0  # host seconds spent inside the profiler's own code
        self.unit_depth = 0  # > 0 while a unit function runs: its aten ops are not counted again
        self.error: str | None = None
        self.first_inputs: tuple | None = None  # (args, kwargs) of the first top-level module call
        self.tracker = ModuleTracker(infos, self, ignore)
        self._modes: list = []
        self._resolved: dict = {}
        self._ops: dict[tuple[str, str], dict[str, list]] = {}
        self._unsupported: Counter = Counter()

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        if self.count:
            prime_modes()
        self.tracker.install()
        if self.count:
            try:
                for mode in (UnitMode(self), CountingMode(self)):
                    mode.__enter__()
                    self._modes.append(mode)
            except BaseException:
                self._exit_modes()
                self.tracker.remove()
                raise

    def stop(self) -> RawCapture:
        """Remove everything that was installed and resolve the measurements."""
        try:
            self._exit_modes()
        finally:
            self.tracker.remove()
        self.clock.finish()
        return self._resolve()

    def snapshot(self) -> RawCapture:
        """What was measured so far, without stopping (completed module calls only)."""
        self.clock.finish()
        return self._resolve()

    def _exit_modes(self) -> None:
        while self._modes:
            self._modes.pop().__exit__(None, None, None)

    # -- recording (called from the modes and hooks) --------------------------------------
    def record_op(self, func, out, args, kwargs, t0, t1) -> None:
        entry = self._resolved.get(func)
        if entry is None:
            entry = self._resolved[func] = self.registry.lookup(func)
        name, formula = entry
        acc = self._accumulator(name)
        acc[0] += 1
        acc[3].append((t0, t1))
        if formula is not ZERO:  # most ops (views, copies) cost nothing: skip the formula
            if "out" in kwargs:  # an out= overload: the result is ``out`` itself
                kwargs = {k: v for k, v in kwargs.items() if k != "out"}
            cost = self._cost(name, formula, out, args, kwargs)
            acc[1] += cost.macs
            acc[2] += cost.flops

    def record_unit(self, unit, out, args, kwargs, t0, t1) -> None:
        name, formula = unit
        acc = self._accumulator(name)
        acc[0] += 1
        acc[3].append((t0, t1))
        cost = self._cost(name, formula, out, args, kwargs)
        acc[1] += cost.macs
        acc[2] += cost.flops

    def _accumulator(self, name: str) -> list:
        """[calls, macs, flops, stamp pairs] of op ``name`` in the current module and phase."""
        stack = self.tracker.stack
        key = (stack[-1].path if stack else "", self.phase)
        ops = self._ops.get(key)
        if ops is None:
            ops = self._ops[key] = {}
        acc = ops.get(name)
        if acc is None:
            acc = ops[name] = [0, 0, 0, []]
        return acc

    def _cost(self, name, formula, out, args, kwargs) -> Cost:
        if formula is None:
            self._unsupported[name] += 1
            if self._unsupported[name] == 1:
                warn_unsupported(name)
            return _FREE
        try:
            return self.registry.cost(formula, name, out, args, kwargs)
        except Exception as e:  # a formula bug must not break the user's model
            self._unsupported[name] += 1
            if self._unsupported[name] == 1:
                warn_formula_failed(name, e)
            return _FREE

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
    def _resolve(self) -> RawCapture:
        raw = RawCapture(unsupported=dict(self._unsupported), error=self.error)
        seconds = self.clock.seconds
        for key, ops in self._ops.items():
            raw.ops[key] = {
                name: OpStats(name, calls, macs, flops, sum(seconds(a, b) for a, b in spans))
                for name, (calls, macs, flops, spans) in ops.items()
            }
        log = self.tracker.log
        subtract = self.clock.subtracts_overhead
        span = [0.0] * len(log)
        for rec in log:
            key = (rec.path, rec.phase)
            raw.calls[key] = raw.calls.get(key, 0) + 1
            if rec.end is not None:
                overhead = rec.ovh_end - rec.ovh_start if subtract else 0.0
                span[rec.index] = max(seconds(rec.start, rec.end) - overhead, 0.0)
        children = [0.0] * len(log)
        for rec in reversed(log):  # children are logged after their parent
            if rec.end is None:
                continue
            key = (rec.path, rec.phase)
            raw.latency[key] = raw.latency.get(key, 0.0) + max(span[rec.index] - children[rec.index], 0.0)
            if rec.parent >= 0:
                children[rec.parent] += span[rec.index]
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
            ops = counts.ops.get((path, phase), {})
            self_phases[phase] = PhaseStats(
                macs=sum(o.macs for o in ops.values()),
                flops=sum(o.flops for o in ops.values()),
                latency=times.latency.get((path, phase), 0.0),
                calls=counts.calls.get((path, phase), times.calls.get((path, phase), 0)),
            )
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
    return ProfileResult(modules, dict(counts.unsupported), meta)
