"""What a result records about the run besides the measurements: a typed record.

>>> m = Metadata(model="Linear", device="cpu", timing=Timing("separate-pass", "perf_counter"))
>>> Metadata.from_dict(m.to_dict()) == m
True
>>> m.timing.method, m.world_size
('separate-pass', 1)
>>> Metadata.from_dict({"device": "cuda:0"}).device_name    # results saved before it was recorded
''
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

__all__ = ["Metadata", "Timing", "ATTENTION_CONVENTIONS"]

#: How attention score products are counted (``attention=``): every entry, or only the ones
#: a causal mask, a window, a packed batch or a block mask leaves in.
ATTENTION_CONVENTIONS = ("dense", "effective")


@dataclass(frozen=True)
class Timing:
    """How latencies were measured.

    ``method``: ``separate-pass`` (counted in one pass, timed in another with module hooks
    only), ``overhead-subtracted`` (one pass, the profiler's own measured time taken out) or
    ``single-pass``. ``clock``: ``perf_counter``, ``cuda_events`` or ``fake``.
    """

    method: str = ""
    clock: str = ""
    compiled: str | None = None  # set when a torch.compile'd model was timed as a whole


@dataclass(frozen=True)
class Metadata:
    """The run: versions, model, device, inputs, mode and how it was timed."""

    flopsight_version: str = ""
    torch_version: str = ""
    python_version: str = ""
    model: str = ""
    device: str = "cpu"
    device_type: str = "cpu"
    #: the accelerator's name as torch gives it (``torch.cuda.get_device_name``: "NVIDIA H100
    #: 80GB HBM3"), what the peak table is looked up by; "" for the CPU, meta, and old results
    device_name: str = ""
    dtype: str = ""
    #: ``torch.get_float32_matmul_precision()`` during the run ("highest", "high", "medium"):
    #: "high" and "medium" let CUDA run float32 matmuls in tf32 ("" in old results)
    float32_matmul_precision: str = ""
    world_size: int = 1
    rank: int = 0
    #: world, data-, tensor-, pipeline-, sequence-parallel sizes and ZeRO stage, where known
    parallel: dict | None = None
    inputs: dict | None = None  # shapes and dtypes of the profiled call's arguments
    batch_size: int | None = None  # first dimension of the first input
    batch_size_given: int | None = None  # Profiler(batch_size=...): overrides the inputs'
    mode: str = "custom"  # "forward", "generate", or "custom" (a Profiler span)
    method: str | None = None  # the method profile() called
    warm_up: int | None = None
    attention: str = "dense"  # see ATTENTION_CONVENTIONS
    timing: Timing = field(default_factory=Timing)
    error: str | None = None  # set when the profiled call raised

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Metadata":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"metadata: unknown field(s) {', '.join(unknown)}")
        values = dict(data)
        values["timing"] = Timing(**values.get("timing", {}))
        return cls(**values)
