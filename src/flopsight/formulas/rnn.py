"""Recurrent networks: RNN (tanh/relu), GRU and LSTM, whole networks and single cells.

Why units: ``nn.LSTM`` on CPU runs one fused ``aten.mkldnn_rnn_layer`` per layer and
direction, on the meta device the same call decomposes into ``addmm``/``sigmoid_``/
``tanh``/``mul``..., ``nn.GRU``/``nn.RNN`` on CPU decompose as well, and on CUDA all three
run one ``aten._cudnn_rnn`` for the whole network. So the functions the modules call
(``torch.lstm``/``gru``/``rnn_tanh``/``rnn_relu``, and ``torch.lstm_cell``/``gru_cell``/
``rnn_tanh_cell``/``rnn_relu_cell`` for the cells) are counted as units from their
arguments, and every fused kernel is registered at dispatch with the same formula, so the
count is the same whichever path runs.

The convention, per timestep, per batch row, per layer and per direction, with ``H`` the
hidden size, ``G = gates * H`` the gate width (gates: RNN 1, GRU 3, LSTM 4), ``I`` the
layer's input size and ``R`` the size of the recurrent state ``h`` (``H``, or ``proj_size``
for an LSTM with projections)::

    MACs  = G*I + G*R (+ R*H for the LSTM projection h = W_hr h)
    FLOPs = 2*MACs + 2*G (b_ih and b_hh, when has_biases) + e*H

where ``e``, the element-wise FLOPs per hidden unit, is one per add/mul/sub and one per
activation, exactly the ops the decomposed kernels dispatch:

* RNN: ``e = 2``: ``x W_ih^T + h W_hh^T`` (1 add), ``tanh`` or ``relu`` (1).
* GRU: ``e = 10``: r and z gates: 2 adds + 2 sigmoids; ``n = tanh(i_n + r * h_n)``: mul,
  add, tanh (3); ``h' = n + z * (h - n)`` (= ``(1 - z) * n + z * h``): sub, mul, add (3).
* LSTM: ``e = 13``: 4 adds combining the two products of the 4 gates; 3 sigmoids (i, f,
  o) and 1 tanh (g); ``c' = f * c + i * g``: 2 muls, 1 add; ``h' = o * tanh(c')``: tanh, mul.

A layer's input size is ``input_size`` for layer 0 and ``R * num_directions`` above it.
The timesteps times batch rows are the rows of the input (``seq_len * batch`` for padded
input in either layout; ``sum(batch_sizes)`` rows of a ``PackedSequence``: finished
sequences cost nothing). In training with ``dropout > 0``, the dropout between layers
costs 1 FLOP per element (the dropout convention), ``(num_layers - 1) * rows * R * D``.

>>> import torch
>>> from flopsight.formulas.rnn import step_cost
>>> step_cost("lstm", input_size=4, hidden_size=5)  # G=20: 20*4 + 20*5 MACs; 2*180 + 2*20 + 13*5
Cost(macs=180, flops=465)
>>> import flopsight
>>> lstm = torch.nn.LSTM(input_size=4, hidden_size=5)
>>> x, h0, c0 = torch.ones(7, 2, 4), torch.zeros(1, 2, 5), torch.zeros(1, 2, 5)
>>> flopsight.profile(lstm, (x, (h0, c0))).total.forward.flops  # 7 steps * 2 rows * 465
6510
"""

from __future__ import annotations

from typing import Any

import torch

from .dropout import dropout_flops
from .registry import REGISTRY, Cost
from .shapes import prod

__all__ = ["GATES", "ELEMENTWISE", "step_cost", "network_cost", "cell_cost"]

aten = torch.ops.aten

#: Gate blocks per cell kind: the gate width is ``GATES[kind] * hidden_size``.
GATES = {"rnn": 1, "gru": 3, "lstm": 4}
#: Element-wise FLOPs per hidden unit per step (gate combination, activations, state update).
ELEMENTWISE = {"rnn": 2, "gru": 10, "lstm": 13}

# cudnnRNNMode_t (also miopenRNNMode_t and the mode PyTorch passes to mkldnn_rnn_layer):
# 0 RNN_RELU, 1 RNN_TANH, 2 LSTM, 3 GRU. Only a fallback: the kind is read from the weight
# shapes where they are available, which needs no enum.
_MODES = {0: "rnn", 1: "rnn", 2: "lstm", 3: "gru"}
_KIND_OF_GATES = {gates: kind for kind, gates in GATES.items()}


def step_cost(kind: str, input_size: int, hidden_size: int, proj_size: int = 0, biases: int = 2) -> Cost:
    """Cost of one cell step for one batch row (one layer, one direction).

    ``biases`` is how many gate-width bias vectors are added (2: ``b_ih`` and ``b_hh``).

    >>> step_cost("rnn", input_size=3, hidden_size=4)  # 4*3 + 4*4 MACs; 2*28 + 2*4 + 2*4
    Cost(macs=28, flops=72)
    """
    gates = GATES[kind] * hidden_size
    recurrent = proj_size or hidden_size  # what the hidden product reads: h (or the projected h)
    macs = gates * input_size + gates * recurrent
    if proj_size:
        macs += hidden_size * proj_size  # h = W_hr (o * tanh(c)), no bias
    return Cost.of_product(macs, biases * gates + ELEMENTWISE[kind] * hidden_size)


def network_cost(
    kind: str,
    rows: int,
    input_size: int,
    hidden_size: int,
    *,
    proj_size: int = 0,
    num_layers: int = 1,
    bidirectional: bool = False,
    has_biases: bool = True,
    dropout: float = 0.0,
    train: bool = False,
) -> Cost:
    """Cost of a whole (multi-layer, maybe bidirectional) recurrent network.

    ``rows`` is timesteps times batch rows (the rows of a PackedSequence's data).

    >>> # GRU, G=12: layer 0 12*3 + 12*4 MACs, layer 1 12*4 + 12*4; FLOPs 2*MACs + 2*12 + 10*4 each
    >>> network_cost("gru", rows=10, input_size=3, hidden_size=4, num_layers=2)
    Cost(macs=1800, flops=4880)
    """
    dirs = 2 if bidirectional else 1
    out_size = proj_size or hidden_size
    biases = 2 if has_biases else 0
    total = Cost()
    for layer in range(int(num_layers)):
        in_size = input_size if layer == 0 else out_size * dirs
        total = total.plus(step_cost(kind, in_size, hidden_size, proj_size, biases).times(rows * dirs))
    # torch applies dropout to every layer's output but the last (the dropout convention).
    dropped = (int(num_layers) - 1) * rows * out_size * dirs
    return total.plus(Cost.of_flops(dropout_flops(dropped, dropout, train)))


def cell_cost(kind: str, rows: int, input_size: int, hidden_size: int, biases: int) -> Cost:
    """Cost of one step of a single cell (``nn.LSTMCell``...) over ``rows`` batch rows."""
    return step_cost(kind, input_size, hidden_size, 0, biases).times(rows)


# -- argument parsing ----------------------------------------------------------------------
def _rows(x: torch.Tensor) -> int:
    """Timesteps times batch rows: every dim but the features (padded or packed input)."""
    return prod(x.shape[:-1])


_PADDED = ("input", "hx", "params", "has_biases", "num_layers", "dropout", "train", "bidirectional", "batch_first")
_PACKED = ("data", "batch_sizes", "hx", "params", "has_biases", "num_layers", "dropout", "train", "bidirectional")


def _bind(args: tuple, kwargs: dict) -> dict[str, Any]:
    """Name the arguments of ``torch.lstm``/``gru``/``rnn_*`` in either overload.

    The packed overload's second argument is ``batch_sizes``, a 1-D int64 tensor; the
    padded one's is ``hx``, a float tensor (or a pair of them for the LSTM).
    """
    second = args[1] if len(args) > 1 else None
    packed = (
        "data" in kwargs
        or "batch_sizes" in kwargs
        or (isinstance(second, torch.Tensor) and not (second.is_floating_point() or second.is_complex()))
    )
    bound = dict(zip(_PACKED if packed else _PADDED, args))
    bound.update(kwargs)
    if packed:
        bound["input"] = bound["data"]
    return bound


def _rnn_network(kind: str, name: str):
    gates = GATES[kind]

    def formula(out, *args, **kwargs) -> Cost:
        a = _bind(args, kwargs)
        x, params = a["input"], list(a["params"])
        has_biases, num_layers = bool(a["has_biases"]), int(a["num_layers"])
        dirs = 2 if a["bidirectional"] else 1
        hidden = params[1].shape[0] // gates  # w_hh: (gates * H, R)
        # Per layer and direction: w_ih, w_hh, [b_ih, b_hh], [w_hr (proj, H)].
        group = len(params) // (num_layers * dirs)
        proj = params[group - 1].shape[0] if group == 3 + 2 * has_biases else 0
        return network_cost(
            kind,
            _rows(x),
            x.shape[-1],
            hidden,
            proj_size=proj,
            num_layers=num_layers,
            bidirectional=dirs == 2,
            has_biases=has_biases,
            dropout=float(a["dropout"]),
            train=bool(a["train"]),
        )

    formula.__name__ = formula.__qualname__ = name
    formula.__doc__ = (
        f"``torch.{name}`` (padded or packed overload): {GATES[kind]} gate block(s), "
        f"{ELEMENTWISE[kind]} element-wise FLOPs per hidden unit."
    )
    return formula


lstm = REGISTRY.register_unit(torch.lstm, name="lstm")(_rnn_network("lstm", "lstm"))
gru = REGISTRY.register_unit(torch.gru, name="gru")(_rnn_network("gru", "gru"))
rnn_tanh = REGISTRY.register_unit(torch.rnn_tanh, name="rnn_tanh")(_rnn_network("rnn", "rnn_tanh"))
rnn_relu = REGISTRY.register_unit(torch.rnn_relu, name="rnn_relu")(_rnn_network("rnn", "rnn_relu"))

# The same aten ops are CompositeImplicitAutograd, so a dispatch mode normally never sees
# them; registered anyway so that any path that keeps them whole counts them identically.
# aten._lstm_mps (Apple GPUs) has exactly lstm.input's arguments.
REGISTRY.register(aten.lstm, aten._lstm_mps)(lstm)
REGISTRY.register(aten.gru)(gru)
REGISTRY.register(aten.rnn_tanh)(rnn_tanh)
REGISTRY.register(aten.rnn_relu)(rnn_relu)


# -- fused kernels -------------------------------------------------------------------------
def _kind_of(gate_rows: int, hidden_size: int, mode: int | None = None) -> str:
    """Cell kind from the gate width (w_ih rows / hidden size); ``mode`` only as fallback."""
    if hidden_size and gate_rows % hidden_size == 0 and gate_rows // hidden_size in _KIND_OF_GATES:
        return _KIND_OF_GATES[gate_rows // hidden_size]
    if mode in _MODES:
        return _MODES[mode]
    raise ValueError(f"cannot tell the RNN kind from {gate_rows} gate rows, hidden size {hidden_size}, mode {mode}")


_MKLDNN = ("input", "weight0", "weight1", "weight2", "weight3", "hx_", "cx_", "reverse", "batch_sizes",
           "mode", "hidden_size", "num_layers", "has_biases", "bidirectional", "batch_first", "train")


@REGISTRY.register(aten.mkldnn_rnn_layer)
def mkldnn_rnn_layer(out, *args, **kwargs) -> Cost:
    """One layer, one direction of the oneDNN LSTM on CPU (``nn.LSTM`` without the unit).

    weight0/1 are w_ih/w_hh; weight2/3 are the biases, or zero tensors (not even
    gate-shaped) when ``has_biases`` is False, so the flag decides. No projections (torch
    falls back to the decomposed path for ``proj_size``), no dropout (dispatched apart).
    """
    a = dict(zip(_MKLDNN, args))
    a.update(kwargs)
    x, w_ih, hidden = a["input"], a["weight0"], int(a["hidden_size"])
    kind = _kind_of(w_ih.shape[0], hidden, a.get("mode"))
    return cell_cost(kind, _rows(x), x.shape[-1], hidden, 2 if a["has_biases"] else 0)


_CUDNN = ("input", "weight", "weight_stride0", "weight_buf", "hx", "cx", "mode", "hidden_size", "proj_size",
          "num_layers", "batch_first", "dropout", "train", "bidirectional", "batch_sizes", "dropout_state")
_MIOPEN = tuple(n for n in _CUDNN if n not in ("weight_buf", "proj_size"))


def _fused_network(a: dict[str, Any]) -> Cost:
    """``_cudnn_rnn``/``miopen_rnn``: the whole network, dropout between layers included."""
    x, hidden, proj = a["input"], int(a["hidden_size"]), int(a.get("proj_size") or 0)
    weights = a["weight"]
    # weight is the flat list in module order, weight_stride0 entries per layer/direction:
    # w_ih, w_hh, [b_ih, b_hh], [w_hr].
    has_biases = int(a["weight_stride0"]) - (1 if proj else 0) == 4
    gate_rows = weights[0].shape[0] if len(weights) else 0
    kind = _kind_of(gate_rows, hidden, a["mode"])
    return network_cost(
        kind,
        _rows(x),
        x.shape[-1],
        hidden,
        proj_size=proj,
        num_layers=int(a["num_layers"]),
        bidirectional=bool(a["bidirectional"]),
        has_biases=has_biases,
        dropout=float(a["dropout"]),
        train=bool(a["train"]),
    )


@REGISTRY.register(aten._cudnn_rnn)
def cudnn_rnn(out, *args, **kwargs) -> Cost:
    """cuDNN RNN/GRU/LSTM (also packed: then ``input`` is the packed data)."""
    a = dict(zip(_CUDNN, args))
    a.update(kwargs)
    return _fused_network(a)


@REGISTRY.register(aten.miopen_rnn)
def miopen_rnn(out, *args, **kwargs) -> Cost:
    """MIOpen (ROCm) RNN/GRU/LSTM: cuDNN's arguments without weight_buf and proj_size."""
    a = dict(zip(_MIOPEN, args))
    a.update(kwargs)
    return _fused_network(a)


def _bias_count(*biases: Any) -> int:
    return sum(1 for b in biases if isinstance(b, torch.Tensor))


@REGISTRY.register(aten._thnn_fused_lstm_cell)
def thnn_fused_lstm_cell(out, input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None, **kwargs) -> Cost:
    """The CUDA LSTM cell after its two products (counted as mm): biases + 13 per unit."""
    hidden = cx.shape[-1]
    per_row = _bias_count(input_bias, hidden_bias) * input_gates.shape[-1] + ELEMENTWISE["lstm"] * hidden
    return Cost.of_flops(prod(cx.shape[:-1]) * per_row)


@REGISTRY.register(aten._thnn_fused_gru_cell)
def thnn_fused_gru_cell(out, input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None, **kwargs) -> Cost:
    """The CUDA GRU cell after its two products (counted as mm): biases + 10 per unit."""
    hidden = hx.shape[-1]
    per_row = _bias_count(input_bias, hidden_bias) * input_gates.shape[-1] + ELEMENTWISE["gru"] * hidden
    return Cost.of_flops(prod(hx.shape[:-1]) * per_row)


# -- cells ---------------------------------------------------------------------------------
_CELL = ("input", "hx", "w_ih", "w_hh", "b_ih", "b_hh")


def _rnn_cell(kind: str, name: str):
    def formula(out, *args, **kwargs) -> Cost:
        a = dict(zip(_CELL, args))
        a.update(kwargs)
        x, w_ih, w_hh = a["input"], a["w_ih"], a["w_hh"]
        # Rows of a 1-D (unbatched) input: prod(()) == 1.
        return cell_cost(kind, _rows(x), w_ih.shape[1], w_hh.shape[1], _bias_count(a.get("b_ih"), a.get("b_hh")))

    formula.__name__ = formula.__qualname__ = name
    formula.__doc__ = f"One step of a {kind} cell: each given bias costs one FLOP per gate output."
    return formula


lstm_cell = REGISTRY.register_unit(torch.lstm_cell, name="lstm_cell")(_rnn_cell("lstm", "lstm_cell"))
gru_cell = REGISTRY.register_unit(torch.gru_cell, name="gru_cell")(_rnn_cell("gru", "gru_cell"))
rnn_tanh_cell = REGISTRY.register_unit(torch.rnn_tanh_cell, name="rnn_tanh_cell")(_rnn_cell("rnn", "rnn_tanh_cell"))
rnn_relu_cell = REGISTRY.register_unit(torch.rnn_relu_cell, name="rnn_relu_cell")(_rnn_cell("rnn", "rnn_relu_cell"))
REGISTRY.register(aten.lstm_cell)(lstm_cell)
REGISTRY.register(aten.gru_cell)(gru_cell)
REGISTRY.register(aten.rnn_tanh_cell)(rnn_tanh_cell)
REGISTRY.register(aten.rnn_relu_cell)(rnn_relu_cell)
