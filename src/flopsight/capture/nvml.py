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

import torch

from ..result.device_usage import DeviceUsage

__all__ = ["DeviceUsageSource", "open_nvml", "nvml_unavailable"]


def open_nvml(device: torch.device):
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
        uuid = str(torch.cuda.get_device_properties(index).uuid)
        return pynvml, pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    except Exception:
        pynvml.nvmlShutdown()
        return None


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
        self._nvml = None
        self._samples: list[tuple[int, int]] = []
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._allocated = self._max_allocated = 0

    def start(self, ctx) -> None:
        if self.device.type != "cuda":
            return
        self._allocated = torch.cuda.memory_allocated(self.device)
        self._max_allocated = torch.cuda.max_memory_allocated(self.device)
        self._nvml = open_nvml(self.device)
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
            self._thread.join()
            self._sample()
            pynvml, handle = self._nvml
            try:
                total = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
            except Exception:
                pass
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
        pynvml, handle = self._nvml
        try:
            self._samples.append((int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                                  int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)))
        except Exception:  # a transient NVML error: skip this sample
            pass
