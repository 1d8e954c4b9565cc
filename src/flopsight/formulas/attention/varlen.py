"""``torch.nn.attention.varlen``'s custom ops (``torch_attn::_varlen_attn``, ``_varlen_attn_out``,
``_varlen_attn_backward``): attention over packed ``(total, H, E)`` sequences, counted as the
flash kernels count them.

The ``torch_attn`` ops exist only once ``torch.nn.attention.varlen`` is imported, which
costs ~1 s before ``torch._dynamo`` is loaded: too much for ``import flopsight``. They are
registered once that module has been imported, before or after flopsight: at once, or when
the next profile starts
(:meth:`Registry.when_imported <flopsight.formulas.registry.Registry.when_imported>`).

>>> import torch
>>> q = torch.ones(10, 2, 8)                  # two sequences of 5 tokens, packed; H=2, E=8
>>> cu = torch.tensor([0, 5, 10])
>>> varlen_attn(None, q, q, q, cu, cu, 5, 5)  # scores = 2 * (5*5 + 5*5) = 100
Stats(macs=1600, flops=3400)
"""

from __future__ import annotations

import torch

from ..registry import REGISTRY, Cost, Registry
from .backward import varlen_backward
from .convention import effective_family
from .entries import flash_band
from .sdpa import varlen_forward

__all__ = ["varlen_attn", "varlen_attn_backward", "register_varlen_ops"]

_VARLEN_MODULE = "torch.nn.attention.varlen"


def _varlen_band(is_causal, window_size):
    left, right = window_size if window_size else (None, None)
    return flash_band(is_causal, left, right)


@effective_family
def varlen_attn(result, /, query, key, value, cu_seq_q, cu_seq_k=None, max_q=None, max_k=None, is_causal=False,
                window_size=None, block_table=None, *, effective=False, **_) -> Cost:
    """``torch_attn::_varlen_attn`` and ``_varlen_attn_out`` (whose ``out`` buffer comes
    first): the custom ops behind ``torch.nn.attention.varlen``; packed ``(total, H, E)``."""
    total_k = None if (cu_seq_k is None or block_table is not None) else key.shape[0]
    return varlen_forward(query, key, value, query.shape[0], total_k, max_q, max_k, cu_seq_q, cu_seq_k, masked=False,
                          dropout_p=0.0, effective=effective, band=_varlen_band(is_causal, window_size))


@effective_family
def varlen_attn_backward(result, /, query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal,
                         window_size=None, *, effective=False, **_) -> Cost:
    """``torch_attn::_varlen_attn_backward`` (``torch.nn.attention.varlen``'s backward): dQ,
    dK, dV of packed ``(total, H, E)`` operands, for the forward's score entries (no dropout)."""
    return varlen_backward(query, key, value, query.shape[0], key.shape[0], max_q, max_k, cu_seq_q, cu_seq_k,
                           dropout_p=0.0, effective=effective, band=_varlen_band(is_causal, window_size))


def register_varlen_ops(registry: Registry = REGISTRY) -> bool:
    """Register ``torch_attn::_varlen_attn``, ``_varlen_attn_out`` and ``_varlen_attn_backward``
    in ``registry``, those of them ``torch.nn.attention.varlen`` has defined (2.11 has no
    ``_varlen_attn_out``); whether it defined the forward."""
    if getattr(getattr(torch.ops, "torch_attn", None), "_varlen_attn", None) is None:
        return False
    registry.register("torch_attn::_varlen_attn", "torch_attn::_varlen_attn_out", missing_ok=True)(varlen_attn)
    registry.register("torch_attn::_varlen_attn_backward", missing_ok=True)(varlen_attn_backward)
    return True


REGISTRY.when_imported(_VARLEN_MODULE, register_varlen_ops)
