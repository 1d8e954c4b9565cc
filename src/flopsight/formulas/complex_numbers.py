"""Complex numbers built from real ones: ``polar``.

``torch.polar(abs, angle)`` (rotary embeddings in complex form: Llama 4's ``freqs_cis``)
computes ``abs * cos(angle) + i * abs * sin(angle)`` per element: a cosine, a sine and two
multiplies, 4 FLOPs per output element (a transcendental counts 1, as in
:mod:`.elementwise`), 0 MACs. ``torch.complex(real, imag)`` only interleaves its inputs:
free, in :mod:`.zero_cost`.

>>> import torch
>>> polar(None, torch.ones(2, 8), torch.ones(8))  # 16 outputs * 4
Stats(macs=0, flops=64)
"""

from __future__ import annotations

import torch

from .registry import REGISTRY, Cost, OpNames

aten = OpNames("aten")  # names: an op this torch lacks is skipped (registry.builtins_loading)
from .shapes import broadcast_shape, prod

__all__ = ["polar"]


@REGISTRY.register(aten.polar)
def polar(out, abs=None, angle=None, **_) -> Cost:
    """4 FLOPs per element of the broadcast of ``abs`` and ``angle``; the scalar overloads
    (``polar.float(a, b)``: one complex number from Python numbers) cost 4."""
    if not isinstance(abs, torch.Tensor):
        return Cost.of_flops(4)
    return Cost.of_flops(4 * prod(broadcast_shape(abs.shape, angle.shape) or ()))
