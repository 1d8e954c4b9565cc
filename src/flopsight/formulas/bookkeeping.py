"""Zero-cost bookkeeping ops that :mod:`.zero` does not list.

Checks, predicates, backend queries and data packing: they do no floating-point arithmetic
(the convention of :mod:`.zero`), so they cost 0 MACs and 0 FLOPs. They are registered so
that they are not reported as unsupported.

* **checks and predicates**: ``_is_all_true``/``_is_any_true`` (the bool reductions behind
  ``torch._check``-style asserts; logic on bool tensors is not FLOPs),
  ``sym_constrain_range_for_size`` and its functional forms, ``_functional_assert_scalar``,
  ``_linalg_check_errors`` (``torch.linalg`` reading LAPACK's ``info``),
  ``_has_same_storage_numel``, ``is_set_to``, ``_use_cudnn_ctc_loss``, ``_fused_sdp_choice``
  (which SDPA kernel to run);
* **backend queries**: ``mkldnn::_is_mkldnn_bf16_supported`` / ``_fp16_`` / ``_acl_``
  (asked by DeepSpeed and autocast);
* **data packing and creation**: ``complex(real, imag)`` (interleaves two tensors),
  ``_chunk_cat`` (FSDP2's gradient concatenation), ``_empty_affine_quantized``;
* **random sampling** (not arithmetic, as in :mod:`.zero`): ``binomial``,
  ``_standard_gamma``, ``_sample_dirichlet``.

>>> import torch
>>> from flopsight.formulas import REGISTRY, ZERO
>>> REGISTRY.lookup("aten::_is_all_true")[1] is ZERO
True
"""

from __future__ import annotations

from .registry import REGISTRY, op_key

__all__ = ["BOOKKEEPING_OPS"]

_CHECKS = """
    aten::_is_all_true aten::_is_any_true
    aten::sym_constrain_range_for_size aten::_functional_sym_constrain_range_for_size
    aten::_functional_assert_scalar aten::_linalg_check_errors
    aten::_has_same_storage_numel aten::is_set_to aten::_use_cudnn_ctc_loss aten::_fused_sdp_choice
"""
_QUERIES = """
    mkldnn::_is_mkldnn_bf16_supported mkldnn::_is_mkldnn_fp16_supported mkldnn::_is_mkldnn_acl_supported
"""
_PACKING = """
    aten::complex aten::_chunk_cat aten::_empty_affine_quantized
"""
_SAMPLING = """
    aten::binomial aten::_standard_gamma aten::_sample_dirichlet
"""

_NAMES = tuple(name for block in (_CHECKS, _QUERIES, _PACKING, _SAMPLING) for name in block.split())
REGISTRY.zero_cost(*_NAMES, missing_ok=True)

#: Every op this module registers as free (``OpOverloadPacket``s).
BOOKKEEPING_OPS: tuple = tuple(op_key(name) for name in _NAMES if name not in REGISTRY.missing())
