"""Capture source: the GPU's utilisation and memory through NVML, and the caching
allocator's peak, while a CUDA model is profiled (see :mod:`flopsight.result.device_usage`).

NVML is read on a daemon thread every ``interval`` seconds, plus once at stop so that a
short span still gets a sample; ``nvmlInit`` and ``nvmlShutdown`` are paired (NVML counts
them), so a process that uses NVML itself is left as it was. The allocator's statistics
are only read, never reset.

>>> source = DeviceUsageSource(torch.device("cpu"))   # not a GPU: nothing to sample
>>> source.start(None); source.stop(None); source.usage is None
True
"""

from __future__ import annotations

import threading
import time
from typing import Any

import torch

from ...result.device_usage import DeviceUsage

__all__ = ["DeviceUsageSource", "open_nvml", "nvml_unavailable", "handle_by_uuid", "utilization_since"]


def open_nvml(device: torch.device) -> tuple[Any, Any] | None:
    """(pynvml, the NVML handle of ``device``), or None where NVML cannot be used: the
    ``nvidia-ml-py`` package is not installed, or its library or driver is not there
    (:func:`nvml_unavailable` says which)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError: no library, no driver
        return None
    try:
        index = device.index if device.index is not None else torch.cuda.current_device()
        # by UUID: CUDA_VISIBLE_DEVICES renumbers devices for CUDA, not for NVML
        return pynvml, handle_by_uuid(pynvml, str(torch.cuda.get_device_properties(index).uuid))
    except Exception:
        pynvml.nvmlShutdown()
        return None


def handle_by_uuid(pynvml, uuid: str):
    """NVML's handle of the device torch names by ``uuid``: torch gives it without NVML's
    prefix, ``GPU-`` for a whole GPU, ``MIG-`` for a MIG slice, so both are tried.

    >>> class Nvml:
    ...     def nvmlDeviceGetHandleByUUID(self, uuid):
    ...         if uuid != "MIG-1234":
    ...             raise LookupError(uuid)
    ...         return "slice"
    >>> handle_by_uuid(Nvml(), "1234"), handle_by_uuid(Nvml(), "MIG-1234")
    ('slice', 'slice')
    """
    if uuid.startswith(("GPU-", "MIG-")):
        return pynvml.nvmlDeviceGetHandleByUUID(uuid)
    try:
        return pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
    except Exception:
        return pynvml.nvmlDeviceGetHandleByUUID(f"MIG-{uuid}")


def utilization_since(pynvml, handle, since_us: int) -> list[int] | None:
    """The GPU utilisation samples the driver took from ``since_us`` (microseconds since the
    epoch, the driver's clock) on, in %; None where the driver keeps none (a MIG slice).
    The instantaneous reading averages the driver's last period, up to a second before a
    short span began; these fall inside it.

    >>> from types import SimpleNamespace as S
    >>> class Nvml:
    ...     NVML_GPU_UTILIZATION_SAMPLES = 1
    ...     def nvmlDeviceGetSamples(self, handle, kind, since):
    ...         rows = [S(timeStamp=t, sampleValue=S(uiVal=v)) for t, v in [(90, 10), (120, 70), (150, 90)]]
    ...         return 0, [r for r in rows if r.timeStamp > since]
    >>> utilization_since(Nvml(), None, since_us=100)
    [70, 90]
    """
    try:
        _, rows = pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, since_us)
    except Exception:  # not supported here, or nothing sampled yet
        return None
    return [int(r.sampleValue.uiVal) for r in rows if r.timeStamp >= since_us]


def nvml_unavailable() -> str:
    """Why :func:`open_nvml` gave nothing, in the report's words."""
    try:
        import pynvml  # noqa: F401
    except ImportError:
        return "nvidia-ml-py not installed"
    return "NVML's library or driver not found"


class DeviceUsageSource:
    """Samples one CUDA device while the capture runs; ``usage`` after stop (None when the
    device is not a GPU)."""

    def __init__(self, device: torch.device, interval: float = 0.02) -> None:
        self.device = device
        self.interval = interval
        self.usage: DeviceUsage | None = None
        self._nvml: tuple[Any, Any] | None = None  # (pynvml, the device's handle) while sampling
        self._samples: list[tuple[int | None, int]] = []
        self._since_us = 0  # when the span began, on the driver's clock
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._allocated = self._max_allocated = 0

    def start(self, ctx) -> None:
        if self.device.type != "cuda":
            return
        self._allocated = torch.cuda.memory_allocated(self.device)
        self._max_allocated = torch.cuda.max_memory_allocated(self.device)
        self._nvml = open_nvml(self.device)
        self._since_us = int(time.time() * 1e6)
        if self._nvml is not None:
            self._done.clear()
            self._thread = threading.Thread(target=self._run, name="flopsight-nvml", daemon=True)
            self._thread.start()

    def stop(self, ctx) -> None:
        if self.device.type != "cuda":
            return
        peak = torch.cuda.max_memory_allocated(self.device)
        # the process's peak rose during the span: the span's own peak is that, above the start
        allocator_peak = peak - self._allocated if peak > self._max_allocated else None
        total = None
        if self._nvml is not None:
            self._done.set()
            if self._thread is not None:  # (started with NVML opened)
                self._thread.join()
            self._sample()
            pynvml, handle = self._nvml
            try:
                total = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
            except Exception:
                pass
            # the driver's own timestamped samples within the span, where it keeps them
            within = utilization_since(pynvml, handle, self._since_us)
            if within:
                memory = max((m for _, m in self._samples), default=0)
                self._samples = [(u, memory) for u in within]
            pynvml.nvmlShutdown()
            self._nvml = self._thread = None
        self.usage = DeviceUsage.from_samples(str(self.device), self._samples, total, allocator_peak,
                                              None if self._samples else nvml_unavailable())

    def collect(self, ctx) -> DeviceUsage | None:
        return self.usage

    def _run(self) -> None:
        while not self._done.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        if self._nvml is None:  # (never: set while the sampler runs, and when stop takes the last sample)
            return
        pynvml, handle = self._nvml
        try:
            used = int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
        except Exception:  # a transient NVML error: skip this sample
            return
        try:
            utilization = int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except Exception:  # a MIG slice has no utilisation of its own
            utilization = None
        self._samples.append((utilization, used))
