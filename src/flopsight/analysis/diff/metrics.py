"""The figures a diff compares, with their labels and kinds (what unit, exact or noisy).

>>> METRICS["flops"], metric_kind("latency"), metric_kind("memory")
(('FLOPs', 'count'), 'time', 'bytes')
"""

from __future__ import annotations

__all__ = ["METRICS", "TIME_METRICS", "metric_kind"]

#: metric -> (label, kind): kind "count" (exact), "time" (seconds per call, noisy), "bytes" (exact)
METRICS = {
    "params": ("params", "count"),
    "trainable": ("trainable params", "count"),
    "macs": ("MACs", "count"),
    "flops": ("FLOPs", "count"),
    "fwd_latency": ("fwd latency", "time"),
    "bwd_latency": ("bwd latency", "time"),
    "latency": ("latency", "time"),
    "memory": ("peak memory", "bytes"),
    "activations": ("activations", "bytes"),
}
#: The metrics measured per call, with a spread: compared by their medians and tested for noise.
TIME_METRICS = tuple(m for m, (_, kind) in METRICS.items() if kind == "time")


def metric_kind(metric: str) -> str:
    """``"count"``, ``"time"`` or ``"bytes"``: what unit ``metric`` is in, and whether it is noisy."""
    return METRICS[metric][1]
