"""Convolutions: every dimensionality, groups, stride, dilation, padding, transposed.

``nn.Conv1d/2d/3d``, ``nn.ConvTranspose1d/2d/3d`` and ``F.conv*`` all reach dispatch as
``aten.convolution`` on CPU, CUDA and meta (the backend kernel -- mkldnn, cuDNN, MIOpen,
slow_conv2d... -- is picked *inside* it, where the counting mode does not look). The
backend kernels and the composite front doors (``conv2d``, ``conv_transpose2d``...) are
registered too, with the same formula: they are what a mode sees when it sits at another
level (pre-dispatch tracing, backward graphs, ``torch.compile`` lowering, direct calls).

The formula needs only three shapes, never the stride/padding/dilation arguments, which
is why one function serves every schema whatever its argument order:

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
>>> convolution(out, x, w, b, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)  # 8*8*8 * 3*3*3
Cost(macs=13824, flops=28160)
>>> from flopsight.formulas.conv import convolution_backward
>>> g = torch.ones(out.shape)  # input, weight and bias grads: 2 * 13824 MACs + 8*8*8 adds
>>> convolution_backward(None, g, x, w, [8], [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, True, True])
Cost(macs=27648, flops=55808)
"""

from __future__ import annotations

from .activation import activation_flops
from .elementwise import elementwise_flops
from .registry import REGISTRY, Cost
from .shapes import arg, numel, prod

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


# -- schemas with a ``transposed`` flag: (input, weight, bias, stride, padding, dilation,
#    transposed, output_padding, groups, ...) --------------------------------------------
@REGISTRY.register("aten::convolution", "aten::_convolution", "aten::convolution_overrideable", missing_ok=True)
def convolution(out, x, weight, bias=None, *args, **kwargs) -> Cost:
    """``aten.convolution`` (the op every ``nn.Conv*``/``nn.ConvTranspose*`` reaches)."""
    transposed = bool(arg(args, kwargs, 3, "transposed", False))  # args[3] is schema index 6
    return conv_cost(out, x, weight, bias, transposed)


# -- composite front doors (input, weight, bias=None, ...) ------------------------------
@REGISTRY.register("aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::_convolution_mode", missing_ok=True)
def conv_forward(out, x, weight, bias=None, *args, **kwargs) -> Cost:
    return conv_cost(out, x, weight, bias, transposed=False)


@REGISTRY.register("aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d", missing_ok=True)
def conv_transpose(out, x, weight, bias=None, *args, **kwargs) -> Cost:
    return conv_cost(out, x, weight, bias, transposed=True)


# -- backend kernels: (self, weight, bias, padding|stride, ...) -------------------------
@REGISTRY.register(
    "aten::mkldnn_convolution",
    "aten::miopen_convolution",
    "aten::miopen_depthwise_convolution",
    "aten::_mps_convolution",
    "aten::_nnpack_spatial_convolution",
    missing_ok=True,
)
def conv_kernel_with_bias(out, x, weight, bias=None, *args, **kwargs) -> Cost:
    return conv_cost(out, x, weight, bias, transposed=False)


@REGISTRY.register("aten::miopen_convolution_transpose", missing_ok=True)
def conv_transpose_kernel_with_bias(out, x, weight, bias=None, *args, **kwargs) -> Cost:
    return conv_cost(out, x, weight, bias, transposed=True)


# cuDNN (and MPS transposed) kernels take no bias: aten.convolution adds it in a separate
# add that it runs itself (invisible under aten.convolution, so counted there).
@REGISTRY.register("aten::cudnn_convolution", missing_ok=True)
def cudnn_convolution(out, x, weight, *args, **kwargs) -> Cost:
    return conv_cost(out, x, weight, None, transposed=False)


@REGISTRY.register("aten::cudnn_convolution_transpose", "aten::_mps_convolution_transpose", missing_ok=True)
def cudnn_convolution_transpose(out, x, weight, *args, **kwargs) -> Cost:
    return conv_cost(out, x, weight, None, transposed=True)


# -- (self, weight, kernel_size, bias, stride, padding, ...) -----------------------------
@REGISTRY.register(
    "aten::_slow_conv2d_forward",
    "aten::thnn_conv2d",
    "aten::slow_conv3d",
    "aten::slow_conv3d_forward",
    "aten::slow_conv_dilated2d",
    "aten::slow_conv_dilated3d",
    "aten::_conv_depthwise2d",
    "aten::conv_depthwise3d",
    missing_ok=True,
)
def slow_conv(out, x, weight, kernel_size=None, bias=None, *args, **kwargs) -> Cost:
    return conv_cost(out, x, weight, bias, transposed=False)


@REGISTRY.register("aten::slow_conv_transpose2d", "aten::slow_conv_transpose3d", missing_ok=True)
def slow_conv_transpose(out, x, weight, kernel_size=None, bias=None, *args, **kwargs) -> Cost:
    return conv_cost(out, x, weight, bias, transposed=True)


# -- fused conv + epilogue (frozen/JIT graphs): one FLOP per output element per step ----
@REGISTRY.register("aten::cudnn_convolution_relu", "aten::miopen_convolution_relu", missing_ok=True)
def convolution_relu(out, x, weight, bias=None, *args, **kwargs) -> Cost:
    """conv (+ bias) then ReLU (1 FLOP per output element, the activation convention)."""
    return conv_cost(out, x, weight, bias, transposed=False).plus(Cost.of_flops(activation_flops(numel(out))))


@REGISTRY.register("aten::cudnn_convolution_add_relu", "aten::miopen_convolution_add_relu", missing_ok=True)
def convolution_add_relu(out, x, weight, z, alpha=None, bias=None, *args, **kwargs) -> Cost:
    """``relu(conv(x) + alpha * z + bias)``: + z, * alpha (unless 1), ReLU: 1 each per output."""
    n = numel(out)
    arithmetic = elementwise_flops(n, ops=1 if alpha is None or alpha == 1 else 2)
    return conv_cost(out, x, weight, bias, transposed=False).plus(Cost.of_flops(arithmetic + activation_flops(n)))


@REGISTRY.register("aten::conv_tbc", missing_ok=True)
def conv_tbc(out, x, weight, bias=None, *args, **kwargs) -> Cost:
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


@REGISTRY.register("aten::convolution_backward", missing_ok=True)
def convolution_backward(out, grad_output, x, weight, bias_sizes=None, *args, **kwargs) -> Cost:
    """(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
    output_padding, groups, output_mask) -> (grad_input, grad_weight, grad_bias)."""
    transposed = bool(arg(args, kwargs, 3, "transposed", False))  # args[3] is schema index 7
    return conv_backward_cost(grad_output, x, weight, transposed, _mask(arg(args, kwargs, 6, "output_mask")))


@REGISTRY.register("aten::convolution_backward_overrideable", missing_ok=True)
def convolution_backward_overrideable(out, grad_output, x, weight, *args, **kwargs) -> Cost:
    """The out-of-tree backends' entry: the same without ``bias_sizes``."""
    transposed = bool(arg(args, kwargs, 3, "transposed", False))  # args[3] is schema index 6
    return conv_backward_cost(grad_output, x, weight, transposed, _mask(arg(args, kwargs, 6, "output_mask")))


@REGISTRY.register("aten::_slow_conv2d_backward", missing_ok=True)
def slow_conv2d_backward(out, grad_output, x, weight, *args, **kwargs) -> Cost:
    """The CPU fallback kernel: ``.output_mask`` (..., padding, output_mask), or
    ``.grad_input`` whose grad_input/grad_weight/grad_bias tensors say what is computed."""
    mask = arg(args, kwargs, 3, "output_mask")
    if mask is None and "grad_input" in kwargs:
        mask = [kwargs.get(name) is not None for name in ("grad_input", "grad_weight", "grad_bias")]
    return conv_backward_cost(grad_output, x, weight, False, _mask(mask))


# MPS kernels take the forward input first, then grad_output (no bias grad when transposed).
@REGISTRY.register("aten::mps_convolution_backward", missing_ok=True)
def mps_convolution_backward(out, x, grad_output, weight, *args, **kwargs) -> Cost:
    """(self, grad_output, weight, padding, stride, dilation, groups, output_mask[3])."""
    return conv_backward_cost(grad_output, x, weight, False, _mask(arg(args, kwargs, 4, "output_mask")))


@REGISTRY.register("aten::mps_convolution_transpose_backward", missing_ok=True)
def mps_convolution_transpose_backward(out, x, grad_output, weight, *args, **kwargs) -> Cost:
    """(self, grad_output, weight, padding, output_padding, stride, dilation, groups, output_mask[2])."""
    mask = _mask(arg(args, kwargs, 5, "output_mask"), 2)
    return conv_backward_cost(grad_output, x, weight, True, mask + (False,))


@REGISTRY.register("aten::_convolution_double_backward", missing_ok=True)
def convolution_double_backward(out, ggI, ggW, ggb, grad_output, weight, x, *args, **kwargs) -> Cost:
    """The backward of ``convolution_backward`` (gradient penalties, double backward).

    Returns (ggO, gI, gW) for ``output_mask`` (grad_output, input, weight): ``ggO`` is
    ``conv(ggI, W) + conv(x, ggW) + ggb`` (``F`` MACs per conv term, and an add per output
    element for each defined term after the first), ``gI`` the input-gradient conv of
    ``grad_output`` with ``ggW`` (``F``), ``gW`` the weight-gradient conv of ``ggI`` with
    ``grad_output`` (``F``). CompositeImplicitAutograd: eager modes see the convolutions it
    runs instead; registered for modes that see composites.
    """
    transposed = bool(arg(args, kwargs, 3, "transposed", False))  # args[3] is schema index 9
    want_ggo, want_gi, want_gw = _mask(arg(args, kwargs, 6, "output_mask"))
    forward = conv_cost(grad_output, x, weight, None, transposed).macs
    macs, adds = 0, 0
    if want_ggo:
        macs += forward * ((ggI is not None) + (ggW is not None))
        terms = (ggI is not None) + (ggW is not None) + (ggb is not None)
        adds = numel(grad_output) * max(terms - 1, 0)
    macs += forward * ((want_gi and ggW is not None) + (want_gw and ggI is not None))
    return Cost.of_product(macs, adds)


@REGISTRY.register("aten::conv_tbc_backward", missing_ok=True)
def conv_tbc_backward(out, grad_output, x, weight, bias=None, *args, **kwargs) -> Cost:
    """All three gradients of :func:`conv_tbc` (weight ``(k, Cin, Cout)``): the forward's
    ``numel(out) * k * Cin`` MACs for the input and the weight grads, an add per
    ``grad_output`` element for the bias grad."""
    return Cost.of_product(2 * numel(grad_output) * prod(weight.shape[:-1]), numel(grad_output))
