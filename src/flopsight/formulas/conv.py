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

``padding_mode='reflect'|'replicate'|'circular'`` pads with a separate op first
(``reflection_pad2d``..., zero-cost, counted elsewhere) and then convolves with padding 0,
so only the padded input's valid positions are counted here.

>>> import torch
>>> from flopsight.formulas.conv import convolution
>>> x, w, b = torch.ones(1, 3, 10, 10), torch.ones(8, 3, 3, 3), torch.ones(8)
>>> out = torch.nn.functional.conv2d(x, w, b)      # (1, 8, 8, 8)
>>> convolution(out, x, w, b, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)  # 8*8*8 * 3*3*3
Cost(macs=13824, flops=28160)
"""

from __future__ import annotations

from .activation import activation_flops
from .elementwise import elementwise_flops
from .registry import REGISTRY, Cost
from .shapes import arg, numel, prod

__all__ = ["conv_cost", "convolution"]

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
