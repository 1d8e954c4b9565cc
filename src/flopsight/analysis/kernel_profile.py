"""The kernel tables of a report (``kernels=True``): per module, with its submodules',
for each phase, its top kernels with their calls, device time and share of the module's.

>>> import torch, flopsight
>>> from flopsight.analysis.report_options import ReportOptions
>>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
>>> p = kernel_profile(flopsight.profile(model, torch.ones(2, 4), kernels=True), ReportOptions())
>>> p.source, [e.path for e in p.entries][:3], "aten::addmm" in [k.name for k in p.entries[0].kernels]
('cpu', ['', '0', '1'], True)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..result.profile_result import ProfileResult
from .collapse import walk_views
from .report_options import ReportOptions

__all__ = ["KernelShare", "KernelEntry", "KernelProfile", "kernel_profile", "inclusive_kernels", "DeviceBusy",
           "device_busy"]

#: kernels per entry when the options name no operator count
DEFAULT_TOP = 5


@dataclass(frozen=True)
class KernelShare:
    """One kernel name in an entry: its launches, device seconds and percent of the entry's."""

    name: str
    calls: int
    seconds: float
    share: float


@dataclass(frozen=True)
class KernelEntry:
    """A module (``path`` ``""``: the whole model; ``count`` siblings summed when collapsed)
    in one ``phase``: how many kernel names ran, their device seconds, the top ones."""

    path: str
    type_name: str
    count: int
    phase: str
    names: int
    seconds: float
    kernels: tuple[KernelShare, ...]


@dataclass(frozen=True)
class KernelProfile:
    """``source`` as in :class:`~flopsight.result.kernels.KernelSummary`; the span's kernel
    seconds and those of no module; the entries, module by module in pre-order."""

    source: str
    top: int
    seconds: float
    unassigned_seconds: float
    entries: tuple[KernelEntry, ...]


@dataclass(frozen=True)
class DeviceBusy:
    """A forward timed as a device's (``timing.method == "device"``): ``busy``, the seconds
    in which a kernel ran; ``forward``, the forward's latency (uninstrumented calls).

    >>> round(DeviceBusy(busy=0.006, forward=0.008).idle_share, 6)
    0.25
    """

    busy: float
    forward: float

    @property
    def idle_share(self) -> float:
        """The share of the forward in which no kernel ran: the device waiting for the host
        (launch-bound work), 0 when the kernels fill it."""
        return max(1.0 - self.busy / self.forward, 0.0) if self.forward > 0 else 0.0


def device_busy(result: ProfileResult) -> DeviceBusy | None:
    """The device's busy time against the forward's, when the forward was timed as a
    device's; None otherwise (a host's latency, or a span's, is not one the kernels ran in)."""
    summary = result.kernels
    if result.metadata.timing.method != "device" or summary is None or summary.busy is None:
        return None
    return DeviceBusy(summary.busy, result.total.forward.latency)


def inclusive_kernels(result: ProfileResult) -> dict[str, dict[str, dict[str, list]]]:
    """Module path -> phase -> kernel name -> [calls, seconds], its submodules' summed in."""
    out: dict[str, dict[str, dict[str, list]]] = {}
    for node in reversed(list(result.walk())):  # post-order: children first
        acc = {phase: {name: [k.calls, k.seconds] for name, k in kernels.items()}
               for phase, kernels in node.record.kernels.items()}
        for child in node.children:
            for phase, kernels in out[child].items():
                mine = acc.setdefault(phase, {})
                for name, (calls, seconds) in kernels.items():
                    k = mine.setdefault(name, [0, 0.0])
                    k[0] += calls
                    k[1] += seconds
        out[node.name] = acc
    return out


def kernel_profile(result: ProfileResult, options: ReportOptions) -> KernelProfile | None:
    """The tables, for modules down to ``module_depth`` and ``detail_depth`` (``collapse``
    sums runs of identical siblings), ``ops`` kernels each (default 5); None when the result
    recorded no kernels."""
    summary = result.kernels
    if summary is None:
        return None
    top = options.ops or DEFAULT_TOP
    tallies = inclusive_kernels(result)
    entries = []
    for view in walk_views(result, collapse=options.collapse, max_depth=options.table_depth):
        for phase in result.phases:
            merged: dict[str, list] = {}
            for node in view.nodes:
                for name, (calls, seconds) in tallies[node.name].get(phase, {}).items():
                    k = merged.setdefault(name, [0, 0.0])
                    k[0] += calls
                    k[1] += seconds
            if not merged:
                continue
            total = sum(k[1] for k in merged.values())
            ranked = sorted(merged.items(), key=lambda kv: (-kv[1][1], kv[0]))[:top]
            shares = tuple(KernelShare(name, calls, seconds, 100 * seconds / total if total > 0 else 0.0)
                           for name, (calls, seconds) in ranked)
            entries.append(KernelEntry(view.path, view.node.type_name, view.count, phase, len(merged), total, shares))
    return KernelProfile(summary.source, top, summary.seconds, summary.unassigned_seconds, tuple(entries))
