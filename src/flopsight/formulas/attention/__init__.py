"""Attention: scaled dot-product attention on every backend (dense, packed, jagged nested),
multi-head attention, the native fast paths of ``nn.MultiheadAttention`` /
``nn.TransformerEncoderLayer``, FlexAttention, and the ``attention="effective"`` convention
option. One file per concern:

* :mod:`.entries` -- the score entries counted: masks, causal and window bands, packed and
  nested batches, operand layouts;
* :mod:`.sdpa` -- ``F.scaled_dot_product_attention`` and every fused forward kernel;
* :mod:`.backward` -- their backward formulas;
* :mod:`.varlen` -- ``torch.nn.attention.varlen``'s custom ops, registered when it is imported;
* :mod:`.multi_head` -- ``F.multi_head_attention_forward`` and the native fast paths;
* :mod:`.flex` -- FlexAttention;
* :mod:`.convention` -- the ``attention=`` option (:data:`ATTENTION_CONVENTIONS`,
  :func:`attention_registry`).

Convention (dense, the default)
-------------------------------
For queries ``(..., Hq, L, E)``, keys ``(..., Hkv, S, E)`` and values ``(..., Hkv, S, Ev)``,
with ``scores = B * Hq * L * S`` (``B`` the product of the leading batch dims):

* **MACs** = ``scores * E`` (``Q K^T``) + ``scores * Ev`` (``P V``); grouped-query attention
  costs what ``Hq`` full heads cost. Masks and causality are ignored.
* **FLOPs** = 2 per MAC + 1 per score for the scale, 1 for the softmax, 1 for an explicit
  mask (any dtype) and 1 for dropout on the weights when ``dropout_p > 0``.

With ``attention="effective"`` (:func:`attention_registry`) the same formulas count only the
score entries that are kept: under a causal mask, a sliding window, the sequences of a packed
batch (read from the offsets when they have values), a boolean or ``-inf`` mask's kept
entries (when readable) and a flex ``BlockMask``'s computed blocks. Every per-score term
applies to the entries counted. docs/conventions/attention.md derives every formula.

Units: ``F.scaled_dot_product_attention`` and ``F.multi_head_attention_forward`` are counted
whole from their arguments (so CPU flash, the math decomposition, meta and CUDA agree); each
fused forward and backward kernel is also registered at dispatch for when it is reached
without the unit. Backward formulas count the gradients needed (``dV``, ``dP``, the softmax,
scale and dropout backward, ``dQ``, ``dK``) and never a flash kernel's recomputation.

>>> import torch
>>> from flopsight.formulas.attention import scaled_dot_product_attention
>>> q = torch.ones(2, 4, 16, 8)      # B=2, H=4, L=16, E=8
>>> kv = torch.ones(2, 4, 32, 8)     # S=32
>>> # scores = 2*4*16*32 = 4096; MACs = 4096*8 + 4096*8; FLOPs = 2*MACs + scale + softmax
>>> scaled_dot_product_attention(None, q, kv, kv)
Stats(macs=65536, flops=139264)
"""

# Importing a file registers its formulas (sdpa also imports backward, whose formulas the
# SDPA unit pairs with its own).
from .backward import attention_backward_cost, scaled_dot_product_attention_backward
from .convention import ATTENTION_CONVENTIONS, attention_registry
from .entries import band_entries
from .flex import flex_attention, flex_attention_backward, flex_block_entries
from .multi_head import (
    multi_head_attention,
    multi_head_attention_backward,
    native_multi_head_attention,
    transformer_encoder_layer_fwd,
)
from .sdpa import (
    attention_cost,
    cudnn_attention_forward,
    efficient_attention_forward,
    flash_attention_forward,
    scaled_dot_product_attention,
    sdpa_with_bias,
)
from .varlen import register_varlen_ops, varlen_attn, varlen_attn_backward

__all__ = [
    "ATTENTION_CONVENTIONS",
    "attention_registry",
    "attention_cost",
    "attention_backward_cost",
    "band_entries",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_backward",
    "sdpa_with_bias",
    "flash_attention_forward",
    "efficient_attention_forward",
    "cudnn_attention_forward",
    "varlen_attn",
    "varlen_attn_backward",
    "multi_head_attention",
    "multi_head_attention_backward",
    "native_multi_head_attention",
    "transformer_encoder_layer_fwd",
    "register_varlen_ops",
    "flex_attention",
    "flex_attention_backward",
    "flex_block_entries",
]
