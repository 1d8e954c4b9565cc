"""How :func:`flopsight.profile` measures one call: a :class:`TimingPlan`, made by one pure
function (:func:`timing_plan`) from the options and what the model and the clock are.

>>> timing_plan("auto", warm_up=1, repeat=2)
TimingPlan(method='separate', passes=('count', 'timed', 'timed'), compiled=False, ops='timed')
>>> timing_plan("subtract", warm_up=1, repeat=1).passes
('warm', 'counted and timed')
>>> timing_plan("auto", warm_up=2, repeat=1, on_device=True).passes
('count', 'warm', 'kernels', 'events')
>>> timing_plan("auto", warm_up=1, repeat=1, ops_timed=False).ops
'counting'
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TimingPlan", "timing_plan", "PASSES", "compiled_warm_ups"]

#: the passes a plan runs, each a call of the model:
PASSES = {
    "warm": "not measured (a warm-up)",
    "count": "ops counted; its module times unused where the plan times other passes",
    "timed": "module calls timed (and the ops, where the native recorder stamps them), nothing counted",
    "counted and timed": "ops counted and module calls timed, the profiler's own time taken out",
    "kernels": "kernels recorded per module (their device times), nothing counted",
    "events": "nothing observing it but the clock's two stamps around it (the forward's latency)",
}


@dataclass(frozen=True)
class TimingPlan:
    """``method``: how the result says it was timed (``metadata.timing.method``: ``separate``,
    ``subtract``, ``single`` or ``device``); ``passes``: the calls of the model, in order (one
    of :data:`PASSES` each); ``compiled``: a ``torch.compile``'d model, timed as a whole
    through its wrapper (its counts from the eager module); ``ops``: the pass the operators'
    times come from (``metadata.timing.ops``): ``"timed"``, the pass that times the modules
    (an operator's time never exceeds its module's), or ``"counting"``, a counting pass of
    their own."""

    method: str
    passes: tuple[str, ...]
    compiled: bool = False
    ops: str = "timed"

    @property
    def separate(self) -> bool:
        """Whether counts and times come from different passes."""
        return "count" in self.passes

    @property
    def timed(self) -> int:
        """How many passes are timed (each one of the result's samples)."""
        return sum(p in ("timed", "counted and timed", "events") for p in self.passes)


def compiled_warm_ups(warm_up: int) -> int:
    """Untimed calls of a compiled model before its timed ones: ``warm_up``, and at least two
    when there is any (the first compiles; ``mode="reduce-overhead"`` records its CUDA graph
    on the second), so no timed call includes compilation.

    >>> compiled_warm_ups(0), compiled_warm_ups(1), compiled_warm_ups(5)
    (0, 2, 5)
    """
    return max(warm_up, 2) if warm_up else 0


def timing_plan(timing: str, warm_up: int, repeat: int, *, forward: bool = True, compiled: bool = False,
                regions: bool = False, on_device: bool = False, subtracts: bool = True,
                profiler_running: bool = False, ops_timed: bool = True) -> TimingPlan:
    """The plan for ``profile(timing=..., warm_up=..., repeat=...)`` of a model's ``forward``
    (else another method: ``generate``), ``compiled`` as a whole or with compiled ``regions``,
    on a clock ``on_device`` (CUDA events) or one that ``subtracts`` the profiler's own time
    (the host's), while torch.profiler runs or not, where a timed pass can time the operators
    too (``ops_timed``: the native recorder's stamps) or not:

    * ``separate`` (``timing="separate"``, or ``"auto"`` with a warm-up): counted in one pass,
      which doubles as the first warm-up, timed in others with module spans only, and the ops'
      stamps where they can time them (``ops_timed``; else the operators are timed in the
      counting pass: whichever backend counts, the same call is counted); a compiled model
      always (compiled code skips hooks added after it was compiled), after at least two
      warm-ups, so no timed call compiles, its operators timed in the counting pass;
    * ``device``: a forward on CUDA not timed ``"subtract"``, with no compiled region and no
      torch.profiler running: counted, warmed up, one pass recording kernels (their device
      times are each module's), then each timed call uninstrumented, between two events; the
      operators' host times from the counting pass;
    * ``subtract`` (a host clock) or ``single``: counted and timed in the same passes, after
      the warm-ups."""
    if compiled:
        timing = "separate"
    if on_device and timing != "subtract" and forward and not (regions or compiled) and not profiler_running:
        return TimingPlan("device", ("count", *("warm",) * (warm_up - 1), "kernels", *("events",) * repeat),
                          ops="counting")
    warm = compiled_warm_ups(warm_up) if regions or compiled else warm_up
    if timing == "separate" or (timing == "auto" and warm_up >= 1):
        # the counting pass doubles as the first warm-up (not a compiled one's: it ran the eager module)
        warm = warm if regions or compiled else warm - 1
        ops = "timed" if ops_timed and not (regions or compiled) else "counting"
        return TimingPlan("separate", ("count", *("warm",) * warm, *("timed",) * repeat), compiled, ops)
    return TimingPlan("subtract" if subtracts else "single", ("warm",) * warm + ("counted and timed",) * repeat,
                      compiled)
