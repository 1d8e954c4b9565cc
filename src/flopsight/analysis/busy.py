"""How busy the device was, on every device: the seed user's third question, answered from
what was measured.

On a CPU the device is the cores running the ops: its busy share is the compute part of the
step anatomy (the ops' own time), beside the parts that are not (framework and hooks,
waiting for other ranks, the rest). On CUDA, NVML's utilisation (sampled while profiling)
and, where kernels were recorded, the share of the step in which a kernel ran. On the meta
device nothing ran: no answer.

>>> from flopsight.result.iteration import StepAnatomy
>>> b = cpu_busy(StepAnatomy(forward=1.0, backward=2.0, step=1.0, framework=3.0, communication=2.0, other=1.0))
>>> b.compute_share, b.parts["communication"]
(40.0, 20.0)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..result.iteration import StepAnatomy
from ..result.profile_result import ProfileResult

__all__ = ["Busy", "busy", "cpu_busy"]


@dataclass(frozen=True)
class Busy:
    """``device`` (``"cpu"``, ``"cuda"``) and what tells how busy it was: ``compute_share``,
    percent of the ``span`` (``"step"``, ``"forward"`` or ``"generate() call"``) inside the ops (CPU); ``parts``, the
    anatomy's other parts' percents (CPU, training); ``utilization_mean`` and ``_max``,
    NVML's (CUDA, where sampled); ``kernels_share``, percent of the span in which a kernel
    ran (CUDA, with ``kernels=True``)."""

    device: str
    span: str
    compute_share: float | None = None
    parts: dict[str, float] = field(default_factory=dict)
    utilization_mean: float | None = None
    utilization_max: int | None = None
    kernels_share: float | None = None


def _share(part: float, whole: float) -> float:
    return 100 * part / whole if whole > 0 else 0.0


def cpu_busy(anatomy: StepAnatomy, span: str = "step", device: str = "cpu") -> Busy:
    """A host device's ``span``: the compute share of its anatomy, and the other parts'."""
    total = anatomy.total
    compute = anatomy.forward + anatomy.backward + anatomy.step
    parts = {"framework": anatomy.framework, "communication": anatomy.communication, "other": anatomy.other,
             "profiler": anatomy.profiler}
    return Busy(device, span, _share(compute, total), {k: _share(v, total) for k, v in parts.items()})


def busy(result: ProfileResult) -> Busy | None:
    """How busy ``result``'s device was (None on the meta device, where nothing ran)."""
    device = result.metadata.device_type
    if device == "meta":
        return None
    it = result.iteration
    training = "backward" in result.spans or "step" in result.spans
    span = "step" if training else "generate() call" if result.metadata.mode == "generate" else "forward"
    if device == "cuda":
        usage = result.device_usage
        sampled = usage is not None and usage.samples and usage.utilization_mean is not None
        kernels = result.kernels
        whole = it.latency if training else it.forward.latency
        share = _share(kernels.busy, whole) if kernels is not None and kernels.busy is not None else None
        return Busy("cuda", span, utilization_mean=usage.utilization_mean if sampled and usage else None,
                    utilization_max=usage.utilization_max if sampled and usage else None, kernels_share=share)
    if it.anatomy is not None:
        return cpu_busy(it.anatomy, span, device)
    ops = sum(s.latency for m in result.modules.values() for s in m.ops.get("forward", {}).values())
    return Busy(device, "forward", _share(ops, result.total.forward.latency))
