"""How busy the GPU was while profiling: NVML's samples and the caching allocator's peak.

NVML (``nvidia-ml-py``, the ``gpu`` extra) is sampled on a background thread during the
profiled span: ``utilization`` is NVML's own figure, the share of its last sample period
(1/6 s to 1 s, by device) in which a kernel ran, so a span shorter than that period gets a
coarse reading; ``memory_used`` is the whole device's, every process included. Without
NVML these figures are None, ``nvml_unavailable`` says why, and the report says "n/a" with
that reason: nothing is estimated.

``allocator_peak`` is torch's caching allocator's peak during the span above what it held
when the span began: the cross-check of the peak flopsight counts from the tensors'
storages. It is None when it cannot be told without resetting the user's peak statistics
(an earlier peak of the process was higher).

>>> u = DeviceUsage.from_samples("cuda:0", [(40, 1000), (80, 3000)], memory_total=8000)
>>> u.utilization_mean, u.utilization_max, u.memory_used_max
(60.0, 80, 3000)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["DeviceUsage"]


@dataclass(frozen=True)
class DeviceUsage:
    """One GPU over the profiled span (see the module's docstring for each figure)."""

    device: str
    samples: int = 0
    utilization_mean: float | None = None
    utilization_max: int | None = None
    memory_used_max: int | None = None
    memory_total: int | None = None
    allocator_peak: int | None = None
    #: why there are no NVML figures (``"nvidia-ml-py not installed"``...), None when sampled
    nvml_unavailable: str | None = None

    @classmethod
    def from_samples(cls, device: str, samples: Iterable[tuple[int | None, int]], memory_total: int | None = None,
                     allocator_peak: int | None = None, nvml_unavailable: str | None = None) -> DeviceUsage:
        """From NVML samples, each (utilization % or None where NVML has none, device memory
        used in bytes).

        >>> DeviceUsage.from_samples("cuda:0", [(None, 5), (None, 7)]).utilization_mean is None
        True
        """
        samples = list(samples)
        if not samples:
            return cls(device, memory_total=memory_total, allocator_peak=allocator_peak,
                       nvml_unavailable=nvml_unavailable or "no NVML sample during the span")
        utils = [u for u, _ in samples if u is not None]
        mean = round(sum(utils) / len(utils), 1) if utils else None
        return cls(device, len(samples), mean, max(utils) if utils else None,
                   max(m for _, m in samples), memory_total, allocator_peak)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DeviceUsage:
        return cls(**d)
