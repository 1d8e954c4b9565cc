"""Efficiency against the hardware: pure functions of a result and a peak.

Per module (inclusive of its submodules) and phase: achieved FLOPS (FLOPs / latency), the
fraction of the peak, the bytes its ops moved, arithmetic intensity (FLOPs / byte) and the
roofline's verdict, ``"compute"`` or ``"memory"`` bound (intensity against the ridge point,
peak FLOP/s / bandwidth). Model level: MFU (model FLOPs of a training iteration per second,
recompute left out, over the peak), HFU (recompute included) when activation checkpointing
re-ran a forward, and for a forward-only profile the forward's fraction of the peak.
Definitions and the dtype rule are in ``docs/efficiency.md``.

>>> import torch, flopsight
>>> result = flopsight.profile(torch.nn.Linear(64, 64), torch.ones(32, 64), clock=flopsight.FakeClock())
>>> eff = efficiency(result, peak=1e12)
>>> eff.peak.name, eff.dtype, eff.forward_fraction   # 264,192 FLOPs in 1 ms, of a 1 TFLOPS peak
('given', 'fp32', 0.000264192)
>>> eff.model["forward"].bytes, eff.model["forward"].intensity    # 264,192 FLOPs / 33,024 bytes
(33024, 8.0)

The report's wording of these figures is :mod:`flopsight.renderers.efficiency_lines`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..hardware import Peak, canonical_dtype, detect_peak, resolve_peak
from ..result.metadata import Metadata
from ..result.profile_result import ProfileResult
from ..result.tree import PHASES
from .aggregate import has_bytes, inclusive_bytes
from .report_figures import is_training

__all__ = ["PhaseEfficiency", "Efficiency", "efficiency", "efficiency_dict", "peak_dtype"]


@dataclass(frozen=True)
class PhaseEfficiency:
    """One module's (inclusive) figures for one phase; None where they cannot be had: no
    time measured, no peak or bandwidth known, no bytes captured, or nothing moved."""

    flops: int
    latency: float
    bytes: int | None
    flops_per_second: float | None
    fraction_of_peak: float | None
    bytes_per_second: float | None
    fraction_of_bandwidth: float | None
    intensity: float | None
    bound: str | None

    def to_dict(self) -> dict[str, Any]:
        """The derived figures only: FLOPs and latency are in the result's own JSON already,
        and an HTML page of 15,000 modules embeds this once per module and phase."""
        return {
            "flops_per_second": self.flops_per_second,
            "fraction_of_peak": self.fraction_of_peak,
            "bytes": self.bytes,
            "intensity": self.intensity,
            "bound": self.bound,
            "fraction_of_bandwidth": self.fraction_of_bandwidth,
        }


@dataclass(frozen=True)
class Efficiency:
    """What :func:`efficiency` returns. ``peak`` is the peak used (None when none is known:
    ``reason`` says why), ``dtype`` the table column read (``"bf16"``...), ``peak_flops`` its
    FLOP/s and ``ridge`` its ridge point in FLOPs per byte. ``modules[path][phase]`` holds
    each module's figures; ``model`` is the root's. ``mfu``/``hfu`` are set for a training
    profile (``hfu`` only when recompute ran), ``forward_fraction`` for a forward-only one."""

    peak: Peak | None
    dtype: str | None
    peak_flops: float | None
    ridge: float | None
    reason: str | None
    training: bool
    modules: dict[str, dict[str, PhaseEfficiency]]
    model_flops_per_second: float | None = None
    hardware_flops_per_second: float | None = None
    mfu: float | None = None
    hfu: float | None = None
    forward_flops_per_second: float | None = None
    forward_fraction: float | None = None
    #: what the modules' rates divide by: ``"latency"`` (their spans) or ``"device"`` (their
    #: CUDA kernels' GPU time, with ``kernels=True``); the model's figures use wall time
    time_source: str = "latency"

    @property
    def model(self) -> dict[str, PhaseEfficiency]:
        return self.modules.get("", {})


def peak_dtype(metadata: Metadata, dtype: str | None = None, *, convolutions: bool = False) -> str | None:
    """The column of the peak table a result is measured against.

    ``dtype`` given wins. Otherwise the dtype autocast ran the model's ops in, where it was
    on (``autocast_dtype``, read inside the span), else the dtype the result recorded (the
    model's first floating-point parameter). On CUDA, float32 reads tf32 where torch let the
    dominant kind of op run in tf32: ``convolutions`` (most FLOPs were convolutions) under
    cuDNN's tf32, on by default (``cudnn_conv_precision``); matmuls under
    ``float32_matmul_precision`` "high" or "medium" (off by default). None when the result
    records no dtype the table knows.

    >>> peak_dtype(Metadata(dtype="bfloat16")), peak_dtype(Metadata(dtype="float32"), "tf32")
    ('bf16', 'tf32')
    >>> peak_dtype(Metadata(dtype="float32", autocast_dtype="float16", device_type="cuda"))
    'fp16'
    >>> gpu = Metadata(dtype="float32", device_type="cuda", cudnn_conv_precision="tf32")
    >>> peak_dtype(gpu), peak_dtype(gpu, convolutions=True)
    ('fp32', 'tf32')
    """
    if dtype is not None:
        return canonical_dtype(dtype)
    try:
        key = canonical_dtype(getattr(metadata, "autocast_dtype", "") or metadata.dtype)
    except ValueError:
        return None
    if key == "fp32" and metadata.device_type == "cuda":
        if convolutions:
            tf32 = getattr(metadata, "cudnn_conv_precision", "") == "tf32"
        else:
            tf32 = getattr(metadata, "float32_matmul_precision", None) in ("high", "medium")
        if tf32:
            return "tf32"
    return key


#: the operators whose FLOPs are convolutions (cuDNN's: its tf32 setting applies)
_CONVOLUTIONS = ("aten.convolution", "aten.cudnn_convolution", "aten._convolution", "aten.conv")


def mostly_convolutions(result: ProfileResult) -> bool:
    """Whether convolutions did most of the result's FLOPs (every phase)."""
    conv = total = 0
    for stats in result.modules.values():
        for ops in stats.ops.values():
            for name, s in ops.items():
                total += s.flops
                if name.startswith(_CONVOLUTIONS):
                    conv += s.flops
    return total > 0 and 2 * conv > total


def _peak_of(result: ProfileResult, peak: Any) -> tuple[Peak | None, str | None]:
    """The peak to use and, when there is none, why."""
    if peak is not None:
        return resolve_peak(peak), None
    md = result.metadata
    name = getattr(md, "device_name", None)  # recorded by the capture where it knows it
    if name:
        found = detect_peak(name)
        return found, None if found else f"{name!r} is not in flopsight's peak table; pass peak="
    if md.device_type == "cpu":
        return None, "no CPU peak unless measured: pass peak='cpu' (flopsight.hardware.calibrate_cpu)"
    if md.device_type == "meta":
        return None, "the meta device runs nothing"
    return None, f"the name of device {md.device!r} is not recorded in this result; pass peak="


def _ratio(a: float, b: float | None) -> float | None:
    return a / b if b else None


def _phase(flops: int, latency: float, moved: int | None, peak_flops: float | None,
           bandwidth: float | None, ridge: float | None) -> PhaseEfficiency:
    timed = latency > 0
    fps = flops / latency if timed else None
    bps = moved / latency if timed and moved is not None else None
    intensity = flops / moved if moved else None  # nothing moved: intensity undefined, no verdict
    bound = None
    if intensity is not None and ridge is not None:
        bound = "compute" if intensity >= ridge else "memory"
    return PhaseEfficiency(
        flops=flops,
        latency=latency,
        bytes=moved,
        flops_per_second=fps,
        fraction_of_peak=_ratio(fps, peak_flops) if fps is not None else None,
        bytes_per_second=bps,
        fraction_of_bandwidth=_ratio(bps, bandwidth) if bps is not None else None,
        intensity=intensity,
        bound=bound,
    )


def efficiency(result: ProfileResult, peak: Any = None, *, dtype: str | None = None) -> Efficiency:
    """Efficiency of every module and phase, and of the model, against ``peak``.

    ``peak``: None (the device the result recorded, from the table; none for the CPU), a
    number of FLOP/s, a device name, ``"cpu"`` (the measured, cached calibration) or a
    :class:`~flopsight.hardware.Peak`. ``dtype`` overrides :func:`peak_dtype`'s choice.
    """
    if not isinstance(result, ProfileResult):
        raise TypeError(f"result: expected a flopsight ProfileResult, got {type(result).__name__}")
    chosen, reason = _peak_of(result, peak)
    key = peak_dtype(result.metadata, dtype, convolutions=mostly_convolutions(result))
    peak_flops = ridge = None
    if chosen is not None:
        if key is None:
            reason = f"this result records no dtype the peak table knows ({result.metadata.dtype!r}); pass dtype="
        else:
            peak_flops, ridge = chosen.flops_for(key), chosen.ridge(key)
            if peak_flops is None:
                reason = f"{chosen.name} has no {key} peak"
    bandwidth = chosen.memory_bandwidth if chosen is not None else None
    if chosen is not None and bandwidth is None and peak_flops is not None:
        reason = f"no memory bandwidth known for {chosen.name}: no roofline verdict"

    moved = inclusive_bytes(result) if has_bytes(result) else None  # None: saved before bytes were
    # on the meta device nothing runs: its latencies are the profiler's Python time, so no
    # rate or ratio is computed from them (counts, bytes, intensity and verdicts still hold)
    timed = result.metadata.device_type != "meta"
    # with CUDA kernels recorded, a module's rate is its FLOPs over its kernels' GPU time: what
    # the device spent on it, free of the host's launch gaps that its span holds
    on_device = result.kernels is not None and result.kernels.source == "cuda"
    modules: dict[str, dict[str, PhaseEfficiency]] = {}
    for node in result.walk():
        phases = {}
        ran = set(node.inclusive)  # iterating Phases yields only the phases that ran
        for phase in PHASES:
            if phase not in ran:
                continue
            stats = node.inclusive[phase]
            b = moved[node.name].get(phase, 0) if moved is not None else None
            seconds = node.kernel_time.get(phase, 0.0) if on_device else stats.latency
            phases[phase] = _phase(stats.flops, seconds if timed else 0.0, b, peak_flops, bandwidth, ridge)
        modules[node.name] = phases

    training = is_training(result)
    figures: dict[str, Any] = {}
    if not timed:
        pass
    elif training:
        it = result.iteration
        if it.latency > 0:
            figures["model_flops_per_second"] = it.model_flops / it.latency
            figures["hardware_flops_per_second"] = it.flops / it.latency
            figures["mfu"] = _ratio(figures["model_flops_per_second"], peak_flops)
            if it.recompute.flops:
                figures["hfu"] = _ratio(figures["hardware_flops_per_second"], peak_flops)
    else:
        fwd = result.phase_total("forward")
        if fwd.latency > 0:
            figures["forward_flops_per_second"] = fwd.flops / fwd.latency
            figures["forward_fraction"] = _ratio(figures["forward_flops_per_second"], peak_flops)
    return Efficiency(chosen, key, peak_flops, ridge, reason if peak_flops is None or ridge is None else None,
                      training, modules, time_source="device" if on_device else "latency", **figures)


def efficiency_dict(result: ProfileResult, peak: Any = None, *, dtype: str | None = None) -> dict[str, Any] | None:
    """:func:`efficiency` as JSON-ready data (what the JSON and HTML reports embed): the peak
    used (name, dtype, FLOP/s, bandwidth, ridge, source), the model's figures and, per module
    path and phase, ``flops_per_second``, ``fraction_of_peak``, ``bytes``, ``intensity``,
    ``bound`` and ``fraction_of_bandwidth``. None when there is
    nothing to say: no peak, no time measured and no bytes captured (a meta-device count).

    >>> import torch, flopsight
    >>> result = flopsight.profile(torch.nn.Linear(4, 4), torch.ones(2, 4), clock=flopsight.FakeClock())
    >>> d = efficiency_dict(result, peak="NVIDIA A100 40GB")
    >>> d["peak"]["flops_per_second"], d["modules"][""]["forward"]["intensity"]   # 72 FLOPs / 144 bytes
    (19500000000000.0, 0.5)
    """
    eff = efficiency(result, peak, dtype=dtype)
    timed = any(p.latency > 0 for phases in eff.modules.values() for p in phases.values())
    has_bytes = any(p.bytes is not None for phases in eff.modules.values() for p in phases.values())
    if eff.peak is None and not timed and not has_bytes:
        return None
    peak = None
    if eff.peak is not None:
        peak = {**eff.peak.to_dict(), "dtype": eff.dtype, "flops_per_second": eff.peak_flops, "ridge": eff.ridge}
    return {
        "peak": peak,
        "reason": eff.reason,
        "model": {
            "training": eff.training,
            "mfu": eff.mfu,
            "hfu": eff.hfu,
            "model_flops_per_second": eff.model_flops_per_second,
            "hardware_flops_per_second": eff.hardware_flops_per_second,
            "forward_flops_per_second": eff.forward_flops_per_second,
            "forward_fraction_of_peak": eff.forward_fraction,
        },
        "module_time": eff.time_source,
        "modules": {path: {ph: p.to_dict() for ph, p in phases.items()} for path, phases in eff.modules.items()},
    }
