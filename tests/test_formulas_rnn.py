"""RNN / GRU / LSTM (networks and cells): hand-derived counts, device independence, and
agreement of the unit formulas with the op-by-op count of the decomposed kernels.

Notation in the derivations: I input size, H hidden size, G gate width (RNN H, GRU 3H,
LSTM 4H), R recurrent state size (H, or proj_size), rows = timesteps * batch rows.
Per row, layer and direction: MACs = G*I + G*R (+ H*R with projections);
FLOPs = 2*MACs + 2*G (biases) + e*H with e = RNN 2, GRU 10, LSTM 13.
"""

from __future__ import annotations

import pytest
import torch
from helpers import formula_of, measure_cpu_meta, measure_on, meta, schema_cost, to_device
from models import Tagger
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

import flopsight
from flopsight.formulas import REGISTRY, Cost

aten = torch.ops.aten

# torch warns (once) that oneDNN cannot run LSTM projections and falls back: expected here.
pytestmark = pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")


# the global formulas without units: the RNN functions decompose and are counted op by op
OP_BY_OP = REGISTRY.copy(units=False)


def call(module, *inputs):
    return module(*inputs)


LENGTHS = [5, 3, 2]  # sum = 10 rows


def call_packed(module, padded):
    return module(pack_padded_sequence(padded, LENGTHS))


def x(*shape):
    return torch.randn(*shape)


# I=3, H=4, T=5, B=2 -> rows = 10 unless noted.
CASES = {
    # G=4: MACs/row 4*3 + 4*4 = 28; FLOPs/row 2*28 + 2*4 + 2*4 = 72
    "rnn_tanh": (lambda: nn.RNN(3, 4), call, x(5, 2, 3), (10 * 28, 10 * 72)),
    "rnn_relu": (lambda: nn.RNN(3, 4, nonlinearity="relu"), call, x(5, 2, 3), (10 * 28, 10 * 72)),
    # no bias: FLOPs/row 2*28 + 2*4
    "rnn_no_bias": (lambda: nn.RNN(3, 4, bias=False), call, x(5, 2, 3), (10 * 28, 10 * 64)),
    # unbatched (T, I) input: rows = T = 5
    "rnn_unbatched": (lambda: nn.RNN(3, 4), call, x(5, 3), (5 * 28, 5 * 72)),
    # G=12: MACs/row 12*3 + 12*4 = 84; FLOPs/row 2*84 + 2*12 + 10*4 = 232
    "gru": (lambda: nn.GRU(3, 4), call, x(5, 2, 3), (10 * 84, 10 * 232)),
    "gru_batch_first": (lambda: nn.GRU(3, 4, batch_first=True), call, x(2, 5, 3), (10 * 84, 10 * 232)),
    # layer 1 reads H=4: MACs/row 12*4 + 12*4 = 96; FLOPs/row 2*96 + 24 + 40 = 256
    "gru_2_layers": (lambda: nn.GRU(3, 4, num_layers=2), call, x(5, 2, 3), (10 * (84 + 96), 10 * (232 + 256))),
    # G=16: MACs/row 16*3 + 16*4 = 112; FLOPs/row 2*112 + 2*16 + 13*4 = 308
    "lstm": (lambda: nn.LSTM(3, 4), call, x(5, 2, 3), (10 * 112, 10 * 308)),
    # no bias: FLOPs/row 2*112 + 13*4 = 276
    "lstm_no_bias": (lambda: nn.LSTM(3, 4, bias=False), call, x(5, 2, 3), (10 * 112, 10 * 276)),
    "lstm_batch_first": (lambda: nn.LSTM(3, 4, batch_first=True), call, x(2, 5, 3), (10 * 112, 10 * 308)),
    # bidirectional, 2 layers: layer 1 reads 2*H = 8: MACs/row 16*8 + 16*4 = 192,
    # FLOPs/row 2*192 + 32 + 52 = 468; both directions: rows * 2
    "lstm_bidir_2_layers": (
        lambda: nn.LSTM(3, 4, num_layers=2, bidirectional=True), call, x(5, 2, 3),
        (20 * (112 + 192), 20 * (308 + 468)),
    ),
    # proj_size P=2: MACs/row 16*3 + 16*2 (W_hh reads h of size P) + 4*2 (W_hr) = 88;
    # FLOPs/row 2*88 + 32 + 52 = 260
    "lstm_proj": (lambda: nn.LSTM(3, 4, proj_size=2), call, x(5, 2, 3), (10 * 88, 10 * 260)),
    # + bidirectional 2 layers: layer 1 reads 2*P = 4: MACs/row 16*4 + 16*2 + 8 = 104,
    # FLOPs/row 2*104 + 32 + 52 = 292
    "lstm_proj_bidir_2_layers": (
        lambda: nn.LSTM(3, 4, proj_size=2, num_layers=2, bidirectional=True), call, x(5, 2, 3),
        (20 * (88 + 104), 20 * (260 + 292)),
    ),
    # PackedSequence, lengths [5, 3, 2] in a (T=5, B=3) batch: sum = 10 rows, not 15
    "lstm_packed": (lambda: nn.LSTM(3, 4), call_packed, x(5, 3, 3), (10 * 112, 10 * 308)),
    "gru_packed_bidir": (lambda: nn.GRU(3, 4, bidirectional=True), call_packed, x(5, 3, 3), (20 * 84, 20 * 232)),
    "rnn_packed": (lambda: nn.RNN(3, 4), call_packed, x(5, 3, 3), (10 * 28, 10 * 72)),
    # cells, batch 2 (one step)
    "lstm_cell": (lambda: nn.LSTMCell(3, 4), call, x(2, 3), (2 * 112, 2 * 308)),
    "lstm_cell_no_bias": (lambda: nn.LSTMCell(3, 4, bias=False), call, x(2, 3), (2 * 112, 2 * 276)),
    "lstm_cell_unbatched": (lambda: nn.LSTMCell(3, 4), call, x(3), (112, 308)),
    "gru_cell": (lambda: nn.GRUCell(3, 4), call, x(2, 3), (2 * 84, 2 * 232)),
    "rnn_tanh_cell": (lambda: nn.RNNCell(3, 4), call, x(2, 3), (2 * 28, 2 * 72)),
    "rnn_relu_cell": (lambda: nn.RNNCell(3, 4, nonlinearity="relu"), call, x(2, 3), (2 * 28, 2 * 72)),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_hand_derived_on_cpu_and_meta(name, grad):
    make, fn, inp, expected = CASES[name]
    torch.manual_seed(0)
    module = make()
    with torch.set_grad_enabled(grad):
        assert measure_cpu_meta(fn, module, inp) == expected


# The op-by-op count of the decomposed kernels (meta: addmm/sigmoid_/tanh/mul...; CPU:
# the same for GRU/RNN and cells, one mkldnn_rnn_layer per layer and direction for LSTM)
# equals the unit formula: the element-wise constants are exactly what the kernels run.
OP_BY_OP_CASES = [n for n in CASES if n != "rnn_unbatched"]


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("name", OP_BY_OP_CASES)
def test_unit_equals_op_by_op(name, device):
    make, fn, inp, expected = CASES[name]
    torch.manual_seed(0)
    with torch.no_grad():
        assert measure_on(device, fn, make(), inp, registry=OP_BY_OP) == expected


def test_lstm_on_cpu_runs_the_fused_kernel_counted_at_dispatch():
    """Without the unit, CPU nn.LSTM is one aten.mkldnn_rnn_layer per layer and direction."""
    lstm = nn.LSTM(3, 4, num_layers=2, bidirectional=True)
    args = (torch.randn(5, 2, 3),)
    with torch.no_grad(), flopsight.Profiler(registry=OP_BY_OP) as prof:
        lstm(*args)
    ops = prof.result.ops()
    assert ops["aten.mkldnn_rnn_layer"].calls == 4  # 2 layers * 2 directions
    assert ops["aten.mkldnn_rnn_layer"].macs == 20 * (112 + 192)


@pytest.mark.parametrize(
    "make, expected_eval, dropout_flops",
    [
        # 3 layers: dropout after layers 0 and 1 in training: 2 * rows * H = 2 * 10 * 4
        (lambda: nn.GRU(3, 4, num_layers=3, dropout=0.5), (10 * (84 + 96 + 96), 10 * (232 + 256 + 256)), 2 * 10 * 4),
        # bidirectional LSTM: the dropped layer-0 output is rows * 2H = 10 * 8
        (lambda: nn.LSTM(3, 4, num_layers=2, dropout=0.3, bidirectional=True),
         (20 * (112 + 192), 20 * (308 + 468)), 10 * 8),
        # proj_size: the dropped output is rows * 2P = 10 * 4
        (lambda: nn.LSTM(3, 4, num_layers=2, dropout=0.3, bidirectional=True, proj_size=2),
         (20 * (88 + 104), 20 * (260 + 292)), 10 * 4),
    ],
)
def test_inter_layer_dropout_counts_only_in_training(make, expected_eval, dropout_flops):
    torch.manual_seed(0)
    module = make()
    inp = torch.randn(5, 2, 3)
    macs, flops = expected_eval
    assert measure_cpu_meta(module.train(), inp) == (macs, flops + dropout_flops)
    assert measure_on("cpu", module.eval(), inp) == (macs, flops)


# -- direct calls of the functions, in both overloads and by keyword --------------------------
def test_functional_calls_by_keyword_and_packed_overload():
    lstm = nn.LSTM(3, 4)
    params = lstm._flat_weights
    inp = torch.randn(5, 2, 3)
    hx = (torch.zeros(1, 2, 4), torch.zeros(1, 2, 4))
    # padded overload, all by keyword
    assert measure_on("cpu", lambda: torch.lstm(
        input=inp, hx=hx, params=params, has_biases=True, num_layers=1, dropout=0.0, train=False,
        bidirectional=False, batch_first=False)) == (10 * 112, 10 * 308)
    # packed overload, positional: (data, batch_sizes, hx, params, ...)
    packed = pack_padded_sequence(torch.randn(5, 3, 3), LENGTHS)
    hx3 = (torch.zeros(1, 3, 4), torch.zeros(1, 3, 4))
    assert measure_on("cpu", lambda: torch.lstm(
        packed.data, packed.batch_sizes, hx3, params, True, 1, 0.0, False, False)) == (10 * 112, 10 * 308)
    # packed overload by keyword (GRU: hx is a tensor, as in the padded overload)
    gru = nn.GRU(3, 4)
    assert measure_on("cpu", lambda: torch.gru(
        data=packed.data, batch_sizes=packed.batch_sizes, hx=torch.zeros(1, 3, 4), params=gru._flat_weights,
        has_biases=True, num_layers=1, dropout=0.0, train=False, bidirectional=False)) == (10 * 84, 10 * 232)
    # packed, positional up to hx and keywords after it
    assert measure_on("cpu", lambda: torch.gru(
        packed.data, packed.batch_sizes, torch.zeros(1, 3, 4), params=gru._flat_weights, has_biases=True,
        num_layers=1, dropout=0.0, train=False, bidirectional=False)) == (10 * 84, 10 * 232)
    # padded RNN, hx positional (a float tensor, where the packed overload has batch_sizes)
    rnn = nn.RNN(3, 4, bias=False)
    assert measure_on("cpu", lambda: torch.rnn_tanh(
        inp, torch.zeros(1, 2, 4), rnn._flat_weights, False, 1, 0.0, False, False, False)) == (10 * 28, 10 * 64)
    # a cell with only one bias: FLOPs/row 2*112 + 16 + 52
    cell = nn.LSTMCell(3, 4)
    assert measure_on("cpu", lambda: torch.lstm_cell(
        torch.randn(2, 3), (torch.zeros(2, 4), torch.zeros(2, 4)), cell.weight_ih, cell.weight_hh, cell.bias_ih,
    )) == (2 * 112, 2 * (224 + 16 + 52))


def test_units_are_registered_under_their_names():
    for fn, name in [(torch.lstm, "lstm"), (torch.gru, "gru"), (torch.rnn_tanh, "rnn_tanh"),
                     (torch.rnn_relu, "rnn_relu"), (torch._VF.lstm, "lstm"), (torch.lstm_cell, "lstm_cell"),
                     (torch.gru_cell, "gru_cell"), (torch.rnn_tanh_cell, "rnn_tanh_cell"),
                     (torch.rnn_relu_cell, "rnn_relu_cell")]:
        assert REGISTRY.unit(fn).name == name
    for op in (aten.mkldnn_rnn_layer, aten._cudnn_rnn, aten.miopen_rnn, aten._thnn_fused_lstm_cell,
               aten._thnn_fused_gru_cell, aten.lstm, aten.gru, aten.rnn_tanh, aten.rnn_relu, aten._lstm_mps):
        assert REGISTRY.is_registered(op)


# -- fused GPU kernels, called with the arguments torch passes them ----------------------------
def _cudnn_args(module: nn.RNNBase, inp, mode, batch_sizes=(), train=False):
    """What at::native::_cudnn_impl passes to aten._cudnn_rnn for ``module``."""
    proj = getattr(module, "proj_size", 0)
    dirs = 2 if module.bidirectional else 1
    hx = meta(module.num_layers * dirs, 3, proj or module.hidden_size)
    cx = meta(module.num_layers * dirs, 3, module.hidden_size) if mode == 2 else None
    stride = (4 if module.bias else 2) + (1 if proj else 0)
    return (inp, [w.to("meta") for w in module._flat_weights], stride, None, hx, cx, mode, module.hidden_size, proj,
            module.num_layers, module.batch_first, module.dropout, train, module.bidirectional, list(batch_sizes), None)


@pytest.mark.parametrize(
    "make, mode, inp, batch_sizes, expected",
    [
        (lambda: nn.LSTM(3, 4, num_layers=2, bidirectional=True), 2, meta(5, 2, 3), (),
         (20 * (112 + 192), 20 * (308 + 468))),
        (lambda: nn.LSTM(3, 4, proj_size=2, num_layers=2, bidirectional=True), 2, meta(5, 2, 3), (),
         (20 * (88 + 104), 20 * (260 + 292))),
        (lambda: nn.LSTM(3, 4, bias=False), 2, meta(5, 2, 3), (), (10 * 112, 10 * 276)),
        (lambda: nn.GRU(3, 4, batch_first=True), 3, meta(2, 5, 3), (), (10 * 84, 10 * 232)),
        (lambda: nn.RNN(3, 4, nonlinearity="relu"), 0, meta(5, 2, 3), (), (10 * 28, 10 * 72)),
        # packed: input is the (sum(batch_sizes), I) data
        (lambda: nn.LSTM(3, 4), 2, meta(10, 3), (3, 3, 2, 1, 1), (10 * 112, 10 * 308)),
    ],
)
def test_cudnn_rnn(make, mode, inp, batch_sizes, expected):
    module = make()
    assert schema_cost(aten._cudnn_rnn, None, *_cudnn_args(module, inp, mode, batch_sizes)) == Cost(*expected)


def test_cudnn_rnn_counts_dropout_in_training():
    module = nn.GRU(3, 4, num_layers=3, dropout=0.5)
    args = _cudnn_args(module, meta(5, 2, 3), 3, train=True)
    expected = Cost(10 * (84 + 96 + 96), 10 * (232 + 256 + 256) + 2 * 10 * 4)
    assert schema_cost(aten._cudnn_rnn, None, *args) == expected


def test_miopen_rnn():
    module = nn.LSTM(3, 4, num_layers=2, bidirectional=True)
    a = _cudnn_args(module, meta(5, 2, 3), 2)
    args = a[:3] + a[4:8] + a[9:]  # no weight_buf, no proj_size
    assert schema_cost(aten.miopen_rnn, None, *args) == Cost(20 * (112 + 192), 20 * (308 + 468))


def test_cuda_cell_path_equals_the_unit():
    """On CUDA a cell step is mm(x, W_ih^T) + mm(h, W_hh^T) + a fused kernel with the biases."""
    mm = formula_of(aten.mm)
    x2, h = meta(2, 3), meta(2, 4)
    products = mm(None, x2, meta(3, 16)) + mm(None, h, meta(4, 16))
    fused = formula_of(aten._thnn_fused_lstm_cell)(None, meta(2, 16), meta(2, 16), meta(2, 4), meta(16), meta(16))
    assert fused == Cost(0, 2 * (2 * 16 + 13 * 4))
    assert products + fused == Cost(2 * 112, 2 * 308)  # nn.LSTMCell(3, 4), batch 2
    products = mm(None, x2, meta(3, 12)) + mm(None, h, meta(4, 12))
    fused = formula_of(aten._thnn_fused_gru_cell)(None, meta(2, 12), meta(2, 12), meta(2, 4), meta(12), meta(12))
    assert products + fused == Cost(2 * 84, 2 * 232)  # nn.GRUCell(3, 4), batch 2
    no_bias = formula_of(aten._thnn_fused_gru_cell)(None, meta(2, 12), meta(2, 12), meta(2, 4))
    assert no_bias == Cost(0, 2 * 10 * 4)


# -- attribution --------------------------------------------------------------------------
def test_lstm_module_gets_its_cost_and_a_latency():
    torch.manual_seed(0)
    model = Tagger()
    with torch.no_grad():
        result = flopsight.profile(model, torch.randn(2, 5, 3))
    assert result.unsupported_ops == {}
    lstm = result.module("lstm")
    assert (lstm.forward.macs, lstm.forward.flops) == (10 * 112, 10 * 308)
    assert set(lstm.ops["forward"]) >= {"lstm"}
    assert lstm.ops["forward"]["lstm"].calls == 1
    assert "aten.mkldnn_rnn_layer" not in lstm.ops["forward"]  # counted once, as the unit
    assert lstm.forward.latency > 0  # DeepSpeed reports 0 for RNN modules
    head = result.module("head")
    assert (head.forward.macs, head.forward.flops) == (2 * 4 * 2, 2 * 2 * 4 * 2 + 2 * 2)  # + bias
    assert result.total.forward.macs == lstm.forward.macs + head.forward.macs
    meta = flopsight.profile(to_device(model, "meta"), torch.randn(2, 5, 3, device="meta"))
    assert meta.module("lstm").forward.flops == lstm.forward.flops
