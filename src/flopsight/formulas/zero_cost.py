"""Zero-cost operators: views, copies, creation, random sampling, indexing, ordering, and
bookkeeping (checks, backend queries, data packing).

These ops move, select, reinterpret or create data, or check it; they do no floating-point
arithmetic, so they cost 0 MACs and 0 FLOPs (the DeepSpeed convention for
reshapes, copies and embedding lookups). They are *registered* rather than left out
so that an op nobody has a formula for is still reported, never silently counted as 0.

Families (one list each below, so coverage is easy to review); :data:`ZERO_COST_OPS` holds
the data-moving ones, :data:`BOOKKEEPING_OPS` the bookkeeping ones:

* **views and metadata**: ``view``, ``reshape``, ``permute``, ``transpose``, ``expand``,
  ``select``, ``slice``, ``split``, ``unbind``, ``as_strided``, ``sym_size``, asserts ...
* **copies and conversions**: ``clone``, ``copy_``, ``_to_copy`` (``.to``, dtype casts),
  ``fill_``, ``zero_``, ``*_like``, the functionalised ``*_copy`` / ``*_scatter`` forms,
  layout conversions (``to_dense``, ``to_sparse``, ``to_sparse_csr``...).
* **creation and random sampling**: ``empty``, ``zeros``, ``arange``, ``linspace``,
  ``eye``, ``rand*``, ``normal_``, ``bernoulli_``, ``multinomial`` ... Generating a
  random number is not counted as arithmetic (DeepSpeed counts dropout as 0 too).
* **masking**: ``tril``/``triu`` keep or zero elements by position: no arithmetic.
* **indexing and gathering**: ``index``, ``index_select``, ``gather``, ``take``,
  ``masked_select``, ``nonzero``, ``cat``, ``stack``, ``roll``, ``flip``, ``repeat``,
  padding, ``pixel_shuffle``/``pixel_unshuffle``/``channel_shuffle``, ``im2col``
  (``F.unfold``), ``one_hot``, ``_local_scalar_dense`` (``.item()``),
  ``_pack_padded_sequence`` (``pack_padded_sequence``: a gather of the valid timesteps).
* **ordering, binning and set membership**: ``sort``, ``argsort``, ``topk``,
  ``kthvalue``, ``median``, ``mode``, ``unique``, ``bucketize``, ``searchsorted``,
  ``histc``, ``isin``. These do
  compare values, but how many comparisons depends on the algorithm and the data
  (n log n for a sort, a selection for ``kthvalue``), not on shapes; like fvcore and
  PyTorch's FlopCounterMode we count them as 0. Single-pass reductions with a fixed
  number of comparisons (``max``, ``argmax``, ``amax``...) *are* counted, in
  :mod:`.reduction`.

* **backward plumbing**: the backward kernels of views and selections write the incoming
  gradient into a zeroed tensor of the input's shape, or pick from it, without arithmetic:
  ``select_backward``, ``slice_backward``, ``diagonal_backward``,
  ``masked_scatter_backward``, ``value_selecting_reduction_backward`` (``max``/``min``/
  ``median``/``kthvalue``/``mode`` along a dim), ``trace_backward``,
  ``masked_select_backward``, ``_pack_padded_sequence_backward``, ``to_dense_backward``;
  sparse-gradient bookkeeping (``_indices``, ``_values``,
  ``_sparse_coo_tensor_with_dims_and_tensors``, a compressed layout's ``crow_indices``...);
  the optimizers' ``_foreach_copy_``, ``_foreach_zero_`` (``zero_grad(set_to_none=False)``),
  ``_foreach_clone``.
* **profiler ranges and communication**: ``record_function`` ranges (``optimizer.step()``
  opens one); collectives (their in-network reductions are not counted as compute).

Bookkeeping:

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
* **random sampling** (not arithmetic, as above): ``binomial``, ``_standard_gamma``,
  ``_sample_dirichlet``.

Not here, though they look like indexing: ops whose packet has an accumulating form
(``index_put(accumulate=True)``, ``scatter(reduce=...)``, ``scatter_add``, ``index_add``,
``put(accumulate=True)``, ``col2im``) are in :mod:`.reduction`, where they cost 0 when
they only write and one FLOP per accumulated element when they add. ``where`` and
``masked_fill`` belong to :mod:`.elementwise`.

Names absent from the installed torch are skipped (the package supports several torch
versions); ``REGISTRY.missing()`` lists them, and the tests require it to be empty on
the torch they run with, which catches typos.

>>> import torch
>>> from flopsight.formulas import REGISTRY, ZERO
>>> name, formula = REGISTRY.lookup(torch.ops.aten.view.default)
>>> formula(None, self=torch.ones(2, 3), size=[6])
Stats(macs=0, flops=0)
>>> all(REGISTRY.is_registered(getattr(torch.ops.aten, n)) for n in ("clone", "cat", "sort"))
True
>>> REGISTRY.lookup("aten::_is_all_true")[1] is ZERO
True
"""

from __future__ import annotations

from .registry import REGISTRY, op_key

__all__ = ["ZERO_COST_OPS", "BOOKKEEPING_OPS"]


# -- views, reshapes and tensor metadata ------------------------------------------------
_VIEWS = """
    view _unsafe_view _reshape_alias reshape view_as alias
    expand expand_as broadcast_to broadcast_tensors
    permute transpose transpose_ t t_ numpy_T mT mH matrix_H adjoint
    movedim moveaxis swapaxes swapaxes_ swapdims swapdims_
    squeeze squeeze_ unsqueeze unsqueeze_ flatten unflatten
    atleast_1d atleast_2d atleast_3d
    select slice narrow diagonal unfold as_strided as_strided_
    split split_with_sizes unsafe_split unsafe_split_with_sizes chunk unsafe_chunk
    tensor_split hsplit vsplit dsplit unbind meshgrid
    view_as_real view_as_complex _conj conj _neg_view resolve_conj resolve_neg
    detach detach_ lift lift_fresh
    _fw_primal _make_dual _unpack_dual
    sym_size sym_stride sym_numel sym_storage_offset is_same_size
    _has_compatible_shallow_copy_type is_pinned
    _assert_async _assert_tensor_metadata _functional_assert_async _assert_scalar
    sym_constrain_range _functional_sym_constrain_range _make_dep_token
    record_stream _print
"""

# -- copies, conversions, in-place overwrites; functionalised (``*_copy``) forms ----------
_COPIES = """
    clone contiguous _lazy_clone copy copy_ _copy_from _copy_from_and_resize
    _to_copy to type_as lift_fresh_copy pin_memory _pin_memory _to_dense to_dense
    _to_sparse _to_sparse_csr _to_sparse_csc _to_sparse_bsr _to_sparse_bsc
    to_sparse to_sparse_csr to_sparse_csc to_sparse_bsr to_sparse_bsc
    fill fill_ zero zero_ resize_ resize_as_ _resize_output_ set_
    view_copy expand_copy permute_copy transpose_copy t_copy squeeze_copy unsqueeze_copy
    select_copy slice_copy split_copy split_with_sizes_copy unbind_copy as_strided_copy
    alias_copy detach_copy diagonal_copy _reshape_alias_copy _reshape_copy unfold_copy
    narrow_copy view_as_real_copy view_as_complex_copy _conj_copy _neg_view_copy
    indices_copy values_copy
    slice_scatter select_scatter diagonal_scatter as_strided_scatter
"""

# -- creation (constant or random), masking by position ---------------------------------
_CREATION = """
    empty empty_strided empty_permuted new_empty new_empty_strided _efficientzerotensor
    zeros ones full scalar_tensor new_zeros new_ones new_full
    empty_like zeros_like ones_like full_like
    arange linspace logspace eye triu_indices tril_indices
    diag diag_embed diagflat block_diag
    rand randn randint randperm rand_like randn_like randint_like
    normal normal_ uniform_ bernoulli bernoulli_ random_ exponential_ cauchy_
    log_normal_ geometric_ poisson multinomial
    tril triu
"""

# -- indexing, gathering, concatenation, padding, data movement ---------------------------
_INDEXING = """
    index _unsafe_index _unsafe_masked_index index_select gather take take_along_dim
    masked_select masked_scatter nonzero nonzero_static argwhere index_fill index_copy
    _local_scalar_dense item is_nonzero
    cat concat concatenate stack _stack hstack vstack dstack column_stack row_stack
    cartesian_prod
    roll flip fliplr flipud rot90 repeat repeat_interleave tile
    pad _pad_enum _pad_circular constant_pad_nd
    reflection_pad1d reflection_pad2d reflection_pad3d
    replication_pad1d replication_pad2d replication_pad3d
    pixel_shuffle pixel_unshuffle channel_shuffle native_channel_shuffle im2col
    one_hot _pack_padded_sequence
"""

# -- ordering, order statistics, set membership (comparisons, algorithm-dependent) --------
_ORDERING = """
    sort argsort msort topk kthvalue median nanmedian mode
    _unique _unique2 unique_dim unique_consecutive unique_dim_consecutive
    bucketize searchsorted isin histc histogram
"""


# -- backward plumbing: gradients of views/selections, sparse gradients, optimizer copies ------
# (``index_select``/``gather``/``unfold``/reflection-padding backward *accumulate*: reduction.py)
_BACKWARD = """
    select_backward slice_backward diagonal_backward masked_scatter_backward masked_select_backward
    value_selecting_reduction_backward trace_backward _pack_padded_sequence_backward
    to_dense_backward to_mkldnn_backward
    _indices _values indices values _nnz sparse_dim dense_dim is_coalesced _coalesced_
    _sparse_coo_tensor_with_dims _sparse_coo_tensor_with_dims_and_tensors _sparse_coo_tensor_unsafe
    sparse_coo_tensor _validate_sparse_coo_tensor_args sparse_mask
    crow_indices col_indices ccol_indices row_indices sparse_compressed_tensor _sparse_compressed_tensor_unsafe
    sparse_csr_tensor sparse_csc_tensor sparse_bsr_tensor sparse_bsc_tensor _sparse_csr_tensor_unsafe
    _validate_sparse_compressed_tensor_args _validate_sparse_csr_tensor_args
    _foreach_copy _foreach_copy_ _foreach_zero _foreach_zero_ _foreach_clone
"""


# -- profiler bookkeeping: record_function ranges (optimizer.step() opens one) ----------
_PROFILER = """
    profiler::_record_function_enter profiler::_record_function_enter_new profiler::_record_function_exit
"""


# -- communication: collectives move data between processes (DDP's gradient allreduce);
# their in-network reductions are not counted as compute --------------------------------
_C10D = """
    allreduce_ allreduce_coalesced_ allgather_ _allgather_base_ allgather_coalesced_
    allgather_into_tensor_coalesced_ reduce_scatter_ _reduce_scatter_base_ reduce_scatter_tensor_coalesced_
    broadcast_ reduce_ gather_ scatter_ alltoall_ alltoall_base_ barrier send recv_ recv_any_source_
    monitored_barrier_
"""
_C10D_FUNCTIONAL = """
    all_reduce all_reduce_ all_reduce_coalesced all_reduce_coalesced_ all_gather_into_tensor
    all_gather_into_tensor_out all_gather_into_tensor_coalesced reduce_scatter_tensor
    reduce_scatter_tensor_coalesced all_to_all_single broadcast broadcast_ wait_tensor isend irecv
    batch_p2p_ops
"""


# -- bookkeeping: checks and predicates, backend queries, data packing, random sampling ------
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


_BLOCKS = (_VIEWS, _COPIES, _CREATION, _INDEXING, _ORDERING, _BACKWARD)
_NAMES = (
    tuple(f"aten::{name}" for block in _BLOCKS for name in block.split())
    + tuple(_PROFILER.split())
    + tuple(f"c10d::{name}" for name in _C10D.split())
    + tuple(f"_c10d_functional::{name}" for name in _C10D_FUNCTIONAL.split())
)
_BOOKKEEPING_NAMES = tuple(name for block in (_CHECKS, _QUERIES, _PACKING, _SAMPLING) for name in block.split())
# Names the installed torch lacks are skipped (and listed by ``REGISTRY.missing()``).
REGISTRY.zero_cost(*_NAMES, *_BOOKKEEPING_NAMES, missing_ok=True)

#: The data-moving ops this module registers as free (``OpOverloadPacket``s).
ZERO_COST_OPS: tuple = tuple(op_key(name) for name in _NAMES if name not in REGISTRY.missing())
#: The bookkeeping ops this module registers as free (``OpOverloadPacket``s).
BOOKKEEPING_OPS: tuple = tuple(op_key(name) for name in _BOOKKEEPING_NAMES if name not in REGISTRY.missing())
