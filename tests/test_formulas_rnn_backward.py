"""Backward of RNN / GRU / LSTM (networks and cells): hand-derived counts of a real
``y.sum().backward()``, CPU = meta, agreement with the op-by-op count of the decomposed
backward, and the fused backward kernels' dispatch formulas.

Notation: I input size, H hidden size, G gate width (RNN H, GRU 3H, LSTM 4H), R recurrent
state size (H, or P = proj_size), rows = timesteps * batch rows. Per layer and direction
(see docs/conventions/rnn.md, "Backward"):

* MACs: dx = rows*G*I (if the layer input needs a gradient), dh_prev = prev*G*R, dW_ih =
  rows*G*I, dW_hh = rows*G*R (if they require grad), projection rows*H*P (+ rows*H*P for
  dW_hr), where ``prev`` = rows of the steps after the first (+ the first's if h0 requires
  grad): ``rows - B`` for a padded batch B.
* FLOPs: 2*MACs + gates + joins + bias sums (rows*G per bias requiring grad), with the
  element-wise gate gradients ``gates`` = rows*e*H, e = RNN 2, GRU 12, LSTM 15, and the
  joins of two gradients (1 add per element): GRU h (W_hh h and h - n) prev*H; h_t (output
  and next step) fan*R; LSTM c_t (tanh(c_t) and next step) fan*H; LSTM dc_prev = dc*f
  prev*H; with ``fan`` = rows of the steps before the last (``rows - B`` padded).
  Bidirectional layers add the two directions' input gradients: rows*I.

With I=3, H=4, 5 steps x batch 2: rows = 10, prev = fan = 8.
"""

from __future__ import annotations

import pytest
import torch
from helpers import formula_of, meta, schema_cost, to_device
from models import Tagger
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

import flopsight
from flopsight.formulas import REGISTRY, Cost
from flopsight.formulas.activation import activation_backward_flops
from flopsight.formulas.rnn import BACKWARD_ELEMENTWISE, gates_backward_flops

aten = torch.ops.aten

pytestmark = pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")


class Wrap(nn.Module):
    """The recurrent module under test as submodule ``rnn`` (packing done outside it)."""

    def __init__(self, rnn: nn.Module, lengths=None):
        super().__init__()
        self.rnn, self.lengths = rnn, lengths

    def forward(self, x, *state):
        if self.lengths:
            x = pack_padded_sequence(x, self.lengths)
        out = self.rnn(x, *state)
        out = out[0] if isinstance(out, tuple) else out  # networks: (output, h_n); LSTMCell: (h, c)
        return out.data if isinstance(out, PackedSequence) else out


def backward_on(device, make, x, *, x_grad=False, state=(), setup=None, lengths=None, registry=None):
    """(MACs, FLOPs) charged to the recurrent module by ``model(x).sum().backward()``."""
    torch.manual_seed(0)
    rnn = make()
    if setup is not None:
        setup(rnn)
    model = to_device(Wrap(rnn, lengths), device)
    x = fresh(x, device).requires_grad_(x_grad)
    state = fresh(state, device)
    with flopsight.Profiler(model, registry=registry) as prof:
        model(x, *state).sum().backward()
    result = prof.result
    assert result.unsupported_ops == {}
    stats = result.module("rnn").backward
    return stats.macs, stats.flops


def fresh(value, device):
    """A new leaf on ``device`` (requiring grad like ``value``), also inside tuples: each
    run gets its own, so no gradient flows back to (or accumulates in) the original."""
    if isinstance(value, tuple):
        return tuple(fresh(v, device) for v in value)
    return value.detach().to(device, copy=True).requires_grad_(value.requires_grad)


def backward_cpu_meta(make, x, **kwargs):
    cpu = backward_on("cpu", make, x, **kwargs)
    assert backward_on("meta", make, x, **kwargs) == cpu, "meta differs from CPU"
    return cpu


def frozen(*names):
    """A setup freezing the named parameters."""

    def setup(module):
        for name in names:
            getattr(module, name).requires_grad_(False)

    return setup


def layer(n):
    return [f"{w}_l{n}" for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]


def grad_state(*shape):
    return torch.zeros(*shape).requires_grad_()


def x(*shape):
    return torch.randn(*shape)


LENGTHS = [5, 3, 2]  # batch_sizes [3, 3, 2, 1, 1]: rows 10, largest batch 3, smallest 1

# name: (make, input, options, (MACs, FLOPs))
CASES = {
    # RNN, G=4. MACs: dh_prev 8*4*4 + dW_ih 10*4*3 + dW_hh 10*4*4 = 408
    # FLOPs: 2*408 + tanh backward 10*2*4 + h join 8*4 + bias sums 2*10*4 = 1008
    "rnn_tanh": (lambda: nn.RNN(3, 4), x(5, 2, 3), {}, (408, 1008)),
    "rnn_relu": (lambda: nn.RNN(3, 4, nonlinearity="relu"), x(5, 2, 3), {}, (408, 1008)),  # threshold_backward
    "rnn_no_bias": (lambda: nn.RNN(3, 4, bias=False), x(5, 2, 3), {}, (408, 1008 - 2 * 10 * 4)),
    # + dx 10*4*3 = 120 MACs
    "rnn_input_grad": (lambda: nn.RNN(3, 4), x(5, 2, 3), {"x_grad": True}, (528, 2 * 528 + 80 + 32 + 80)),
    # packed, forward direction: prev = 10 - 3 (the first step's batch), fan = 10 - 1 (the last's)
    # MACs 7*4*4 + 10*4*3 + 10*4*4 = 392; FLOPs 2*392 + 10*2*4 + 9*4 + 2*10*4
    "rnn_packed": (lambda: nn.RNN(3, 4), x(5, 3, 3), {"lengths": LENGTHS}, (392, 2 * 392 + 80 + 36 + 80)),
    # GRU, G=12. MACs: 8*12*4 + 10*12*3 + 10*12*4 = 1224
    # FLOPs: 2*1224 + gates 10*12*4 + h joins 8*4 (in the cell) + 8*4 (output) + bias 2*10*12 = 3232
    "gru": (lambda: nn.GRU(3, 4), x(5, 2, 3), {}, (1224, 3232)),
    "gru_batch_first": (lambda: nn.GRU(3, 4, batch_first=True), x(2, 5, 3), {}, (1224, 3232)),
    # 2 layers, bidirectional: layer 0 per direction (1224, 3232); layer 1 reads I = 8 and
    # needs dx: MACs 8*12*4 + 2*10*12*8 + 10*12*4 = 2784, FLOPs 2*2784 + 480 + 32 + 32 + 240 = 6352;
    # the two directions' layer-1 input gradients are added: 10*8
    "gru_bidir_2_layers": (
        lambda: nn.GRU(3, 4, num_layers=2, bidirectional=True), x(5, 2, 3), {},
        (2 * 1224 + 2 * 2784, 2 * 3232 + 2 * 6352 + 80),
    ),
    # packed bidirectional: forward prev 7, fan 9; reverse (smallest batch first) prev 9, fan 7
    # forward: MACs 7*12*4 + 10*12*3 + 10*12*4 = 1176, FLOPs 2*1176 + 480 + 7*4 + 9*4 + 240
    # reverse: MACs 9*12*4 + 840 = 1272, FLOPs 2*1272 + 480 + 9*4 + 7*4 + 240
    "gru_packed_bidir": (
        lambda: nn.GRU(3, 4, bidirectional=True), x(5, 3, 3), {"lengths": LENGTHS},
        (1176 + 1272, (2352 + 480 + 28 + 36 + 240) + (2544 + 480 + 36 + 28 + 240)),
    ),
    # layer 0 frozen, input without grad: layer 0 computes nothing; layer 1 (I=4) no dx:
    # MACs 8*12*4 + 10*12*4 + 10*12*4 = 1344, FLOPs 2*1344 + 480 + 32 + 32 + 240
    "gru_2_layers_layer0_frozen": (
        lambda: nn.GRU(3, 4, num_layers=2), x(5, 2, 3), {"setup": frozen(*layer(0))}, (1344, 2 * 1344 + 784),
    ),
    # layer 1 frozen: layer 0 (1224, 3232); layer 1: dh_prev 8*12*4 + dx 10*12*4 = 864 MACs;
    # its first step's hidden side (W_hn h0 + b_hn) needs no gradient: gates 8*12*4 + 2*11*4;
    # FLOPs 2*864 + 384 + 88 + 32 + 32, no bias sums
    "gru_2_layers_layer1_frozen": (
        lambda: nn.GRU(3, 4, num_layers=2), x(5, 2, 3), {"setup": frozen(*layer(1))},
        (1224 + 864, 3232 + 2 * 864 + 384 + 88 + 32 + 32),
    ),
    # training with dropout 0.5 between 3 layers: layer 0 (1224, 3232), layers 1 and 2 (I=4):
    # MACs 8*12*4 + 3*10*12*4 = 1824, FLOPs 2*1824 + 480 + 32 + 32 + 240 = 4432; the dropout
    # backward after layers 0 and 1: 2 * 10*4
    "gru_3_layers_dropout": (
        lambda: nn.GRU(3, 4, num_layers=3, dropout=0.5), x(5, 2, 3), {},
        (1224 + 2 * 1824, 3232 + 2 * 4432 + 2 * 10 * 4),
    ),
    # LSTM, G=16. MACs: 8*16*4 + 10*16*3 + 10*16*4 = 1632
    # FLOPs: 2*1632 + gates 10*15*4 + dc_prev 8*4 + joins h 8*4, c 8*4 + bias 2*10*16 = 4280
    "lstm": (lambda: nn.LSTM(3, 4), x(5, 2, 3), {}, (1632, 4280)),
    "lstm_no_bias": (lambda: nn.LSTM(3, 4, bias=False), x(5, 2, 3), {}, (1632, 4280 - 320)),
    "lstm_batch_first": (lambda: nn.LSTM(3, 4, batch_first=True), x(2, 5, 3), {}, (1632, 4280)),
    # + dx 10*16*3 = 480 MACs
    "lstm_input_grad": (lambda: nn.LSTM(3, 4), x(5, 2, 3), {"x_grad": True}, (2112, 4280 + 960)),
    # h0 and c0 require grad: prev = 10 (the first step too): dh_prev 10*16*4, dc_prev 10*4
    # MACs 640 + 480 + 640 = 1760; FLOPs 2*1760 + 600 + 40 + 32 + 32 + 320
    "lstm_state_grad": (
        lambda: nn.LSTM(3, 4), x(5, 2, 3), {"state": ((grad_state(1, 2, 4), grad_state(1, 2, 4)),)},
        (1760, 2 * 1760 + 600 + 40 + 64 + 320),
    ),
    # 2 layers, h0 and c0 require grad: layer 0 as above, without dx: (1760, 4544); layer 1
    # (I=4) needs dx (its input depends on h0, c0): MACs 640 + 10*16*4 + 10*16*4 + 640 = 2560,
    # FLOPs 2*2560 + 600 + 40 + 64 + 320
    "lstm_2_layers_state_grad": (
        lambda: nn.LSTM(3, 4, num_layers=2), x(5, 2, 3), {"state": ((grad_state(2, 2, 4), grad_state(2, 2, 4)),)},
        (1760 + 2560, 4544 + 2 * 2560 + 600 + 40 + 64 + 320),
    ),
    # weights frozen, biases trainable, input grad: MACs dh_prev 512 + dx 480 = 992;
    # FLOPs 2*992 + 600 + 32 + 64 + bias sums 320
    "lstm_weights_frozen": (
        lambda: nn.LSTM(3, 4), x(5, 2, 3), {"x_grad": True, "setup": frozen("weight_ih_l0", "weight_hh_l0")},
        (992, 2 * 992 + 600 + 32 + 64 + 320),
    ),
    # everything frozen, only the input needs a gradient: the same without the bias sums
    "lstm_all_frozen": (
        lambda: nn.LSTM(3, 4), x(5, 2, 3), {"x_grad": True, "setup": frozen(*layer(0))},
        (992, 2 * 992 + 600 + 32 + 64),
    ),
    # 2 layers, bidirectional: layer 0 per direction (1632, 4280); layer 1 (I=8, dx):
    # MACs 512 + 2*10*16*8 + 640 = 3712, FLOPs 2*3712 + 600 + 32 + 64 + 320 = 8440; + 10*8
    "lstm_bidir_2_layers": (
        lambda: nn.LSTM(3, 4, num_layers=2, bidirectional=True), x(5, 2, 3), {},
        (2 * 1632 + 2 * 3712, 2 * 4280 + 2 * 8440 + 80),
    ),
    # P=2, R=2: MACs d(o*tanh c) 10*4*2 + dW_hr 10*4*2 + dh_prev 8*16*2 + dW_ih 480 + dW_hh 10*16*2
    # = 1216; FLOPs 2*1216 + 600 + dc_prev 32 + joins h 8*2, c 8*4 + 320 = 3432
    "lstm_proj": (lambda: nn.LSTM(3, 4, proj_size=2), x(5, 2, 3), {}, (1216, 3432)),
    # W_hr frozen: - 80 MACs
    "lstm_proj_w_hr_frozen": (
        lambda: nn.LSTM(3, 4, proj_size=2), x(5, 2, 3), {"setup": frozen("weight_hr_l0")}, (1136, 3432 - 160),
    ),
    # + bidirectional 2 layers: layer 1 reads 2P = 4: MACs 80 + 80 + 256 + 2*10*16*4 + 320 = 2016,
    # FLOPs 2*2016 + 600 + 32 + 16 + 32 + 320 = 5032; the input-gradient add 10*4
    "lstm_proj_bidir_2_layers": (
        lambda: nn.LSTM(3, 4, proj_size=2, num_layers=2, bidirectional=True), x(5, 2, 3), {},
        (2 * 1216 + 2 * 2016, 2 * 3432 + 2 * 5032 + 40),
    ),
    # packed: prev 7, fan 9: MACs 7*16*4 + 480 + 640 = 1568; FLOPs 2*1568 + 600 + 28 + 36 + 36 + 320
    "lstm_packed": (lambda: nn.LSTM(3, 4), x(5, 3, 3), {"lengths": LENGTHS}, (1568, 2 * 1568 + 600 + 28 + 72 + 320)),
    # cells, batch 2 (one step, the state zeros: no dh_prev)
    # LSTM cell: MACs 2*16*3 + 2*16*4 = 224; FLOPs 2*224 + gates 2*15*4 + bias 2*2*16 = 632
    "lstm_cell": (lambda: nn.LSTMCell(3, 4), x(2, 3), {}, (224, 632)),
    "lstm_cell_input_grad": (lambda: nn.LSTMCell(3, 4), x(2, 3), {"x_grad": True}, (224 + 96, 632 + 192)),
    "lstm_cell_unbatched": (lambda: nn.LSTMCell(3, 4), x(3), {}, (112, 224 + 60 + 32)),
    # the incoming state requires grad (a step of a loop): dh_prev 2*16*4, dc_prev 2*4, and
    # the joins with the state's other use: h 2*4, c 2*4
    "lstm_cell_state_grad": (
        lambda: nn.LSTMCell(3, 4), x(2, 3), {"state": ((grad_state(2, 4), grad_state(2, 4)),)},
        (224 + 128, 2 * 352 + 120 + 8 + 16 + 64),
    ),
    # GRU cell: MACs 2*12*3 + 2*12*4 = 168; FLOPs 2*168 + 2*12*4 + 2*2*12 = 480
    "gru_cell": (lambda: nn.GRUCell(3, 4), x(2, 3), {}, (168, 480)),
    "gru_cell_no_bias": (lambda: nn.GRUCell(3, 4, bias=False), x(2, 3), {}, (168, 480 - 48)),
    # + dh_prev 2*12*4; h joins 2*4 (in the cell) + 2*4 (its other use)
    "gru_cell_state_grad": (
        lambda: nn.GRUCell(3, 4), x(2, 3), {"state": (grad_state(2, 4),)}, (168 + 96, 2 * 264 + 96 + 16 + 48),
    ),
    # RNN cell: MACs 2*4*3 + 2*4*4 = 56; FLOPs 2*56 + 2*2*4 + 2*2*4 = 144
    "rnn_tanh_cell": (lambda: nn.RNNCell(3, 4), x(2, 3), {}, (56, 144)),
    "rnn_relu_cell": (lambda: nn.RNNCell(3, 4, nonlinearity="relu"), x(2, 3), {}, (56, 144)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_hand_derived_on_cpu_and_meta(name):
    make, inp, options, expected = CASES[name]
    assert backward_cpu_meta(make, inp, **options) == expected


def test_gate_constants():
    # one activation backward (2) per activation, one FLOP per chain-rule multiply/negation/join
    assert BACKWARD_ELEMENTWISE == {"rnn": 2, "gru": 3 * 2 + 6, "lstm": 5 * 2 + 5}
    assert gates_backward_flops("gru", 4, hidden_gates=False) == 4 * (12 - 1)
    assert activation_backward_flops(1) == 2


def test_loop_of_cells_costs_what_the_network_costs():
    """nn.LSTMCell stepped over 5 steps, its state passed on, costs what nn.LSTM costs on
    the same sequence: each step after the first has an incoming state requiring grad."""
    torch.manual_seed(0)
    for device in ("cpu", "meta"):
        cell = to_device(nn.LSTMCell(3, 4), device)
        inp = torch.randn(5, 2, 3, device=device)
        with flopsight.Profiler(cell) as prof:
            state, outs = None, []
            for t in range(5):
                state = cell(inp[t], state)
                outs.append(state[0])
            torch.stack(outs).sum().backward()
        assert prof.result.unsupported_ops == {}
        stats = prof.result.module("").backward
        assert (stats.macs, stats.flops) == CASES["lstm"][3]  # (1632, 4280)


# -- agreement with the decomposed backward, op by op --------------------------------------
# the global formulas without units: the RNN functions decompose and are counted op by op
OP_BY_OP = REGISTRY.copy(units=False)

# The decomposed backward computes each step's weight gradients apart (a product over the
# step's B rows) and adds them up over the T steps: (T - 1) adds per weight element that
# the convention counts inside the one product over all rows (what a fused kernel runs).
# On CPU the input-side products of a padded sequence run once over all steps (no
# accumulation), on meta step by step. Per layer and direction, T = 5:
#   CPU:  4 * (G*R [W_hh] + G [b_hh] + H*P [W_hr]);   meta: + 4 * (G*I [W_ih] + G [b_ih]).
# Packed on CPU: the input projection of all rows is computed once and narrowed per step;
# each step's gradient is padded back to (rows, G) and summed: 4 * rows*G more adds.
# name: (accumulation adds on CPU, on meta); None: not decomposed on CPU (oneDNN LSTM).
OP_BY_OP_CASES = {
    "rnn_tanh": (4 * (16 + 4), 4 * (16 + 4 + 12 + 4)),
    "rnn_relu": (4 * (16 + 4), 4 * (16 + 4 + 12 + 4)),
    "rnn_no_bias": (4 * 16, 4 * (16 + 12)),
    "rnn_input_grad": (4 * (16 + 4), 4 * (16 + 4 + 12 + 4)),
    "gru": (4 * (48 + 12), 4 * (48 + 12 + 36 + 12)),
    "gru_batch_first": (4 * (48 + 12), 4 * (48 + 12 + 36 + 12)),
    # layer 1 reads I = 8: W_ih is 12*8
    "gru_bidir_2_layers": (4 * 4 * (48 + 12), 2 * 4 * (48 + 12 + 36 + 12) + 2 * 4 * (48 + 12 + 96 + 12)),
    "gru_packed_bidir": (2 * 4 * (48 + 12 + 10 * 12), 2 * 4 * (48 + 12 + 36 + 12)),
    "gru_2_layers_layer0_frozen": (4 * (48 + 12), 4 * (48 + 12 + 48 + 12)),
    "gru_2_layers_layer1_frozen": (4 * (48 + 12), 4 * (48 + 12 + 36 + 12)),
    "lstm": (None, 4 * (64 + 16 + 48 + 16)),
    "lstm_no_bias": (None, 4 * (64 + 48)),
    "lstm_input_grad": (None, 4 * (64 + 16 + 48 + 16)),
    "lstm_bidir_2_layers": (None, 2 * 4 * (64 + 16 + 48 + 16) + 2 * 4 * (64 + 16 + 128 + 16)),
    "lstm_weights_frozen": (None, 4 * (16 + 16)),
    "lstm_state_grad": (None, 4 * (64 + 16 + 48 + 16)),
    "lstm_2_layers_state_grad": (None, 4 * (64 + 16 + 48 + 16) + 4 * (64 + 16 + 64 + 16)),
    # R = P = 2: W_hh 16*2, W_hr 2*4
    "lstm_proj": (4 * (32 + 16 + 8), 4 * (32 + 16 + 8 + 48 + 16)),
    "lstm_proj_w_hr_frozen": (4 * (32 + 16), 4 * (32 + 16 + 48 + 16)),
    "lstm_proj_bidir_2_layers": (
        4 * 4 * (32 + 16 + 8), 2 * 4 * (32 + 16 + 8 + 48 + 16) + 2 * 4 * (32 + 16 + 8 + 64 + 16),
    ),
    "lstm_packed": (4 * (64 + 16 + 10 * 16), 4 * (64 + 16 + 48 + 16)),
    "rnn_packed": (4 * (16 + 4 + 10 * 4), 4 * (16 + 4 + 12 + 4)),
    # one step: nothing to accumulate, the counts are equal
    "lstm_cell": (0, 0),
    "lstm_cell_input_grad": (0, 0),
    "gru_cell": (0, 0),
    "gru_cell_no_bias": (0, 0),
    "rnn_tanh_cell": (0, 0),
    "rnn_relu_cell": (0, 0),
}


@pytest.mark.parametrize(
    "name, device",
    # CPU nn.LSTM (no projections) runs the fused oneDNN kernel: see test_mkldnn_rnn_layer_backward
    [(name, device) for name, per_device in OP_BY_OP_CASES.items()
     for device, accumulation in zip(("cpu", "meta"), per_device) if accumulation is not None],
)
def test_unit_equals_op_by_op_less_the_time_accumulation(name, device):
    make, inp, options, expected = CASES[name]
    accumulation = OP_BY_OP_CASES[name][0 if device == "cpu" else 1]
    macs, flops = backward_on(device, make, inp, registry=OP_BY_OP, **options)
    assert (macs, flops - accumulation) == expected


def test_mkldnn_rnn_layer_backward():
    """Without the unit, CPU nn.LSTM's backward is one oneDNN kernel per layer and direction,
    which computes every gradient: dx 10*16*3 and dh_prev for all 10 rows (10*16*4) even when
    neither requires grad, dc_prev 10*4, and one bias gradient (10*16)."""
    macs, flops = backward_on("cpu", lambda: nn.LSTM(3, 4), torch.randn(5, 2, 3), registry=OP_BY_OP)
    assert macs == 480 + 640 + 480 + 640
    assert flops == 2 * macs + 600 + 40 + 64 + 160


# -- fused GPU kernels, called with the arguments torch passes them ---------------------------
def _cudnn_backward_args(module: nn.RNNBase, inp, mode, batch_sizes=(), train=False, mask=(True, True, True, True)):
    """What torch passes to aten._cudnn_rnn_backward for ``module`` (grad_output given)."""
    proj = getattr(module, "proj_size", 0)
    dirs = 2 if module.bidirectional else 1
    batch = batch_sizes[0] if batch_sizes else inp.shape[0 if module.batch_first else 1]
    hx = meta(module.num_layers * dirs, batch, proj or module.hidden_size)
    cx = meta(module.num_layers * dirs, batch, module.hidden_size) if mode == 2 else None
    stride = (4 if module.bias else 2) + (1 if proj else 0)
    out = meta(*inp.shape[:-1], (proj or module.hidden_size) * dirs)
    return (inp, [w.to("meta") for w in module._flat_weights], stride, meta(1), hx, cx, out, out, None, None, mode,
            module.hidden_size, proj, module.num_layers, module.batch_first, module.dropout, train,
            module.bidirectional, list(batch_sizes), None, meta(1), list(mask))


@pytest.mark.parametrize(
    "make, mode, inp, batch_sizes, mask, expected",
    [
        # LSTM(3, 4), batch 2: data gradients always: dx 480, dh_prev 10 rows 640, dc_prev 10*4;
        # weights 480 + 640 and both bias sums: MACs 2240, FLOPs 2*2240 + 600 + 40 + 64 + 320
        (lambda: nn.LSTM(3, 4), 2, meta(5, 2, 3), (), (True,) * 4, (2240, 4480 + 600 + 40 + 64 + 320)),
        # no weight gradients (output_mask[3] False): MACs 480 + 640
        (lambda: nn.LSTM(3, 4), 2, meta(5, 2, 3), (), (True, True, True, False), (1120, 2240 + 600 + 40 + 64)),
        # only output_mask[0]: the data backward still computes dhx, dcx
        (lambda: nn.LSTM(3, 4), 2, meta(5, 2, 3), (), (True, False, False, False), (1120, 2240 + 600 + 40 + 64)),
        # GRU(3, 4), batch_first: dx 360, dh_prev 10*12*4 = 480, weights 360 + 480:
        # FLOPs 2*1680 + 480 + h joins 10*4 + 8*4 + bias 240
        (lambda: nn.GRU(3, 4, batch_first=True), 3, meta(2, 5, 3), (), (True,) * 4, (1680, 3360 + 480 + 40 + 32 + 240)),
        # RNN relu: dx 120, dh_prev 160, weights 120 + 160: FLOPs 2*560 + 80 + 32 + 80
        (lambda: nn.RNN(3, 4, nonlinearity="relu"), 0, meta(5, 2, 3), (), (True,) * 4, (560, 1120 + 80 + 32 + 80)),
        # packed LSTM, batch_sizes [3, 3, 2, 1, 1]: dh_prev all 10 rows (hx gets a gradient),
        # fan 10 - 1: MACs 480 + 640 + 480 + 640, FLOPs 2*2240 + 600 + 40 + 36 + 36 + 320
        (lambda: nn.LSTM(3, 4), 2, meta(10, 3), (3, 3, 2, 1, 1), (True,) * 4, (2240, 4480 + 600 + 40 + 72 + 320)),
        # projections P=2: d(o tanh c) 80, dW_hr 80, dx 480, dh_prev 10*16*2, weights 480 + 320:
        # FLOPs 2*1760 + 600 + 40 + joins 8*2 + 8*4 + 320
        (lambda: nn.LSTM(3, 4, proj_size=2), 2, meta(5, 2, 3), (), (True,) * 4, (1760, 3520 + 600 + 40 + 48 + 320)),
    ],
)
def test_cudnn_rnn_backward(make, mode, inp, batch_sizes, mask, expected):
    args = _cudnn_backward_args(make(), inp, mode, batch_sizes, mask=mask)
    assert schema_cost(aten._cudnn_rnn_backward, None, *args) == Cost(*expected)


def test_cudnn_rnn_backward_counts_the_dropout_backward_in_training():
    # GRU(3, 4, num_layers=3, dropout=0.5): every layer computes dx and dh_prev for all rows;
    # layer 0: MACs 360 + 480 + 360 + 480 = 1680, layers 1, 2 (I=4): 480 * 4 = 1920;
    # FLOPs per layer 2*MACs + 480 + 40 + 32 + 240; dropout backward after layers 0, 1: 2 * 10*4
    module = nn.GRU(3, 4, num_layers=3, dropout=0.5)
    args = _cudnn_backward_args(module, meta(5, 2, 3), 3, train=True)
    per_layer = 480 + 40 + 32 + 240
    expected = (1680 + 2 * 1920, 2 * (1680 + 2 * 1920) + 3 * per_layer + 2 * 10 * 4)
    assert schema_cost(aten._cudnn_rnn_backward, None, *args) == Cost(*expected)


def test_cudnn_rnn_backward_without_any_gradient_is_free():
    # torch returns at once when grad_output, grad_hy and grad_cy are all missing
    args = list(_cudnn_backward_args(nn.GRU(3, 4), meta(5, 2, 3), 3))
    args[7] = None  # grad_output (grad_hy, grad_cy are None already)
    assert schema_cost(aten._cudnn_rnn_backward, None, *args) == Cost(0, 0)
    args[8] = meta(1, 2, 4)  # grad_hy only: the whole data backward runs (grad_output: zeros)
    assert schema_cost(aten._cudnn_rnn_backward, None, *args) == Cost(1680, 3360 + 480 + 40 + 32 + 240)


def test_miopen_rnn_backward():
    module = nn.LSTM(3, 4)
    a = _cudnn_backward_args(module, meta(5, 2, 3), 2)
    args = a[:12] + a[13:]  # no proj_size
    assert schema_cost(aten.miopen_rnn_backward, None, *args) == Cost(2240, 4480 + 600 + 40 + 64 + 320)


def test_lstm_mps_backward():
    module = nn.LSTM(3, 4)
    hx = [meta(1, 2, 4), meta(1, 2, 4)]
    args = (meta(5, 2, 4), None, None, meta(1), meta(1), meta(5, 2, 3), meta(1), hx,
            [w.to("meta") for w in module._flat_weights], True, 1, 0.0, True, False, False)
    assert schema_cost(aten.lstm_mps_backward, None, *args) == Cost(2240, 4480 + 600 + 40 + 64 + 320)


def test_fused_cell_backward_kernels():
    """The CUDA cells' element-wise backward (their products run as mm, counted apart)."""
    # LSTM, batch 2, H=4: gates 2*15*4, dcx 2*4 (always), the grad_cy join 2*4, one bias sum 2*16
    lstm = formula_of(aten._thnn_fused_lstm_cell_backward_impl)
    assert lstm(None, meta(2, 4), meta(2, 4), meta(2, 4), meta(2, 4), meta(2, 16), True) == Cost(0, 120 + 8 + 8 + 32)
    assert lstm(None, meta(2, 4), None, meta(2, 4), meta(2, 4), meta(2, 16), False) == Cost(0, 120 + 8)
    assert formula_of(aten._thnn_fused_lstm_cell_backward) is lstm
    # GRU: gates 2*12*4 (dhx's direct term g*z among them), two bias sums 2 * 2*12
    gru = formula_of(aten._thnn_fused_gru_cell_backward)
    assert gru(None, meta(2, 4), meta(2, 20), True) == Cost(0, 96 + 48)
    assert gru(None, meta(2, 4), meta(2, 20), False) == Cost(0, 96)


def test_units_have_backward_formulas():
    for fn, name in [(torch.lstm, "lstm"), (torch.gru, "gru"), (torch.rnn_tanh, "rnn_tanh"),
                     (torch.rnn_relu, "rnn_relu"), (torch.lstm_cell, "lstm_cell"), (torch.gru_cell, "gru_cell"),
                     (torch.rnn_tanh_cell, "rnn_tanh_cell"), (torch.rnn_relu_cell, "rnn_relu_cell")]:
        unit = REGISTRY.unit(fn)
        assert unit.name == name and unit.backward is not None and unit.backward.__name__ == f"{name}_backward"
    for op in (aten.mkldnn_rnn_layer_backward, aten._cudnn_rnn_backward, aten.miopen_rnn_backward,
               aten._thnn_fused_lstm_cell_backward, aten._thnn_fused_lstm_cell_backward_impl,
               aten._thnn_fused_gru_cell_backward, aten.lstm_mps_backward):
        assert REGISTRY.is_registered(op)


# -- a training step -------------------------------------------------------------------------
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_training_step_charges_the_lstm_backward_once(device):
    torch.manual_seed(0)
    model = to_device(Tagger(), device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, target = torch.randn(2, 5, 3, device=device), torch.randn(2, 2, device=device)
    with flopsight.Profiler(model) as prof:
        nn.functional.mse_loss(model(x), target).backward()
        optimizer.step()
    result = prof.result
    assert result.unsupported_ops == {}
    lstm = result.module("lstm")
    assert (lstm.backward.macs, lstm.backward.flops) == CASES["lstm"][3]  # (1632, 4280): see "lstm"
    ops = lstm.ops["backward"]
    assert ops["lstm.backward"].calls == 1
    assert (ops["lstm.backward"].macs, ops["lstm.backward"].flops) == (1632, 4280)
    assert not any(name.startswith("aten.") and ops[name].flops for name in ops)  # nothing else costs
    assert "aten.mkldnn_rnn_layer_backward" not in ops
    assert lstm.backward.latency > 0
    # head: Linear(4, 2) on 2 rows: dx 2*2*4 + dW 2*2*4 MACs, bias sum 2*2
    head = result.module("head")
    assert (head.backward.macs, head.backward.flops) == (32, 2 * 32 + 4)
