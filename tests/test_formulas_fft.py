"""FFTs: every ``torch.fft`` function through its kernel (``_fft_c2c``, ``_fft_r2c``,
``_fft_c2r``), hand-derived, CPU == meta.

FFTW's benchmark count: a complex transform of N points is 5 N log2 N FLOPs, a real-data
one 2.5 N log2 N (N = the real signal's points), times the number of transforms; a
multi-dim transform has N = the product of its sizes. A normalisation (the inverse's 1/n,
``norm="ortho"``/``"forward"``) is one multiply per real output value (2 per complex
element). 0 MACs. Only the FFT kernels' own counts are compared (the casts, pads and
window products around them belong to other families).
"""

from __future__ import annotations

import pytest
import torch
from helpers import layer_backward, meta, ops_on

from flopsight.formulas import REGISTRY, Cost

aten = torch.ops.aten
fft = torch.fft


def R(*shape):
    return torch.randn(*shape)


def C(*shape):
    return torch.randn(*shape, dtype=torch.complex64)


def fft_ops(fn, *args):
    """{fft kernel: (calls, macs, flops)} of ``fn(*args)``, the same on CPU and meta."""
    cpu = {k: v for k, v in ops_on("cpu", fn, *args).items() if "_fft_" in k}
    on_meta = {k: v for k, v in ops_on("meta", fn, *args).items() if "_fft_" in k}
    assert on_meta == cpu
    return cpu


CASES = [
    # 3 complex transforms of 8 points: 3 * 5*8*log2(8) = 3 * 120
    pytest.param(fft.fft, (C(3, 8),), {"aten._fft_c2c": (1, 0, 360)}, id="fft complex"),
    # a real input runs as r2c (the other half by symmetry, free): 3 * 2.5*8*3 = 180
    pytest.param(fft.fft, (R(3, 8),), {"aten._fft_r2c": (1, 0, 180)}, id="fft real"),
    # the inverse scales by 1/8: 360 + 2 per complex output element, 2 * 24
    pytest.param(fft.ifft, (C(3, 8),), {"aten._fft_c2c": (1, 0, 360 + 48)}, id="ifft"),
    # norm="ortho" scales the forward transform too
    pytest.param(lambda x: fft.fft(x, norm="ortho"), (C(3, 8),), {"aten._fft_c2c": (1, 0, 408)}, id="fft ortho"),
    # rfft: 3 * 2.5*8*3 = 180 (output (3, 5))
    pytest.param(fft.rfft, (R(3, 8),), {"aten._fft_r2c": (1, 0, 180)}, id="rfft"),
    # irfft of (3, 5) -> (3, 8) real: 2.5*8*3 per row over the *output* length = 180, + 24
    # real outputs scaled by 1/8
    pytest.param(fft.irfft, (C(3, 5),), {"aten._fft_c2r": (1, 0, 180 + 24)}, id="irfft"),
    # zero-padded to n=16 first: 2.5*16*log2(16) = 160
    pytest.param(lambda x: fft.fft(x, n=16), (R(8),), {"aten._fft_r2c": (1, 0, 160)}, id="fft n=16"),
    # a length that is not a power of two: 5*6*log2(6) = 77.55 -> 78
    pytest.param(fft.fft, (C(6),), {"aten._fft_c2c": (1, 0, 78)}, id="fft n=6"),
    # fft2 over (4, 8), batch 2: N = 32, 2 * 5*32*log2(32) = 1600 (the real input is cast to
    # complex first: a copy)
    pytest.param(fft.fft2, (R(2, 4, 8),), {"aten._fft_c2c": (1, 0, 1600)}, id="fft2"),
    # fftn over all 3 dims: N = 64, 5*64*6 = 1920
    pytest.param(fft.fftn, (C(2, 4, 8),), {"aten._fft_c2c": (1, 0, 1920)}, id="fftn"),
    # rfft2 over (4, 8): 2 * 2.5*32*5 = 800
    pytest.param(fft.rfft2, (R(2, 4, 8),), {"aten._fft_r2c": (1, 0, 800)}, id="rfft2"),
    # irfft2 (2, 4, 5) -> (2, 4, 8): 800, + 64 real outputs scaled
    pytest.param(fft.irfft2, (C(2, 4, 5),), {"aten._fft_c2r": (1, 0, 864)}, id="irfft2"),
    # hfft (3, 5) -> (3, 8) real: a c2r, 180, unscaled (a forward transform; its input is
    # conjugated first: free)
    pytest.param(fft.hfft, (C(3, 5),), {"aten._fft_c2r": (1, 0, 180)}, id="hfft"),
    # stft: 64 samples, reflect-padded by 8 on each side to 80, frames 1 + (80-16)//4 = 17,
    # each a 16-point rfft: 17 * 2.5*16*4 = 2720 (the window product is elementwise)
    pytest.param(lambda x, w: torch.stft(x, 16, window=w, return_complex=True), (R(64), torch.hann_window(16)),
                 {"aten._fft_r2c": (1, 0, 2720)}, id="stft"),
]


@pytest.mark.parametrize("fn, args, expected", CASES)
def test_fft(fn, args, expected):
    assert fft_ops(fn, *args) == expected


def test_fft_backward_runs_the_transform_again():
    """rfft's gradient is a full complex transform of the (zero-padded) output gradient:
    3 * 5*8*3 = 360, where the forward cost 180."""
    _, ops = layer_backward("cpu", lambda x: fft.rfft(x).real, R(3, 8).requires_grad_())
    assert ops["aten._fft_c2c"] == (1, 0, 360)


def test_fnet_mixing_layer():
    """FNet mixes tokens with ``fftn`` over (sequence, hidden) of a real input cast to
    complex: one c2c of N = L*H points per sequence."""
    transformers = pytest.importorskip("transformers")
    L, H, layers = 16, 32, 2
    config = transformers.FNetConfig(vocab_size=100, hidden_size=H, intermediate_size=64, num_hidden_layers=layers)
    model = transformers.FNetModel(config).eval()
    ids = torch.randint(0, 100, (1, L))
    # 5 * L*H * log2(L*H) = 5 * 512 * 9 per layer
    assert fft_ops(model, ids) == {"aten._fft_c2c": (layers, 0, layers * 5 * 512 * 9)}


def test_formulas_read_shapes_only():
    """Called through the registry on meta tensors, with the kernels' own arguments."""
    c2r = REGISTRY.resolve(aten._fft_c2r.default)
    # c2r over dims (0, 1) of a (4, 8) real output, unnormalised: 2.5 * 32 * log2(32) = 400
    assert c2r.cost(meta(4, 8), (meta(4, 5, dtype=torch.complex64), [0, 1], 0, 8), {}) == Cost(0, 400)
    # the .out overload: the same, the out= buffer is the result
    out = meta(4, 8)
    c2r_out = REGISTRY.resolve(aten._fft_c2r.out)
    assert c2r_out.cost(out, (meta(4, 5, dtype=torch.complex64), [0, 1], 0, 8), {"out": out}) == Cost(0, 400)
