"""Running transformers models on the meta device, where no tensor has values.

A few of transformers' mask helpers read a value to pick a faster path: whether a padding
mask is all ones (``.all()``), whether position ids describe packed sequences. On meta
that read raises. The command line only ever builds unpadded, unpacked inputs (and models
make all-ones masks themselves when given none), so the answer is known: :func:`meta_masks`
gives it without reading, for meta tensors only, while the model runs. Attention then
takes the same path as on a real device (SDPA's ``is_causal``), so the counts are the same.

Mixture-of-experts layers default to ``torch._grouped_mm``, whose meta kernel accepts
only bfloat16; :func:`prepare_for_meta` switches them to transformers' batched matmul
implementation, which multiplies the same rows by the same experts (the same MACs).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

__all__ = ["meta_masks", "prepare_for_meta"]


def _is_meta(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "meta"


def _without_meta_padding(fn: Callable) -> Callable:
    """``fn(padding_mask, ...)`` with a meta ``padding_mask`` read as "no padding" (None)."""

    @functools.wraps(fn)
    def wrapper(padding_mask=None, *args, **kwargs):
        return fn(None if _is_meta(padding_mask) else padding_mask, *args, **kwargs)

    return wrapper


def _unpacked_on_meta(fn: Callable) -> Callable:
    """``find_packed_sequence_indices(position_ids)``: None (one sequence per row) on meta."""

    @functools.wraps(fn)
    def wrapper(position_ids, *args, **kwargs):
        return None if _is_meta(position_ids) else fn(position_ids, *args, **kwargs)

    return wrapper


_PATCHES = {
    "_ignore_causal_mask_sdpa": _without_meta_padding,
    "_ignore_bidirectional_mask_sdpa": _without_meta_padding,
    "find_packed_sequence_indices": _unpacked_on_meta,
}


@contextlib.contextmanager
def meta_masks() -> Iterator[None]:
    """While inside, transformers' mask helpers answer for meta tensors without reading
    them (see the module docstring); real tensors are untouched. A no-op when transformers
    was never imported or names these helpers differently."""
    # imported by every model that uses it, so already there when such a model was built
    utils = sys.modules.get("transformers.masking_utils")
    if utils is None:
        yield
        return
    saved = {name: getattr(utils, name) for name in _PATCHES if callable(getattr(utils, name, None))}
    try:
        for name, original in saved.items():
            setattr(utils, name, _PATCHES[name](original))
        yield
    finally:
        for name, original in saved.items():
            setattr(utils, name, original)


def prepare_for_meta(model: nn.Module) -> nn.Module:
    """Switch a transformers model's mixture-of-experts layers from grouped matmuls (no
    float32 meta kernel) to batched ones, when they use them; other models are returned
    as they are."""
    get = getattr(model, "get_experts_implementation", None)
    if callable(get):
        try:
            uses_grouped = "grouped_mm" in get().values()
        except Exception:  # an older transformers, or a model without experts
            uses_grouped = False
        if uses_grouped:
            # a transformers model's method: nn.Module's __getattr__ is typed to give tensors and modules only
            model.set_experts_implementation("batched_mm")  # type: ignore[operator]
    return model
