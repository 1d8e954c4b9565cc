"""Capture source: modules counted whole by a per-class rule (``Registry.register_module``).

While a module with a rule runs, the ops of its subtree are not counted; when it returns,
the rule's cost is charged to it (its submodules' calls and latencies are still recorded).
Its backward, if the rule has a backward formula, is charged once when it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..runtime.context import CaptureContext

if TYPE_CHECKING:
    from ...formulas.registry import Unit

__all__ = ["ModuleRules"]


class ModuleRules:
    """Subscribed to the module calls (``ctx.events.modules``): acts on the calls of modules
    that have a rule."""

    def __init__(self, ctx: CaptureContext):
        self._ctx = ctx
        self._registry = ctx.registry
        self._rules: dict[type, Unit | None] = {}  # module type -> its rule or None (cached lookups)
        self._active: dict[int, Unit] = {}  # call record index -> rule of calls in progress
        ctx.events.modules.append(self)

    def start(self, ctx: CaptureContext) -> None:
        pass

    def stop(self, ctx: CaptureContext) -> None:
        ctx.suppressed -= len(self._active)  # calls that never returned (an exception)
        self._active.clear()

    def _rule(self, module_type: type) -> Unit | None:
        try:
            return self._rules[module_type]
        except KeyError:
            rule = self._rules[module_type] = self._registry.module_rule(module_type)
            return rule

    def call_begins(self, rec) -> None:
        if self._active and self._ctx.suppressed:
            return  # inside a call already counted whole
        rule = self._rule(type(rec.module))
        if rule is not None:
            self._active[rec.index] = rule
            self._ctx.suppressed += 1

    def call_ends(self, rec, args, kwargs, output) -> None:
        rule = self._active.pop(rec.index, None)
        if rule is None:
            return
        ctx = self._ctx
        ctx.suppressed -= 1
        if output is None and rec.end is None:
            return  # the call raised: nothing ran to count
        bound = rule.bind(args, kwargs)
        bound = None if bound is None else {"module": rec.module, **bound}
        # no time of its own: the module's span is its latency
        ctx.attribution.charge_whole(rule, rec.start, rec.start, output, bound, rec.seq_start, rec.seq_end)
