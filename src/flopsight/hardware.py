"""What the hardware can do: dense peak FLOP/s per dtype and memory bandwidth.

A table of accelerators, each entry with its source (:data:`PEAKS`); detection from the name
torch gives a device (:func:`detect_peak`); a peak the user gives (:func:`resolve_peak`: a
number of FLOP/s, a name from the table, or a :class:`Peak`); and, for the CPU, a short
measured calibration, cached (:func:`calibrate_cpu`). An unknown device gets no peak
(None), never a guess. The table, its sources and the rules are in ``docs/efficiency.md``.

>>> peak = detect_peak("NVIDIA H100 80GB HBM3")
>>> peak.name, peak.flops_for("bf16"), peak.memory_bandwidth
('NVIDIA H100 SXM', 989500000000000.0, 3350000000000.0)
>>> detect_peak("NVIDIA GeForce RTX 4090") is None   # not in the table: no MFU rather than a guess
True
"""

from __future__ import annotations

import datetime
import difflib
import json
import os
import platform
import re
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DTYPES",
    "Peak",
    "PEAKS",
    "canonical_dtype",
    "detect_peak",
    "lookup_peak",
    "resolve_peak",
    "device_name",
    "device_peak",
    "calibrate_cpu",
    "cpu_cache_key",
    "cpu_cache_path",
]

#: The dtypes a peak is given for, in table order.
DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")

T = 1e12  # the datasheets give TFLOPS (TOPS for int8) and GB/s or TB/s


@dataclass(frozen=True, eq=True)
class Peak:
    """A device's dense peak: FLOP/s (OP/s for int8) per dtype (None where the device has
    no such throughput or its datasheet gives none) and memory bandwidth in bytes/s.

    >>> p = Peak("my chip", {"bf16": 100e12}, memory_bandwidth=1e12, source="my notes")
    >>> p.flops_for("bf16"), p.flops_for("fp8"), p.ridge("bf16")
    (100000000000000.0, None, 100.0)
    """

    name: str
    flops: Mapping[str, float | None]
    memory_bandwidth: float | None = None
    source: str = ""
    #: how the figures were read from the source (halved sparsity figures, per-die halves...)
    note: str = ""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.flops) - set(DTYPES))
        if unknown:
            raise ValueError(f"flops: unknown dtype(s) {', '.join(unknown)}; expected keys among {', '.join(DTYPES)}")
        bad = [d for d, v in self.flops.items() if v is not None and not (isinstance(v, (int, float)) and v > 0)]
        if bad:
            raise ValueError(f"flops: expected a positive number or None for {bad[0]!r}, got {self.flops[bad[0]]!r}")
        bw = self.memory_bandwidth
        if bw is not None and not (isinstance(bw, (int, float)) and bw > 0):
            raise ValueError(f"memory_bandwidth: expected a positive number of bytes/s or None, got {bw!r}")
        object.__setattr__(self, "flops", {d: (float(v) if v is not None else None) for d, v in self.flops.items()})

    def flops_for(self, dtype: str) -> float | None:
        """The dense peak for ``dtype`` (a name :func:`canonical_dtype` reads), None if none."""
        return self.flops.get(canonical_dtype(dtype))

    def ridge(self, dtype: str) -> float | None:
        """The roofline's ridge point, FLOPs per byte: above it a kernel is compute-bound."""
        flops = self.flops_for(dtype)
        if flops is None or not self.memory_bandwidth:
            return None
        return flops / self.memory_bandwidth

    @classmethod
    def given(cls, flops_per_second: float, memory_bandwidth: float | None = None, name: str = "given") -> Peak:
        """A peak the user states: the same FLOP/s whatever the dtype."""
        if (isinstance(flops_per_second, bool) or not isinstance(flops_per_second, (int, float))
                or flops_per_second <= 0):
            raise ValueError(f"peak: expected a positive number of FLOP/s, got {flops_per_second!r}")
        return cls(name, {d: float(flops_per_second) for d in DTYPES}, memory_bandwidth, source="given by the user")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "flops": dict(self.flops), "memory_bandwidth": self.memory_bandwidth,
                "source": self.source, "note": self.note}


# -- the table ------------------------------------------------------------------------------
_HALVED = "the datasheet gives only figures with 2:4 sparsity for tf32/bf16/fp16/fp8/int8: halved here"

_V100 = "NVIDIA Tesla V100 datasheet (https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf)"
_A100 = "NVIDIA A100 datasheet (https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf)"
_A10 = "NVIDIA A10 datasheet (https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/datasheet-new/nvidia-a10-datasheet.pdf)"
_L4 = "NVIDIA L4 datasheet (https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet)"
_L40S = "NVIDIA L40S datasheet (https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413)"
_H100 = "NVIDIA H100 Tensor Core GPU datasheet (https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet)"
_H200 = "NVIDIA H200 datasheet (https://www.nvidia.com/en-us/data-center/h200/)"
_B200 = "NVIDIA HGX platform specifications, HGX B200 per GPU (https://www.nvidia.com/en-us/data-center/hgx/)"
_MI250X = "AMD Instinct MI250X datasheet (https://www.amd.com/content/dam/amd/en/documents/instinct-business-docs/product-briefs/instinct-mi250x-datasheet.pdf)"
_MI300X = "AMD Instinct MI300X datasheet (https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf)"


def _nv(name, fp64, fp32, tf32, bf16, fp16, fp8, int8, bandwidth_tb, source, note=""):
    figures = dict(zip(DTYPES, (fp64, fp32, tf32, bf16, fp16, fp8, int8)))
    # rounded to whole FLOP/s: 362.05 * 1e12 is not exact in binary
    return Peak(name, {d: (float(round(v * T)) if v is not None else None) for d, v in figures.items()},
                float(round(bandwidth_tb * T)), source, note)


_FP64_TC = "fp64 is the FP64 Tensor Core figure (what DGEMM reaches)"

#: Every entry, by name. Figures in TFLOPS (TOPS for int8) as the datasheet prints them;
#: where it prints "X | Y*" (dense | with sparsity), X; where it prints only "Y*", Y / 2.
PEAKS: dict[str, Peak] = {p.name: p for p in (
    #    name                  fp64   fp32   tf32    bf16    fp16    fp8     int8    TB/s
    _nv("NVIDIA V100 SXM2",    7.8,   15.7,  None,   None,   125,    None,   None,   0.9, _V100,
        "fp16 is the Tensor Core figure; Volta has no tf32, bf16, fp8 or int8 tensor cores"),
    _nv("NVIDIA V100 PCIe",    7,     14,    None,   None,   112,    None,   None,   0.9, _V100,
        "fp16 is the Tensor Core figure; Volta has no tf32, bf16, fp8 or int8 tensor cores"),
    _nv("NVIDIA A100 40GB",    19.5,  19.5,  156,    312,    312,    None,   624,    1.555, _A100,
        f"SXM4 and PCIe: the same figures; dense column of 'X | Y*'; {_FP64_TC}"),
    _nv("NVIDIA A100 80GB SXM", 19.5, 19.5,  156,    312,    312,    None,   624,    2.039, _A100,
        f"dense column of 'X | Y*'; {_FP64_TC}"),
    _nv("NVIDIA A100 80GB PCIe", 19.5, 19.5, 156,    312,    312,    None,   624,    1.935, _A100,
        f"dense column of 'X | Y*'; {_FP64_TC}"),
    _nv("NVIDIA A10",          None,  31.2,  62.5,   125,    125,    None,   250,    0.6, _A10,
        "dense column of 'X | Y*'; no fp64 figure in the datasheet"),
    _nv("NVIDIA L4",           None,  30.3,  60,     121,    121,    242.5,  242.5,  0.3, _L4,
        f"{_HALVED}; no fp64 figure in the datasheet"),
    _nv("NVIDIA L40S",         None,  91.6,  183,    362.05, 362.05, 733,    733,    0.864, _L40S,
        "dense column of 'X | Y*'; no fp64 figure in the datasheet"),
    _nv("NVIDIA H100 SXM",     67,    67,    494.5,  989.5,  989.5,  1979,   1979,   3.35, _H100,
        f"{_HALVED}; {_FP64_TC}"),
    _nv("NVIDIA H100 PCIe",    51,    51,    378,    756.5,  756.5,  1513,   1513,   2.0, _H100,
        f"the H100 PCIe column of the 2022 edition; {_HALVED}; {_FP64_TC}"),
    _nv("NVIDIA H200",         67,    67,    494.5,  989.5,  989.5,  1979,   1979,   4.8, _H200,
        f"H200 SXM; {_HALVED}; {_FP64_TC}"),
    _nv("NVIDIA B200",         37,    75,    1100,   2250,   2250,   4500,   4500,   7.7, _B200,
        "HGX B200 per GPU (180 GB); the page gives only figures with sparsity for tf32/bf16/fp16/fp8/int8: "
        "halved here"),
    # torch sees each of the MI250X's two dies (GCDs) as its own device: the datasheet's
    # per-module figures (fp64/fp32 matrix 95.7, fp16/bf16 383, int8 383, 3.2768 TB/s) halved
    _nv("AMD Instinct MI250X (one GCD)", 47.85, 47.85, None, 191.5, 191.5, None,  191.5,  1.6384, _MI250X,
        "per graphics compute die: torch exposes each of the module's two GCDs as a device, so the "
        "module's figures are halved; fp64 and fp32 are the matrix-core figures; no tf32 or fp8"),
    _nv("AMD Instinct MI300X", 163.4, 163.4, 653.7,  1307.4, 1307.4, 2614.9, 2614.9, 5.3, _MI300X,
        "dense figures (the datasheet gives both); fp64 and fp32 are the matrix-core figures"),
)}

# Device names as torch.cuda.get_device_name() gives them, normalised by _normalise (lower
# case, "-"/"_" as spaces, the vendor words dropped). Matched whole: a name that only
# resembles one (an "A10G", an "H100 NVL", "MI250X/MI250", which can be either chip) is
# unknown, so it gets no MFU rather than a guess.
_DEVICE_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"v100 sxm2( (16|32)gb)?", "NVIDIA V100 SXM2"),
    (r"v100 pcie( (16|32)gb)?", "NVIDIA V100 PCIe"),
    (r"a100 (sxm4?|pcie) 40gb|a100 40gb( (sxm4?|pcie))?", "NVIDIA A100 40GB"),
    (r"a100 sxm4? 80gb|a100 80gb( sxm4?)?", "NVIDIA A100 80GB SXM"),  # "A100-SXM-80GB" too
    (r"a100 80gb pcie|a100 pcie 80gb", "NVIDIA A100 80GB PCIe"),
    (r"a10", "NVIDIA A10"),
    (r"l4", "NVIDIA L4"),
    (r"l40s", "NVIDIA L40S"),
    (r"h100 80gb hbm3|h100 sxm5?( 80gb( hbm3)?)?", "NVIDIA H100 SXM"),
    (r"h100 pcie( 80gb)?", "NVIDIA H100 PCIe"),
    (r"h200( sxm)?( 141gb)?", "NVIDIA H200"),
    (r"b200", "NVIDIA B200"),
    (r"mi250x", "AMD Instinct MI250X (one GCD)"),
    (r"mi300x( vf)?", "AMD Instinct MI300X"),
)


def _normalise(name: str) -> str:
    words = re.sub(r"[-_\s]+", " ", name.strip().lower()).split()
    return " ".join(w for w in words if w not in ("nvidia", "tesla", "amd", "instinct", "radeon"))


_BY_NORMALISED_NAME = {_normalise(name): peak for name, peak in PEAKS.items()}


def detect_peak(name: str) -> Peak | None:
    """The table's entry for a device name as ``torch.cuda.get_device_name`` gives it (or
    an entry's own name); None for a device the table does not hold.

    >>> detect_peak("NVIDIA A100-SXM4-40GB").name, detect_peak("AMD Instinct MI300X").name
    ('NVIDIA A100 40GB', 'AMD Instinct MI300X')
    >>> detect_peak("NVIDIA A10G") is None, detect_peak("AMD Instinct MI250X/MI250") is None
    (True, True)
    """
    if not isinstance(name, str):
        raise TypeError(f"name: expected a device name (str), got {type(name).__name__}")
    key = _normalise(name)
    if key in _BY_NORMALISED_NAME:
        return _BY_NORMALISED_NAME[key]
    for pattern, entry in _DEVICE_PATTERNS:
        if re.fullmatch(pattern, key):
            return PEAKS[entry]
    return None


def lookup_peak(name: str) -> Peak:
    """Like :func:`detect_peak`, for a name the user gave: an unknown name raises, naming
    the closest entries."""
    peak = detect_peak(name)
    if peak is None:
        close = difflib.get_close_matches(name, list(PEAKS), n=3, cutoff=0.4)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(f"peak: no device named {name!r} in flopsight's table{hint} "
                         f"(known: {', '.join(PEAKS)}; or give a number of FLOP/s or a flopsight.hardware.Peak)")
    return peak


def resolve_peak(peak: Any) -> Peak | None:
    """A peak given by the user, as a :class:`Peak`: None stays None; a number is FLOP/s for
    any dtype; a string names a device (the table's name or torch's) or is ``"cpu"`` (the
    measured, cached CPU calibration, :func:`calibrate_cpu`); a :class:`Peak` is used as is.

    >>> resolve_peak(312e12).flops_for("bf16"), resolve_peak("NVIDIA A100 80GB PCIe").memory_bandwidth
    (312000000000000.0, 1935000000000.0)
    """
    if peak is None or isinstance(peak, Peak):
        return peak
    if isinstance(peak, str):
        return calibrate_cpu() if peak.strip().lower() == "cpu" else lookup_peak(peak)
    if isinstance(peak, (int, float)) and not isinstance(peak, bool):
        return Peak.given(peak)
    raise TypeError(f"peak: expected None, a number of FLOP/s, a device name or a flopsight.hardware.Peak, "
                    f"got {type(peak).__name__}")


def check_peak(peak: Any) -> Any:
    """``peak`` as given, once :func:`resolve_peak` would take it (raising, naming ``peak``,
    if not); ``"cpu"`` is not measured here, only where it is used: front-ends call this
    before the model runs.

    >>> check_peak("cpu"), check_peak(1e12)
    ('cpu', 1000000000000.0)
    """
    if not (isinstance(peak, str) and peak.strip().lower() == "cpu"):
        resolve_peak(peak)
    return peak


def canonical_dtype(dtype: Any) -> str:
    """The table's key for a dtype: ``torch.bfloat16``, ``"bfloat16"`` and ``"bf16"`` all
    read ``"bf16"``; every float8 variant is ``"fp8"``; unknown names raise.

    >>> canonical_dtype("float32"), canonical_dtype("torch.float16"), canonical_dtype("float8_e4m3fn")
    ('fp32', 'fp16', 'fp8')
    """
    name = str(dtype).replace("torch.", "").strip().lower()
    if name in DTYPES:
        return name
    if name.startswith("float8") or name.startswith("fp8"):
        return "fp8"
    aliases = {"float64": "fp64", "double": "fp64", "float32": "fp32", "float": "fp32", "bfloat16": "bf16",
               "float16": "fp16", "half": "fp16", "int8": "int8", "uint8": "int8", "tf32": "tf32"}
    if name in aliases:
        return aliases[name]
    raise ValueError(f"dtype: expected one of {', '.join(DTYPES)} or a torch floating dtype name, got {dtype!r}")


# -- live devices ---------------------------------------------------------------------------
def device_name(device: Any = None) -> str | None:
    """The marketing name of a live accelerator (``torch.cuda.get_device_name``; ROCm's too),
    None for the CPU, the meta device, or CUDA not available. For the capture to record."""
    import torch

    dev = torch.device(device) if device is not None else (
        torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu"))
    if dev.type != "cuda" or not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(dev)


def device_peak(device: Any = None) -> Peak | None:
    """The table's peak for a live accelerator (None for an unknown one, the CPU and meta:
    the CPU's is measured only when asked, :func:`calibrate_cpu`)."""
    name = device_name(device)
    return detect_peak(name) if name else None


# -- the CPU: measured, cached -------------------------------------------------------------
_CPU_DTYPES = ("fp64", "fp32", "bf16", "fp16")
_CACHE_VERSION = 1


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_cache_key(torch_version: str | None = None) -> str:
    """What a CPU calibration depends on: the CPU model, its logical cores, the threads torch
    uses and the torch version (a new torch can bring new matmul kernels).

    >>> cpu_cache_key("2.0.0") != cpu_cache_key("2.1.0")
    True
    """
    import torch

    version = torch_version if torch_version is not None else torch.__version__
    return f"{_cpu_model()} | {os.cpu_count()} cpus | {torch.get_num_threads()} threads | torch {version}"


def cpu_cache_path(cache_dir: str | os.PathLike | None = None) -> Path:
    """Where calibrations are kept: ``cache_dir``, else ``$XDG_CACHE_HOME/flopsight``, else
    ``~/.cache/flopsight``; one JSON file, an entry per :func:`cpu_cache_key`."""
    if cache_dir is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        cache_dir = os.path.join(base, "flopsight")
    return Path(cache_dir) / "cpu_peaks.json"


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != _CACHE_VERSION or not isinstance(data.get("entries"), dict):
        return {}  # another format: measured again and rewritten
    return data["entries"]


def _write_cache(path: Path, entries: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # written whole, then renamed over the old file: a concurrent reader never sees half of it
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".cpu_peaks.", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"version": _CACHE_VERSION, "entries": entries}, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def _torch_dtype(key: str):
    import torch

    return {"fp64": torch.float64, "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[key]


def _measure_matmul(key: str, seconds: float) -> float:
    """Best FLOP/s of square matmuls in ``key`` within about ``seconds``: the size doubles
    until one product takes a twentieth of the budget (or n = 2048), then repeats."""
    import torch

    dtype = _torch_dtype(key)
    gen = torch.Generator().manual_seed(0)  # a private generator: the user's RNG stays as it was
    deadline = time.perf_counter() + seconds
    n, best = 64, 0.0
    while True:
        a = torch.randn(n, n, generator=gen).to(dtype)
        b = torch.randn(n, n, generator=gen).to(dtype)
        torch.mm(a, b)  # the first call of a size may pick or pack a kernel
        start = time.perf_counter()
        torch.mm(a, b)
        took = time.perf_counter() - start
        best = max(best, 2 * n**3 / took) if took > 0 else best
        if took >= seconds / 20 or n >= 2048 or time.perf_counter() >= deadline:
            break
        n *= 2
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        torch.mm(a, b)
        took = time.perf_counter() - start
        if took > 0:
            best = max(best, 2 * n**3 / took)
    return best


def _measure_bandwidth(seconds: float, megabytes: int = 64) -> float:
    """Best bytes/s of a streaming copy (read + write) of a buffer larger than most caches."""
    import torch

    src = torch.ones(megabytes * 2**20 // 4)
    dst = torch.empty_like(src)
    moved = 2 * src.numel() * src.element_size()
    dst.copy_(src)  # touch the pages first
    deadline, best = time.perf_counter() + seconds, 0.0
    while True:
        start = time.perf_counter()
        dst.copy_(src)
        took = time.perf_counter() - start
        if took > 0:
            best = max(best, moved / took)
        if time.perf_counter() >= deadline:
            return best


def calibrate_cpu(dtypes: Iterable[str] = ("fp32",), seconds: float = 0.2, *,
                  cache_dir: str | os.PathLike | None = None, refresh: bool = False) -> Peak:
    """The CPU's peak, measured: the best matmul FLOP/s per dtype and a streaming copy's
    bytes/s, each in about ``seconds``. Kept in a JSON cache (:func:`cpu_cache_path`) under
    :func:`cpu_cache_key`, so a later call with the same key measures only dtypes not yet
    measured (``refresh=True`` measures again). Never run by a plain report.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as cache:
    ...     peak = calibrate_cpu(["fp32"], seconds=0.05, cache_dir=cache)
    >>> peak.flops_for("fp32") > 0 and peak.memory_bandwidth > 0
    True
    """
    keys = [canonical_dtype(d) for d in ([dtypes] if isinstance(dtypes, str) else dtypes)]
    unsupported = [k for k in keys if k not in _CPU_DTYPES]
    if unsupported or not keys:
        raise ValueError(f"dtypes: the CPU calibration measures {', '.join(_CPU_DTYPES)}, got {list(dtypes)!r}")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= 10:
        raise ValueError(f"seconds: expected a number in (0, 10], got {seconds!r}")
    path = cpu_cache_path(cache_dir)
    key = cpu_cache_key()
    entries = _read_cache(path)
    entry = {} if refresh else dict(entries.get(key, {}))
    flops = dict(entry.get("flops", {}))
    missing = [k for k in dict.fromkeys(keys) if not flops.get(k)]
    for k in missing:
        flops[k] = _measure_matmul(k, seconds)
    bandwidth = entry.get("memory_bandwidth")
    if not bandwidth:
        bandwidth = _measure_bandwidth(seconds)
    if missing or entry.get("memory_bandwidth") != bandwidth:
        entries[key] = {"flops": flops, "memory_bandwidth": bandwidth,
                        "measured": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        _write_cache(path, entries)
    measured = entries.get(key, entry).get("measured", "")
    return Peak(
        f"CPU {_cpu_model()}, measured",
        {k: v for k, v in flops.items() if k in _CPU_DTYPES},
        bandwidth,
        source=f"measured by flopsight.hardware.calibrate_cpu ({key}) on {measured}, cached in {path}",
        note="best square-matmul FLOP/s per dtype and a 64 MiB streaming copy's bytes/s",
    )
