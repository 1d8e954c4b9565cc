"""A toy capture source: what adding a measurement to flopsight takes (see test_plan.py).

It subscribes to the op events the counting source publishes and to the module calls (its row
says it needs both: ``needs={"ops", "calls"}``), and collects its own typed part: how many ops
each phase ran, and how many module calls began.
"""

from dataclasses import dataclass, field


@dataclass
class OpsPerPhase:
    ops: dict[str, int] = field(default_factory=dict)
    module_calls: int = 0


class ToySource:
    def __init__(self, ctx):
        self._part = OpsPerPhase()
        ctx.events.ops.append(self._op)
        ctx.events.modules.append(self)

    def start(self, ctx):
        pass

    def stop(self, ctx):
        pass

    def collect(self, ctx) -> OpsPerPhase:
        return self._part

    def _op(self, event):
        if event.phase is not None:
            self._part.ops[event.phase] = self._part.ops.get(event.phase, 0) + 1

    def call_begins(self, record):
        self._part.module_calls += 1

    def call_ends(self, record, args, kwargs, output):
        pass
