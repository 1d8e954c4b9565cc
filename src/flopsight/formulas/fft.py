"""Fast Fourier transforms: ``_fft_c2c``, ``_fft_r2c``, ``_fft_c2r``.

Every ``torch.fft`` function (``fft``, ``ifft``, ``rfft``, ``irfft``, ``hfft``, ``fftn``,
``rfft2``..., and ``torch.stft``/``istft``) reaches dispatch as one of these three kernels,
on CPU, CUDA and meta alike. The count is FFTW's benchmark convention ("FFT Benchmark
Methodology", benchFFT): a complex transform of ``N`` points costs ``5 N log2 N`` real FLOPs
(the radix-2 Cooley-Tukey figure), a real-data transform (``r2c``/``c2r``) half of that,
``2.5 N log2 N``, with ``N`` the *real* signal's points. A multi-dimensional transform is
the 1-D transforms along each dim, each times the number of them, which adds up to the same
``5 N log2 N`` with ``N`` the product of the transformed sizes; the batch (the dims not
transformed) multiplies. The normalisation (``norm="ortho"``, ``"forward"``, or the inverse's
default ``1/n``) is one multiply per real output value (two per complex element). An FFT is
not a matrix product: 0 MACs. Counts are rounded to the nearest integer (``log2`` of a size
that is not a power of two is not one).

>>> import torch
>>> from flopsight.formulas.fft import fft_c2c
>>> # 3 complex transforms of 8 points: 3 * 5 * 8 * log2(8)
>>> fft_c2c(None, torch.ones(3, 8, dtype=torch.complex64), [1], normalization=0)
Stats(macs=0, flops=360)
"""

from __future__ import annotations

import math

from .registry import REGISTRY, Cost
from .shapes import numel, prod

__all__ = ["fft_c2c", "fft_r2c", "fft_c2r", "fft_flops"]

#: real FLOPs of one complex transform of ``N`` points, per ``N log2 N`` (FFTW's "mflops")
COMPLEX = 5.0
#: the same for a real-data transform: half the complex one
REAL = 2.5


def fft_flops(signal_shape, dim, per_point: float) -> float:
    """``per_point * numel * log2(N)``: every 1-D transform along each dim in ``dim``
    (``numel / n_d`` transforms of ``n_d`` points, ``per_point * n_d log2 n_d`` each).

    >>> fft_flops((4, 16), [0, 1], 5.0)  # 5 * 64 * log2(4 * 16)
    1920.0
    """
    total = prod(signal_shape)
    return sum(per_point * total * math.log2(signal_shape[d]) for d in dim if signal_shape[d] > 0)


def _normalization(out, normalization, complex_output: bool) -> int:
    """One multiply per real output value when the transform scales its result."""
    return 0 if normalization == 0 else numel(out) * (2 if complex_output else 1)


def _cost(flops: float, scaling: int) -> Cost:
    return Cost.of_flops(round(flops) + scaling)


@REGISTRY.register("aten::_fft_c2c")
def fft_c2c(out, self, dim, normalization, **_) -> Cost:
    """Complex-to-complex (``fft``, ``ifft``, ``fftn``; ``fft`` of a real input that was
    cast to complex): ``5 N log2 N`` per transform."""
    return _cost(fft_flops(self.shape, dim, COMPLEX), _normalization(out, normalization, True))


@REGISTRY.register("aten::_fft_r2c")
def fft_r2c(out, self, dim, normalization, **_) -> Cost:
    """Real-to-complex (``rfft``, ``ihfft``, ``fft`` of a real tensor): ``2.5 N log2 N``
    over the real input's shape. With ``onesided=False`` the other half of the spectrum is
    filled in by conjugate symmetry, a copy (free); the normalisation scales every output
    element."""
    return _cost(fft_flops(self.shape, dim, REAL), _normalization(out, normalization, True))


@REGISTRY.register("aten::_fft_c2r")
def fft_c2r(out, self, dim, normalization, **_) -> Cost:
    """Complex-to-real (``irfft``, ``hfft``): ``2.5 N log2 N`` over the real *output*'s
    shape (its last transformed dim is ``last_dim_size``, not the input's ``n/2 + 1``)."""
    return _cost(fft_flops(out.shape, dim, REAL), _normalization(out, normalization, False))
