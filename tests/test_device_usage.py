"""GPU usage: NVML's samples and the caching allocator's peak, and their absence (never
faked) where there is no GPU or no NVML."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

import flopsight
from flopsight.capture.sources.device_usage import DeviceUsageSource, open_nvml
from flopsight.renderers.text_renderer import render_text
from flopsight.result import ProfileResult
from flopsight.result.device_usage import DeviceUsage


def _cpu_result():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    with flopsight.Profiler(model) as prof:
        model(torch.ones(3, 4))
    return prof.result


def test_from_samples_summarises_by_hand():
    # utilisation samples 30, 50, 100 %: mean (30 + 50 + 100) / 3 = 60, max 100;
    # device memory used 1 GB, 3 GB, 2 GB: max 3 GB
    gb = 1 << 30
    u = DeviceUsage.from_samples("cuda:1", [(30, gb), (50, 3 * gb), (100, 2 * gb)], memory_total=80 * gb,
                                 allocator_peak=512)
    assert (u.samples, u.utilization_mean, u.utilization_max, u.memory_used_max) == (3, 60.0, 100, 3 * gb)
    assert (u.memory_total, u.allocator_peak, u.device) == (80 * gb, 512, "cuda:1")
    empty = DeviceUsage.from_samples("cuda:0", [], allocator_peak=None)
    assert (empty.samples, empty.utilization_mean, empty.memory_used_max) == (0, None, None)
    assert empty.nvml_unavailable == "no NVML sample during the span" and u.nvml_unavailable is None


def test_no_gpu_means_no_usage_and_a_line_that_says_so():
    result = _cpu_result()
    assert result.device_usage is None
    lines = [" ".join(line.split()) for line in render_text(result).splitlines()]
    assert "GPU utilization (NVML): n/a (no CUDA device)" in lines
    assert not any("caching allocator" in line for line in lines)
    source = DeviceUsageSource(torch.device("cpu"))
    source.start(None)
    source.stop(None)
    assert source.usage is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with a GPU has NVML's library")
def test_nvml_without_its_library_is_not_used():
    pytest.importorskip("pynvml")  # installed by the test extra; its library is not on this machine
    import pynvml

    assert open_nvml(torch.device("cuda", 0)) is None
    with pytest.raises(pynvml.NVMLError):  # and nothing was left initialised
        pynvml.nvmlDeviceGetCount()


def test_usage_is_reported_and_saved():
    usage = DeviceUsage("cuda:0", 4, 72.5, 99, 6_000_000_000, 80_000_000_000, 3_000_000)
    result = dataclasses.replace(_cpu_result(), device_usage=usage)
    lines = [" ".join(line.split()) for line in render_text(result).splitlines()]
    assert "GPU utilization (NVML, 4 samples): mean 72.5 %, max 99 %" in lines
    assert "GPU memory used (NVML, whole device, all processes): max 6 GB of 80 GB" in lines
    assert "memory, caching allocator peak while profiling per GPU: 3 MB" in lines
    assert ProfileResult.from_dict(result.to_dict()).device_usage == usage
    # only the allocator known (no NVML): its line, and why there is no utilisation
    cuda = dataclasses.replace(result.metadata, device="cuda:0", device_type="cuda")
    without = DeviceUsage.from_samples("cuda:0", [], allocator_peak=1024, nvml_unavailable="nvidia-ml-py not installed")
    lines = [" ".join(line.split()) for line in
             render_text(dataclasses.replace(result, metadata=cuda, device_usage=without)).splitlines()]
    assert "GPU utilization (NVML): n/a (nvidia-ml-py not installed)" in lines
    assert "memory, caching allocator peak while profiling per GPU: 1.02 KB" in lines
    # how busy the GPU was, in words (issue 37 item 5): NVML's, and what would tell more
    assert "device busy: GPU: NVML utilization not measured; kernels=True measures the share of the span a " \
           "kernel ran in" in lines
    sampled = [" ".join(line.split()) for line in
               render_text(dataclasses.replace(result, metadata=cuda)).splitlines()]
    assert "device busy: GPU: NVML utilization mean 72.5 %, max 99 %; kernels=True measures the share of the " \
           "span a kernel ran in" in sampled
    assert ProfileResult.from_dict(dataclasses.replace(result, device_usage=without).to_dict()).device_usage == without


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_profile_has_allocator_peak():
    model = nn.Linear(256, 256).cuda()
    with flopsight.Profiler(model) as prof:
        model(torch.ones(64, 256, device="cuda"))
    u = prof.result.device_usage
    assert u is not None and u.device.startswith("cuda")


def test_a_mig_slice_has_memory_figures_and_says_it_has_no_utilisation():
    import flopsight
    from flopsight.result.device_usage import DeviceUsage

    result = flopsight.profile(torch.nn.Linear(2, 2), torch.ones(1, 2))
    usage = DeviceUsage.from_samples("cuda:0", [(None, 3 << 20), (None, 5 << 20)], memory_total=10 << 30)
    text = result.updated(device_usage=usage).render("text")
    assert "GPU utilization (NVML):" in text and "n/a (NVML gives none for this device: a MIG slice)" in text
    assert "max 5.24 MB of 10.74 GB" in text
