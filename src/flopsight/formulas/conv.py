"""Convolutions: every dimensionality, groups, stride, dilation, padding, transposed.

``nn.Conv1d/2d/3d``, ``nn.ConvTranspose1d/2d/3d`` and ``F.conv*`` all reach dispatch as
``aten.convolution`` on CPU, CUDA and meta (the backend kernel -- mkldnn, cuDNN, MIOpen,
slow_conv2d... -- is picked *inside* it, where the counting mode does not look). The
backend kernels and the composite front doors (``conv2d``, ``conv_transpose2d``...) are
registered too, with the same formula: they are what a mode sees when it sits at another
level (pre-dispatch tracing, backward graphs, ``torch.compile`` lowering, direct calls).

The formulas need only three shapes (and the ``transposed`` flag), never the
stride/padding/dilation arguments, which is why a few functions serve every schema:

* **forward**: every output element is a dot product over its receptive field of
  ``Cin/groups * prod(kernel)`` taps, and the weight is laid out
  ``(Cout, Cin/groups, *kernel)``, so
  ``MACs = numel(out) * prod(weight.shape[1:])
  = N * Cout * prod(out_spatial) * (Cin/groups) * prod(kernel)``.
  Stride, dilation, padding ('same', 'valid', ints) and groups are all inside
  ``numel(out)`` and ``weight.shape``. Taps that land on zero padding are counted (the
  dense convention of every tool, and what the kernels compute).
* **transposed**: the adjoint of a forward conv. Every *input* element is multiplied by
  a ``(Cout/groups, *kernel)`` slice of the weight, laid out ``(Cin, Cout/groups,
  *kernel)``, and scattered (accumulated) into a kernel window of the output, so
  ``MACs = numel(input) * prod(weight.shape[1:])
  = N * Cin * prod(in_spatial) * (Cout/groups) * prod(kernel)``.
  Stride, dilation and output_padding change where the products land, not how many
  there are; padding crops the output afterwards and does not remove products either
  (exactly the mirror of counting padded taps in the forward conv). It equals the
  forward MACs of the conv whose gradient it is.
* **FLOPs** = 2 * MACs, plus one per output element for the bias add.
* **backward** (``aten.convolution_backward``, every dimensionality, transposed or not):
  with ``F`` the forward MACs above, ``grad_input`` is the transposed conv of
  ``grad_output`` with the weight (``F`` MACs: the adjoint has the same products),
  ``grad_weight`` correlates the input with ``grad_output`` (``F`` MACs: one per
  (output element, tap) pair), and ``grad_bias`` sums ``grad_output`` over all but the
  channel dim (1 FLOP per ``grad_output`` element). Only the gradients the kernel is asked
  for (``output_mask``) are counted: a first layer, whose input does not require grad,
  costs ``F`` (weight) + bias, a later one ``2F`` + bias, a frozen one ``F`` (input only).

``padding_mode='reflect'|'replicate'|'circular'`` pads with a separate op first
(``reflection_pad2d``..., zero-cost, counted elsewhere) and then convolves with padding 0,
so only the padded input's valid positions are counted here.

>>> import torch
>>> from flopsight.formulas.conv import convolution
>>> x, w, b = torch.ones(1, 3, 10, 10), torch.ones(8, 3, 3, 3), torch.ones(8)
>>> out = torch.nn.functional.conv2d(x, w, b)      # (1, 8, 8, 8)
>>> convolution(out, x, w, b, transposed=False)  # 8*8*8 * 3*3*3
Stats(macs=13824, flops=28160)
>>> from flopsight.formulas.conv import convolution_backward
>>> g = torch.ones(out.shape)  # input, weight and bias grads: 2 * 13824 MACs + 8*8*8 adds
>>> convolution_backward(None, g, x, w, transposed=False, output_mask=[True, True, True])
Stats(macs=27648, flops=55808)
"""

from __future__ import annotations

from .activation import activation_flops
from .elementwise import elementwise_flops
from .registry import REGISTRY, Cost
from .shapes import numel, prod

__all__ = ["conv_cost", "conv_backward_cost", "convolution", "convolution_backward"]

# Backend kernels (MPS, MIOpen, fused cuDNN epilogues...) come and go across torch versions
# and builds: every registration below names its ops with ``missing_ok=True``.


def conv_cost(out, x, weight, bias, transposed: bool) -> Cost:
    """Cost of one convolution from its input, weight and output shapes.

    ``weight.shape[1:]`` is ``(Cin/groups, *kernel)`` for a forward conv and
    ``(Cout/groups, *kernel)`` for a transposed one: the taps behind one output element
    (forward), or the products one input element scatters (transposed).
    """
    taps = prod(weight.shape[1:])
    macs = (numel(x) if transposed else numel(out)) * taps
    return Cost.of_product(macs, numel(out) if bias is not None else 0)


@REGISTRY.register("aten::convolution", "aten::_convolution", "aten::convolution_overrideable", missing_ok=True)
def convolution(out, input, weight, bias=None, *, transposed, **_) -> Cost:
    """``aten.convolution`` (the op every ``nn.Conv*``/``nn.ConvTranspose*`` reaches)."""
    return conv_cost(out, input, weight, bias, bool(transposed))


# -- composite front doors ---------------------------------------------------------------
@REGISTRY.register(
    "aten::conv1d",
    "aten::conv2d",
    "aten::conv3d",
    "aten::_convolution_mode",
    "aten::_nnpack_spatial_convolution",
    missing_ok=True,
)
def conv_forward(out, input, weight, bias=None, **_) -> Cost:
    return conv_cost(out, input, weight, bias, transposed=False)


@REGISTRY.register("aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d", missing_ok=True)
def conv_transpose(out, input, weight, bias=None, **_) -> Cost:
    return conv_cost(out, input, weight, bias, transposed=True)


# -- backend kernels (their input is ``self``) ---------------------------------------------
@REGISTRY.register(
    "aten::mkldnn_convolution",
    "aten::miopen_convolution",
    "aten::miopen_depthwise_convolution",
    "aten::_mps_convolution",
    # (self, weight, kernel_size, bias, stride, padding, ...)
    "aten::_slow_conv2d_forward",
    "aten::thnn_conv2d",
    "aten::slow_conv3d",
    "aten::slow_conv3d_forward",
    "aten::slow_conv_dilated2d",
    "aten::slow_conv_dilated3d",
    "aten::_conv_depthwise2d",
    "aten::conv_depthwise3d",
    # cuDNN kernels take no bias: aten.convolution adds it in a separate add that it runs
    # itself (invisible under aten.convolution, so counted there).
    "aten::cudnn_convolution",
    missing_ok=True,
)
def conv_kernel(out, self, weight, bias=None, **_) -> Cost:
    return conv_cost(out, self, weight, bias, transposed=False)


@REGISTRY.register(
    "aten::miopen_convolution_transpose",
    "aten::slow_conv_transpose2d",
    "aten::slow_conv_transpose3d",
    "aten::cudnn_convolution_transpose",  # no bias, like cudnn_convolution
    "aten::_mps_convolution_transpose",  # no bias
    missing_ok=True,
)
def conv_transpose_kernel(out, self, weight, bias=None, **_) -> Cost:
    return conv_cost(out, self, weight, bias, transposed=True)


# -- fused conv + epilogue (frozen/JIT graphs): one FLOP per output element per step ----
@REGISTRY.register("aten::cudnn_convolution_relu", "aten::miopen_convolution_relu", missing_ok=True)
def convolution_relu(out, self, weight, bias=None, **_) -> Cost:
    """conv (+ bias) then ReLU (1 FLOP per output element, the activation convention)."""
    return conv_cost(out, self, weight, bias, transposed=False) + Cost.of_flops(activation_flops(numel(out)))


@REGISTRY.register("aten::cudnn_convolution_add_relu", "aten::miopen_convolution_add_relu", missing_ok=True)
def convolution_add_relu(out, self, weight, z, alpha=None, bias=None, **_) -> Cost:
    """``relu(conv(x) + alpha * z + bias)``: + z, * alpha (unless 1), ReLU: 1 each per output."""
    n = numel(out)
    arithmetic = elementwise_flops(n, ops=1 if alpha is None or alpha == 1 else 2)
    return conv_cost(out, self, weight, bias, transposed=False) + Cost.of_flops(arithmetic + activation_flops(n))


@REGISTRY.register("aten::conv_tbc", missing_ok=True)
def conv_tbc(out, self, weight, bias=None, **_) -> Cost:
    """Time-batch-channel 1-D conv; weight is ``(kernel, Cin, Cout)``, bias always added."""
    return Cost.of_product(numel(out) * prod(weight.shape[:-1]), numel(out) if bias is not None else 0)


# -- backward ------------------------------------------------------------------------------
def conv_backward_cost(grad_output, x, weight, transposed: bool, mask=(True, True, True)) -> Cost:
    """Cost of a convolution's backward: the gradients ``mask`` asks for, of
    (input, weight, bias).

    ``F`` = the forward conv's MACs (:func:`conv_cost`; ``grad_output`` has the forward
    output's shape). ``grad_input`` is the adjoint conv of ``grad_output`` with the weight and
    ``grad_weight`` the correlation of the input with ``grad_output``: ``F`` MACs each, the
    same (output element, tap) products as the forward. ``grad_bias`` sums ``grad_output``
    over batch and space: one add per element.
    """
    forward = conv_cost(grad_output, x, weight, None, transposed).macs
    want_input, want_weight, want_bias = (bool(m) for m in mask)
    macs = forward * (int(want_input) + int(want_weight))
    return Cost.of_product(macs, numel(grad_output) if want_bias else 0)


def _mask(value, size: int = 3) -> tuple:
    """An ``output_mask`` argument (all True if absent), padded to ``size`` entries."""
    mask = (True,) * size if value is None else tuple(bool(m) for m in value)
    return mask + (False,) * (size - len(mask))


@REGISTRY.register("aten::convolution_backward", "aten::convolution_backward_overrideable", missing_ok=True)
def convolution_backward(out, grad_output, input, weight, *, transposed, output_mask, **_) -> Cost:
    """-> (grad_input, grad_weight, grad_bias), as ``output_mask`` asks. The overrideable op
    (out-of-tree backends) is the same without ``bias_sizes``."""
    return conv_backward_cost(grad_output, input, weight, bool(transposed), _mask(output_mask))


@REGISTRY.register("aten::_slow_conv2d_backward", missing_ok=True)
def slow_conv2d_backward(out, grad_output, self, weight, output_mask=None, **_) -> Cost:
    """The CPU fallback kernel: ``.output_mask``, or ``.grad_input``, which writes all three
    gradients into the (non-optional) buffers it is given."""
    return conv_backward_cost(grad_output, self, weight, False, _mask(output_mask))


# MPS kernels take the forward input first, then grad_output (no bias grad when transposed).
@REGISTRY.register("aten::mps_convolution_backward", missing_ok=True)
def mps_convolution_backward(out, self, grad_output, weight, output_mask, **_) -> Cost:
    return conv_backward_cost(grad_output, self, weight, False, _mask(output_mask))


@REGISTRY.register("aten::mps_convolution_transpose_backward", missing_ok=True)
def mps_convolution_transpose_backward(out, self, grad_output, weight, output_mask, **_) -> Cost:
    """``output_mask`` has two entries: (input, weight)."""
    return conv_backward_cost(grad_output, self, weight, True, _mask(output_mask, 2) + (False,))


@REGISTRY.register("aten::_convolution_double_backward", missing_ok=True)
def convolution_double_backward(out, ggI, ggW, ggb, gO, weight, self, *, transposed, output_mask, **_) -> Cost:
    """The backward of ``convolution_backward`` (gradient penalties, double backward).

    Returns (ggO, gI, gW) for ``output_mask`` (grad_output, input, weight): ``ggO`` is
    ``conv(ggI, W) + conv(x, ggW) + ggb`` (``F`` MACs per conv term, and an add per output
    element for each defined term after the first), ``gI`` the input-gradient conv of
    ``gO`` with ``ggW`` (``F``), ``gW`` the weight-gradient conv of ``ggI`` with ``gO``
    (``F``); ``self`` is the forward input. CompositeImplicitAutograd: eager modes see the
    convolutions it runs instead; registered for modes that see composites.
    """
    want_ggo, want_gi, want_gw = _mask(output_mask)
    forward = conv_cost(gO, self, weight, None, bool(transposed)).macs
    macs, adds = 0, 0
    if want_ggo:
        macs += forward * ((ggI is not None) + (ggW is not None))
        terms = (ggI is not None) + (ggW is not None) + (ggb is not None)
        adds = numel(gO) * max(terms - 1, 0)
    macs += forward * ((want_gi and ggW is not None) + (want_gw and ggI is not None))
    return Cost.of_product(macs, adds)


@REGISTRY.register("aten::conv_tbc_backward", missing_ok=True)
def conv_tbc_backward(out, self, input, weight, **_) -> Cost:
    """All three gradients of :func:`conv_tbc` (weight ``(k, Cin, Cout)``; ``self`` is the
    gradient of its output): the forward's ``numel(out) * k * Cin`` MACs for the input and
    the weight grads, an add per gradient element for the bias grad."""
    return Cost.of_product(2 * numel(self) * prod(weight.shape[:-1]), numel(self))
