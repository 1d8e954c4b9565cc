"""The text report, in the DeepSpeed Flops Profiler's layout, line for line.

Summary block, aggregated profile (top module types per depth by params, MACs and
latency) and detailed tree (every module with its stats, then its own ``extra_repr``),
closed by a rule. Labels say ``GPU`` for CUDA runs and ``device`` elsewhere. Differences
from DeepSpeed are fixes: ``module_depth=-1`` includes the deepest level, a too-large
depth prints all of them, ``params of model`` is right without an engine, modules that
never ran are marked, containers (``ModuleList``) show their children's totals, and zero
latency never divides.

>>> import torch, flopsight
>>> from flopsight.renderers.text_renderer import render_text
>>> model = torch.nn.Sequential(torch.nn.Linear(16, 5))
>>> result = flopsight.profile(model, torch.ones(8, 16), clock=flopsight.FakeClock())
>>> print(render_text(result).splitlines()[1])
--------------------------------- flopsight ----------------------------------
"""

from __future__ import annotations

from dataclasses import dataclass

from ..analysis.aggregate import by_depth_and_type
from ..result import ModuleStats, ProfileResult
from ..units import (
    DEFAULT_PRECISION,
    duration_to_string,
    flops_to_string,
    macs_to_string,
    number_to_string,
    params_to_string,
)

__all__ = ["ParallelInfo", "render_text", "render_aggregated"]

RULE = "-" * 78
_LINE = "{:<70}  {:<8}"
_NOTATIONS = """Notations:
data parallel size (dp_size), model parallel size(mp_size),
number of parameters (params), number of multiply-accumulate operations(MACs),
number of floating-point operations (flops), floating-point operations per second (FLOPS),
fwd latency (forward propagation latency), bwd latency (backward propagation latency),
step (weights update latency), iter latency (sum of fwd, bwd and step latency)
"""


@dataclass
class ParallelInfo:
    """Parallelism figures for the summary's header lines (from a DeepSpeed engine)."""

    world_size: int = 1
    dp_size: int = 1
    mp_size: int = 1
    batch_size: int | None = None


def _pct(part: float, whole: float) -> str:
    return f"{round(100 * part / whole, DEFAULT_PRECISION) if whole else 0:g}%"


def _rate(flops: float, seconds: float) -> str:
    return flops_to_string(round(flops / seconds, DEFAULT_PRECISION) if seconds else 0)


def _indent(text: str, spaces: int) -> str:
    """Indent every line but the first (how nn.Module.__repr__ nests children)."""
    first, *rest = text.split("\n")
    return "\n".join([first] + [" " * spaces + line for line in rest])


class _Report:
    def __init__(self, result: ProfileResult, parallel: ParallelInfo | None):
        self.result = result
        self.parallel = parallel
        self.unit = "GPU" if result.metadata.get("device_type") == "cuda" else "device"
        total = result.total
        self.params = total.params
        self.macs = total.forward.macs
        self.flops = total.forward.flops
        self.latency = total.forward.latency
        self.lines: list[str] = []

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)

    def kv(self, label: str, value) -> None:
        self.add(_LINE.format(label, value))

    # -- summary --------------------------------------------------------------------------
    def summary(self, profile_step: int) -> None:
        u = self.unit
        mp = self.parallel.mp_size if self.parallel else 1
        self.add("", " flopsight ".center(78, "-"), f"Profile Summary at step {profile_step}:", _NOTATIONS)
        if self.parallel:
            self.kv("world size: ", self.parallel.world_size)
            self.kv("data parallel size: ", self.parallel.dp_size)
            self.kv("model parallel size: ", mp)
            if self.parallel.batch_size is not None:
                self.kv(f"batch size per {u}: ", self.parallel.batch_size)
        self.kv(f"params per {u}: ", params_to_string(self.params))
        self.kv(f"params of model = params per {u} * mp_size: ", params_to_string(self.params * mp))
        self.kv(f"fwd MACs per {u}: ", macs_to_string(self.macs))
        self.kv(f"fwd flops per {u}: ", number_to_string(self.flops))
        self.kv(f"fwd flops of model = fwd flops per {u} * mp_size: ", number_to_string(self.flops * mp))
        self.kv("fwd latency: ", duration_to_string(self.latency))
        self.kv(
            f"fwd FLOPS per {u} = fwd flops per {u} / fwd latency: ",
            flops_to_string(self.flops / self.latency if self.latency else 0),
        )
        unsupported = self.result.unsupported_ops
        if unsupported:
            listed = ", ".join(f"{name} x{calls}" for name, calls in sorted(unsupported.items()))
            self.kv("ops not counted (no formula): ", listed)
        if self.result.metadata.get("error"):
            self.kv("profile incomplete: ", self.result.metadata["error"])

    # -- aggregated -----------------------------------------------------------------------
    def aggregated(self, module_depth: int, top_modules: int) -> None:
        self.add(f"Top {top_modules} modules in terms of params, MACs or fwd latency at different model depths:")
        for d in by_depth_and_type(self.result, depth=module_depth, top=top_modules):
            self.add(
                f"depth {d.depth}:",
                f"    params      - { {k: params_to_string(v) for k, v in d.params} }",
                f"    MACs        - { {k: macs_to_string(v) for k, v in d.macs} }",
                f"    fwd latency - { {k: duration_to_string(v) for k, v in d.latency} }",
            )

    # -- detailed -------------------------------------------------------------------------
    def stats_line(self, s: ModuleStats) -> str:
        fwd = s.forward
        items = [
            f"{params_to_string(s.params)} = {_pct(s.params, self.params)} Params",
            f"{macs_to_string(fwd.macs)} = {_pct(fwd.macs, self.macs)} MACs",
            f"{duration_to_string(fwd.latency)} = {_pct(fwd.latency, self.latency)} latency",
            _rate(fwd.flops, fwd.latency),
        ]
        if s.ignored:
            items.append("ignored")
        elif not s.ran:
            items.append("not called")
        if s.extra_repr:
            items.append(s.extra_repr)
        return ", ".join(items)

    def module_repr(self, s: ModuleStats) -> str:
        # the shape of nn.Module.__repr__, rendered from the result (the model is not touched)
        extra = self.stats_line(s).split("\n")
        children = []
        for child in s.children:
            key = child.rpartition(".")[2] if s.name else child
            children.append(f"({key}): " + _indent(self.module_repr(self.result.modules[child]), 2))
        if len(extra) == 1 and not children:
            return f"{s.type_name}({extra[0]})"
        return f"{s.type_name}(\n  " + "\n  ".join(extra + children) + "\n)"

    def detailed(self) -> None:
        u = self.unit
        timing = self.result.metadata.get("timing", {})
        how = ", ".join(str(v) for v in (timing.get("method"), timing.get("clock")) if v)
        self.add(
            "",
            f"------------------------------ Detailed Profile per {u} ------------------------------",
            "Each module profile is listed after its name in the following order: ",
            "params, percentage of total params, MACs, percentage of total MACs, fwd latency, "
            "percentage of total fwd latency, fwd FLOPS",
            "",
            "Note: 1. A module can have torch.nn.module or torch.nn.functional to compute logits (e.g. "
            "CrossEntropyLoss). They are not counted as submodules, thus not to be printed out. However they "
            "make up the difference between a parent's MACs (or latency) and the sum of its submodules'.",
            "2. Number of floating-point operations is a theoretical estimation, thus FLOPS computed using that "
            "could be larger than the maximum system throughput.",
            "3. Latencies are measured at each module's forward call and exclude the profiler's own overhead"
            + (f" ({how})." if how else "."),
            "",
            self.module_repr(self.result.total),
        )


def render_text(
    result: ProfileResult,
    *,
    profile_step: int = 1,
    module_depth: int = -1,
    top_modules: int = 1,
    detailed: bool = True,
    parallel: ParallelInfo | None = None,
) -> str:
    """The whole report as one string (ends with a newline)."""
    report = _Report(result, parallel)
    report.summary(profile_step)
    report.add("", f"----------------------------- Aggregated Profile per {report.unit} -----------------------------")
    report.aggregated(module_depth, top_modules)
    if detailed:
        report.detailed()
    report.add(RULE)
    return "\n".join(report.lines) + "\n"


def render_aggregated(result: ProfileResult, *, module_depth: int = -1, top_modules: int = 1) -> str:
    """Only the aggregated profile: the top module types per depth."""
    report = _Report(result, None)
    report.aggregated(module_depth, top_modules)
    return "\n".join(report.lines) + "\n"
