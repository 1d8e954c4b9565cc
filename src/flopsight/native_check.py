"""The native recorder's check at load: a small model profiled on both backends.

The first native session of a process runs :func:`disagreement` first (the profiler installs
it into :mod:`flopsight.capture.backends.native.self_check` with itself as ``profiler``): a forward with the
composite ops that decompose (linear, matmul, conv2d, layer_norm, gelu), a block recomputed
under activation checkpointing, and the backward. Any module's cost in any phase that differs
between the recorder and the Python path keeps the recorder out of this process.

>>> from flopsight.capture.backends.native.build import load
>>> from flopsight.profiler import Profiler
>>> load(quiet=True) is None or disagreement(Profiler) is None
True
"""

from __future__ import annotations

from ._quiet import ignoring

__all__ = ["disagreement"]


def disagreement(profiler) -> str | None:
    """Profile the check's model on both backends with ``profiler`` (the
    :class:`~flopsight.profiler.Profiler` class); None when every module's cost in every
    phase agrees, else the first difference."""
    import torch

    counts = {}
    for backend in ("python", "native"):
        # whatever the caller's state (no_grad, inference mode, a default device): a training
        # step on the CPU, and the caller's random numbers left as they were
        # (ignoring, not catch_warnings: which warnings the user has seen is kept)
        with torch.random.fork_rng(devices=[]), torch.inference_mode(False), torch.enable_grad(), \
                torch.device("cpu"), ignoring():
            torch.manual_seed(0)
            model, x = _model(), torch.randn(2, 3, 6, 6)
            with profiler(model, backend=backend) as prof:
                model(x).sum().backward()
        result = prof.result
        if result.metadata.backend != backend:
            return f"the {backend} backend did not count ({result.metadata.backend_note})"
        counts[backend] = {(path, phase): (stats.macs, stats.flops)
                           for path, record in result.modules.items() for phase, stats in record.phases.items()}
    python, native = counts["python"], counts["native"]
    for key in sorted(set(python) | set(native)):
        if python.get(key, (0, 0)) != native.get(key, (0, 0)):
            path, phase = key
            return (f"module {path or 'the root'!r}, {phase}: {native.get(key, (0, 0))[0]} MACs against "
                    f"{python.get(key, (0, 0))[0]}")
    return None


def _model():
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(8)
            self.proj = torch.nn.Linear(8, 8)

        def forward(self, x):
            return F.gelu(self.proj(self.norm(x)))

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)
            self.embed = torch.nn.Linear(16, 8)
            self.block = Block()
            self.recomputed = Block()
            self.head = torch.nn.Linear(8, 2)

        def forward(self, x):
            h = self.embed(self.conv(x).flatten(2))  # (2, 4, 8)
            h = self.block(h)
            h = checkpoint(self.recomputed, h, use_reentrant=False)
            scores = torch.softmax(h @ h.transpose(1, 2), dim=-1)  # a batched matmul
            return self.head(scores @ h)

    return Model()
