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

Backward. Every unit has a backward formula, evaluated at forward time from which tensors
require grad, and charged once, as ``<unit>.backward`` (``lstm.backward``...), to the
module that ran the unit when the backward pass runs its autograd nodes, whatever kernels
run there (oneDNN on CPU, cuDNN, the decomposed ops on meta); with gradients disabled it
returns 0 at once (no autograd node). Per step, batch row, layer and direction, what the
decomposed backward computes::

    MACs  = G*I          dx, if the layer input needs a gradient
          + G*R          dh_prev = dgates W_hh, every step but the first (whose h0: if it
                         requires grad)
          + G*I + G*R    dW_ih, dW_hh if they require grad (the sum over time counted as
                         MACs: one product over all rows, as a fused kernel runs it)
          (+ H*P + H*P   d(o*tanh(c')) and dW_hr with projections)
    FLOPs = 2*MACs + G per bias requiring grad (its gradient: a sum over rows)
          + e'*H + joins

``e'`` (:func:`gates_backward_flops`): the gate gradients, 2 FLOPs per activation
backward and 1 per chain-rule multiply: RNN 2, GRU 12, LSTM 15. Joins, one add per
element where a value feeds two places: ``h_t`` (the output and the next step, R), LSTM
``c_t`` (``tanh(c_t)`` and the next step, H), GRU ``h`` (``W_hh h`` and ``h - n``, H); plus
LSTM ``dc_prev = dc * f`` (H). Bidirectional layers add their two directions' input
gradients (I per row); in training the dropout between layers costs its backward (1 per
element). Equal to the op-by-op count of the decomposed backward but for the adds that
sum its per-step weight gradients over time.

>>> import torch
>>> from flopsight.formulas.rnn import step_cost
>>> step_cost("lstm", input_size=4, hidden_size=5)  # G=20: 20*4 + 20*5 MACs; 2*180 + 2*20 + 13*5
Stats(macs=180, flops=465)
>>> import flopsight
>>> lstm = torch.nn.LSTM(input_size=4, hidden_size=5)
>>> x, h0, c0 = torch.ones(7, 2, 4), torch.zeros(1, 2, 5), torch.zeros(1, 2, 5)
>>> flopsight.profile(lstm, (x, (h0, c0))).total.forward.flops  # 7 steps * 2 rows * 465
6510
>>> with flopsight.Profiler(lstm) as prof:  # a backward, x and h0, c0 not requiring grad
...     lstm(x, (h0, c0))[0].sum().backward()
>>> # MACs dh_prev 12*20*5 (the 6 steps after the first), dW_ih 14*20*4, dW_hh 14*20*5;
>>> # FLOPs 2*MACs + gates 14*15*5 + dc_prev 12*5 + joins h 12*5, c 12*5 + bias 2*14*20
>>> backward = prof.result.total.backward
>>> backward.macs, backward.flops
(3720, 9230)
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch

from .activation import activation_backward_flops
from .dropout import dropout_backward_flops, dropout_flops
from .elementwise import elementwise_flops
from .registry import REGISTRY, Cost, OpNames
from .shapes import prod, requires_grad

__all__ = [
    "GATES", "ELEMENTWISE", "BACKWARD_ELEMENTWISE", "step_cost", "network_cost", "cell_cost",
    "ParamGrads", "gates_backward_flops", "layer_backward_cost", "network_backward_cost",
]

aten = OpNames("aten")  # names: an op this torch lacks is skipped (registry.builtins_loading)

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
    Stats(macs=28, flops=72)
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
    :func:`step_cost` of every layer times ``rows`` and directions, in closed form (this
    runs once per call of an RNN module).

    >>> # GRU, G=12: layer 0 12*3 + 12*4 MACs, layer 1 12*4 + 12*4; FLOPs 2*MACs + 2*12 + 10*4 each
    >>> network_cost("gru", rows=10, input_size=3, hidden_size=4, num_layers=2)
    Stats(macs=1800, flops=4880)
    """
    dirs = 2 if bidirectional else 1
    layers = int(num_layers)
    out_size = proj_size or hidden_size
    gates = GATES[kind] * hidden_size
    # per row and direction: layer 0 reads input_size features, every later layer out_size * dirs
    recurrent = gates * out_size + hidden_size * proj_size  # (+ the projection h = W_hr h)
    macs = gates * input_size + recurrent + (layers - 1) * (gates * out_size * dirs + recurrent)
    extra = layers * ((2 if has_biases else 0) * gates + ELEMENTWISE[kind] * hidden_size)
    n = rows * dirs
    # torch applies dropout to every layer's output but the last (the dropout convention).
    dropped = dropout_flops((layers - 1) * rows * out_size * dirs, dropout, train)
    return Cost(n * macs, n * (2 * macs + extra) + dropped)


def cell_cost(kind: str, rows: int, input_size: int, hidden_size: int, biases: int) -> Cost:
    """Cost of one step of a single cell (``nn.LSTMCell``...) over ``rows`` batch rows:
    :func:`step_cost` (no projection) times ``rows``, in one record (this runs once per
    cell call, often in a Python loop over timesteps).

    >>> cell_cost("lstm", rows=2, input_size=3, hidden_size=4, biases=2) == step_cost("lstm", 3, 4) * 2
    True
    """
    gates = GATES[kind] * hidden_size
    macs = gates * (input_size + hidden_size)
    return Cost(rows * macs, rows * (2 * macs + biases * gates + ELEMENTWISE[kind] * hidden_size))


# -- what the arguments hold ----------------------------------------------------------------
def _rows(x: torch.Tensor) -> int:
    """Timesteps times batch rows: every dim but the features (padded or packed input)."""
    return int(math.prod(x.shape[:-1]))


def _layout(params, has_biases: bool, num_layers: int, bidirectional: bool, gates: int) -> tuple[int, int, int]:
    """(hidden size, proj_size or 0, weights per layer and direction) from the flat weights:
    per layer and direction w_ih, w_hh (``gates * H`` rows), [b_ih, b_hh], [w_hr (P, H)]."""
    group = len(params) // (int(num_layers) * (2 if bidirectional else 1))
    proj = params[group - 1].shape[0] if group == (5 if has_biases else 3) else 0
    return params[1].shape[0] // gates, proj, group


def _network(kind: str, name: str):
    gates = GATES[kind]

    def formula(out, input=None, *, params, has_biases, num_layers, dropout, train, bidirectional, data=None,
                **_) -> Cost:
        x = data if input is None else input  # the packed overload's data: (sum(batch_sizes), I)
        hidden, proj, _group = _layout(params, has_biases, num_layers, bidirectional, gates)
        return network_cost(kind, _rows(x), x.shape[-1], hidden, proj_size=proj, num_layers=num_layers,
                            bidirectional=bidirectional, has_biases=has_biases, dropout=dropout, train=train)

    formula.__name__ = formula.__qualname__ = name
    formula.__doc__ = (
        f"``torch.{name}`` (``input, hx, ...`` or packed ``data, batch_sizes, hx, ...``): {GATES[kind]} gate "
        f"block(s), {ELEMENTWISE[kind]} element-wise FLOPs per hidden unit."
    )
    return formula


def _bias_count(*biases: Any) -> int:
    return sum(1 for b in biases if isinstance(b, torch.Tensor))


def _cell(kind: str, name: str):
    def formula(out, input, hx, w_ih, w_hh, b_ih=None, b_hh=None, **_) -> Cost:
        # Rows of a 1-D (unbatched) input: prod(()) == 1.
        return cell_cost(kind, _rows(input), w_ih.shape[1], w_hh.shape[1], _bias_count(b_ih, b_hh))

    formula.__name__ = formula.__qualname__ = name
    formula.__doc__ = f"One step of a {kind} cell: each given bias costs one FLOP per gate output."
    return formula


# -- fused kernels -------------------------------------------------------------------------
def _kind_of(gate_rows: int, hidden_size: int, mode: int | None = None) -> str:
    """Cell kind from the gate width (w_ih rows / hidden size); ``mode`` only as fallback."""
    if hidden_size and gate_rows % hidden_size == 0 and gate_rows // hidden_size in _KIND_OF_GATES:
        return _KIND_OF_GATES[gate_rows // hidden_size]
    if mode in _MODES:
        return _MODES[mode]
    raise ValueError(f"cannot tell the RNN kind from {gate_rows} gate rows, hidden size {hidden_size}, mode {mode}")


@REGISTRY.register(aten.mkldnn_rnn_layer)
def mkldnn_rnn_layer(out, input, weight0, *, mode, hidden_size, has_biases, **_) -> Cost:
    """One layer, one direction of the oneDNN LSTM on CPU (``nn.LSTM`` without the unit).

    weight0/1 are w_ih/w_hh; weight2/3 are the biases, or zero tensors (not even
    gate-shaped) when ``has_biases`` is False, so the flag decides. No projections (torch
    falls back to the decomposed path for ``proj_size``), no dropout (dispatched apart).
    """
    kind = _kind_of(weight0.shape[0], hidden_size, mode)
    return cell_cost(kind, _rows(input), input.shape[-1], hidden_size, 2 if has_biases else 0)


def _has_biases(weight_stride0: int, proj_size: int) -> bool:
    """cuDNN/MIOpen flat weights per layer and direction: w_ih, w_hh, [b_ih, b_hh], [w_hr]."""
    return weight_stride0 - (1 if proj_size else 0) == 4


@REGISTRY.register(aten._cudnn_rnn, aten.miopen_rnn)
def cudnn_rnn(out, input, weight, weight_stride0, *, mode, hidden_size, num_layers, dropout, train, bidirectional,
              proj_size=0, **_) -> Cost:
    """cuDNN (and MIOpen, which has no ``proj_size``) RNN/GRU/LSTM: the whole network,
    dropout between layers included. Packed: ``input`` is the packed data."""
    kind = _kind_of(weight[0].shape[0] if len(weight) else 0, hidden_size, mode)
    return network_cost(kind, _rows(input), input.shape[-1], hidden_size, proj_size=proj_size,
                        num_layers=num_layers, bidirectional=bidirectional,
                        has_biases=_has_biases(weight_stride0, proj_size), dropout=dropout, train=train)


@REGISTRY.register(aten._thnn_fused_lstm_cell)
def thnn_fused_lstm_cell(out, input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None, **_) -> Cost:
    """The CUDA LSTM cell after its two products (counted as mm): biases + 13 per unit."""
    hidden = cx.shape[-1]
    per_row = _bias_count(input_bias, hidden_bias) * input_gates.shape[-1] + ELEMENTWISE["lstm"] * hidden
    return Cost.of_flops(prod(cx.shape[:-1]) * per_row)


@REGISTRY.register(aten._thnn_fused_gru_cell)
def thnn_fused_gru_cell(out, input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None, **_) -> Cost:
    """The CUDA GRU cell after its two products (counted as mm): biases + 10 per unit."""
    hidden = hx.shape[-1]
    per_row = _bias_count(input_bias, hidden_bias) * input_gates.shape[-1] + ELEMENTWISE["gru"] * hidden
    return Cost.of_flops(prod(hx.shape[:-1]) * per_row)


#: (gate family, name, whether it is a single cell) of each RNN function and aten op
_RNNS = (("lstm", "lstm", False), ("gru", "gru", False), ("rnn", "rnn_tanh", False), ("rnn", "rnn_relu", False),
         ("lstm", "lstm_cell", True), ("gru", "gru_cell", True), ("rnn", "rnn_tanh_cell", True),
         ("rnn", "rnn_relu_cell", True))
#: name -> forward formula
_FORWARD = {name: (_cell if cell else _network)(kind, name) for kind, name, cell in _RNNS}

# The same aten ops are CompositeImplicitAutograd, so a dispatch mode normally never sees
# them; registered anyway so that any path that keeps them whole counts them identically.
# aten._lstm_mps (Apple GPUs) has exactly lstm.input's arguments. (The units, the torch
# functions of the same names, are registered below with their backward formulas.)
REGISTRY.register(aten._lstm_mps)(_FORWARD["lstm"])
for _name, _formula in _FORWARD.items():
    REGISTRY.register(getattr(aten, _name))(_formula)


# == backward ================================================================================
# Per step, batch row, layer and direction (see the module docstring, "Backward"): the
# gate gradients (element-wise), the products that carry them back to the layer input, the
# previous state and the weights, the bias sums, and the few element-wise ops that join
# gradients where a value feeds two places. Counted from which tensors require grad, as the
# decomposed backward computes them (the fused kernels compute some unconditionally: their
# dispatch formulas say so).


def gates_backward_flops(kind: str, hidden_size: int, hidden_gates: bool = True) -> int:
    """Element-wise backward FLOPs of one cell step for one batch row, from the gradient of
    the step's output to the gradient of its gate pre-activations (needed whatever else
    needs a gradient). One activation backward per activation, one FLOP per multiply of
    the chain rule (an add passes its gradient on untouched: free):

    * RNN: ``h' = act(a)``: the tanh/relu backward.
    * GRU: ``h' = n + z*(h - n)``: the mul's two gradients (``g*z``, ``g*(h - n)``), the
      sub's negated one (``-g*z`` for ``n``) and the add joining it to ``n``'s other
      gradient (4); ``n = tanh(i_n + r*h_n)``: tanh backward and the mul's two gradients
      (``h_n``'s, ``g*r``, only with ``hidden_gates``: when the hidden side ``W_hn h + b_hn``
      needs one, i.e. ``W_hh`` or ``b_hh`` or ``h`` requires grad); ``r``, ``z``: two
      sigmoid backwards.
    * LSTM: ``h' = o*tanh(c')``: the mul's two gradients and the tanh backward;
      ``c' = f*c + i*g``: the gradients of ``i``, ``g`` and ``f`` (3 muls; ``c``'s is
      counted with the previous state); ``i, f, o`` sigmoid and ``g`` tanh backwards.

    >>> [gates_backward_flops(kind, 1) for kind in ("rnn", "gru", "lstm")]
    [2, 12, 15]
    """
    h = hidden_size
    if kind == "rnn":
        return activation_backward_flops(h)
    if kind == "gru":
        # 3 activations (r, z sigmoid; n tanh); 4 muls' gradients, 1 negation, 1 gradient add
        return activation_backward_flops(3 * h) + elementwise_flops(h, ops=6 if hidden_gates else 5)
    if kind == "lstm":
        # 5 activations (i, f, o sigmoid; g, tanh(c') tanh); 5 muls' gradients
        return activation_backward_flops(5 * h) + elementwise_flops(h, ops=5)
    raise ValueError(f"kind: expected one of {sorted(GATES)}, got {kind!r}")


#: Element-wise backward FLOPs per hidden unit per step of the gate gradients
#: (:func:`gates_backward_flops`), before the previous-state and fan-in terms.
BACKWARD_ELEMENTWISE = {kind: gates_backward_flops(kind, 1) for kind in GATES}


class ParamGrads(NamedTuple):
    """Which parameters of one layer and direction get a gradient (a missing bias: False)."""

    w_ih: bool = True
    w_hh: bool = True
    b_ih: bool = True
    b_hh: bool = True
    w_hr: bool = False  # the projection (``proj_size``)

    @classmethod
    def of(cls, group: list, has_biases: bool, proj: bool) -> ParamGrads:
        """From one layer-direction group of the flat weights: w_ih, w_hh, [b_ih, b_hh], [w_hr]."""
        rg = [requires_grad(p) for p in group]
        b_ih, b_hh = (rg[2], rg[3]) if has_biases else (False, False)
        return cls(rg[0], rg[1], b_ih, b_hh, bool(proj and rg[-1]))

    def any(self) -> bool:
        return any(self)


#: A layer and direction with every parameter trainable (no projection) / all frozen.
ALL_PARAM_GRADS = ParamGrads()
NO_PARAM_GRADS = ParamGrads(False, False, False, False, False)


def layer_backward_cost(
    kind: str,
    rows: int,
    input_size: int,
    hidden_size: int,
    proj_size: int = 0,
    *,
    first_batch: int,
    last_batch: int,
    input_grad: bool,
    h0_grad: bool = False,
    c0_grad: bool = False,
    params: ParamGrads = ALL_PARAM_GRADS,
    output_grad: bool = True,
    incoming_fan_in: bool = False,
) -> Cost:
    """Backward of one layer, one direction, over ``rows`` (timesteps x batch rows).

    ``first_batch``: batch rows of the first step run (its previous state is the initial
    ``h0``/``c0``, which gets a gradient only if it requires one); ``last_batch``: of the
    last step run (its outputs feed no later step). Both are the batch size for padded
    input; for a PackedSequence the forward direction runs the largest batch first and
    the smallest last, the reverse direction the other way round.

    ``output_grad``: the output sequence gets a gradient (so each step's ``h`` joins it to
    the gradient from the next step: one add per element). ``incoming_fan_in``: a cell
    called alone (one step): count that join on its incoming state instead, when the
    state requires grad (a step of a loop, whose state is the previous step's output).

    >>> # nn.RNN(3, 4), 5 steps x batch 2, weights trainable, input not: G = 4.
    >>> # MACs: dh_prev 8*4*4 (4 steps after the first), dW_ih 10*4*3, dW_hh 10*4*4;
    >>> # FLOPs: 2*MACs + tanh backward 10*2*4 + h fan-in 8*4 + bias sums 2*10*4
    >>> layer_backward_cost("rnn", 10, 3, 4, first_batch=2, last_batch=2, input_grad=False)
    Stats(macs=408, flops=1008)
    """
    proj = int(proj_size or 0)
    if not (input_grad or h0_grad or c0_grad or params.any()):
        return Cost()  # nothing this layer computes requires grad: no autograd node
    h = hidden_size
    gates = GATES[kind] * h
    state = proj or h  # size of the recurrent h (the projected one with proj_size)
    lstm = kind == "lstm"
    macs = 0
    if proj:
        macs += rows * h * proj  # d(o*tanh(c')) = dh W_hr
        if params.w_hr:
            macs += rows * h * proj  # dW_hr = sum over rows of dh^T (o*tanh(c'))
    # The previous state: every step after the first; the first's (h0, c0) only if needed.
    later = rows - first_batch
    prev_h = later + (first_batch if h0_grad else 0)
    prev_c = later + (first_batch if c0_grad else 0)
    macs += prev_h * gates * state  # dh_prev = dgates W_hh
    # the gate gradients; GRU: h_n's (W_hn h + b_hn) only where the hidden side needs it
    hidden_side = rows if (params.w_hh or params.b_hh) else prev_h
    flops = hidden_side * gates_backward_flops(kind, h)
    flops += (rows - hidden_side) * gates_backward_flops(kind, h, hidden_gates=False)
    if kind == "gru":
        flops += elementwise_flops(prev_h * h)  # h feeds W_hh h and (h - n): add their gradients
    if lstm:
        flops += elementwise_flops(prev_c * h)  # dc_prev = dc' * f
    # Fan-in: a value used twice gets the sum of two gradients (one add per element).
    if incoming_fan_in:
        fan_h = rows if h0_grad else 0
        fan_c = rows if c0_grad else 0
    else:
        fan_h = (rows - last_batch) if output_grad else 0  # h_t: output sequence and step t+1
        fan_c = rows - last_batch  # c_t: tanh(c_t) and step t+1
    flops += elementwise_flops(fan_h * state)
    if lstm:
        flops += elementwise_flops(fan_c * h)
    if input_grad:
        macs += rows * gates * input_size  # dx = dgates W_ih
    # Weight gradients: sums over all rows of outer products, counted as one product each
    # (a fused kernel runs one GEMM over the whole sequence).
    if params.w_ih:
        macs += rows * gates * input_size
    if params.w_hh:
        macs += rows * gates * state
    flops += rows * gates * (int(params.b_ih) + int(params.b_hh))  # db = dgates summed over the rows
    return Cost.of_product(macs, flops)


def network_backward_cost(
    kind: str,
    rows: int,
    input_size: int,
    hidden_size: int,
    *,
    batch: int,
    min_batch: int | None = None,
    proj_size: int = 0,
    num_layers: int = 1,
    bidirectional: bool = False,
    input_grad: bool = False,
    h0_grad: bool = False,
    c0_grad: bool = False,
    params: list[ParamGrads] | None = None,
    output_grad: bool = True,
    dropout: float = 0.0,
    train: bool = False,
) -> Cost:
    """Backward of a whole network: :func:`layer_backward_cost` for every layer and
    direction, plus the backward of the dropout between layers in training.

    ``batch``: the batch size (of a PackedSequence: its largest batch, ``batch_sizes[0]``);
    ``min_batch``: a PackedSequence's smallest batch (``batch_sizes[-1]``; default
    ``batch``). ``params``: per layer and direction (layer-major, as the flat weights),
    which parameters require grad (default: all). A layer's input gets a gradient if the
    network's input, ``h0``/``c0`` or any parameter of an earlier layer requires one.

    >>> # nn.GRU(3, 4, num_layers=2) on 5 steps x batch 2, the input not requiring grad:
    >>> # layer 0: 8*12*4 + 10*12*3 + 10*12*4 MACs, layer 1 (input gradient too): + 10*12*4
    >>> # and reads 4 features; FLOPs 2*MACs + 10*12*4 + 8*4 + 8*4 + 2*10*12 per layer
    >>> network_backward_cost("gru", 10, 3, 4, batch=2, num_layers=2)
    Stats(macs=3048, flops=7664)
    """
    dirs = 2 if bidirectional else 1
    layers = int(num_layers)
    proj = int(proj_size or 0)
    out_size = proj or hidden_size
    min_batch = batch if min_batch is None else int(min_batch)
    if params is None:
        params = [ParamGrads(w_hr=bool(proj))] * (layers * dirs)
    total = Cost()
    needs = bool(input_grad)  # does this layer's input get a gradient?
    for layer in range(layers):
        in_size = input_size if layer == 0 else out_size * dirs
        group = params[layer * dirs : (layer + 1) * dirs]
        if layer > 0 and needs:  # the gradient flows back through the inter-layer dropout
            total += Cost.of_flops(dropout_backward_flops(rows * out_size * dirs, dropout, train))
        if dirs == 2 and needs:  # both directions read the layer input: add their two gradients
            total += Cost.of_flops(elementwise_flops(rows * in_size))
        for d, grads in enumerate(group):
            # the reverse direction runs a PackedSequence smallest batch first
            first, last = (batch, min_batch) if d == 0 else (min_batch, batch)
            total += layer_backward_cost(
                kind, rows, in_size, hidden_size, proj, first_batch=first, last_batch=last, input_grad=needs,
                h0_grad=h0_grad, c0_grad=c0_grad, params=grads, output_grad=output_grad,
            )
        # the next layer's input (this one's output) depends on h0, c0 and this layer's weights
        needs = needs or h0_grad or c0_grad or any(g.any() for g in group)
    return total


# -- argument parsing for the backward -------------------------------------------------------
def _batch_of(h: Any) -> int:
    """Batch rows of a state tensor ``(layers*dirs, B, R)`` / ``(B, R)`` (1 if unbatched)."""
    return int(h.shape[-2]) if isinstance(h, torch.Tensor) and h.dim() >= 2 else 1


def _min_batch(batch_sizes: Any, default: int) -> int:
    """The last (smallest) entry of a PackedSequence's ``batch_sizes``.

    ``batch_sizes`` is a CPU tensor on every device (the meta device too): its values are
    shape information, like an int list. A tensor without values (meta, fake) falls back
    to ``default``.
    """
    if isinstance(batch_sizes, torch.Tensor):
        if batch_sizes.device.type != "cpu" or batch_sizes.numel() == 0:
            return default
        try:
            return int(batch_sizes[-1])
        except (RuntimeError, NotImplementedError):  # a fake tensor
            return default
    return int(batch_sizes[-1]) if batch_sizes else default


_NOTHING = Cost()


def _network_backward(kind: str, name: str):
    gates = GATES[kind]

    def formula(out, input=None, *, hx, params, has_biases, num_layers, dropout, train, bidirectional, data=None,
                batch_sizes=None, **_) -> Cost:
        if not torch.is_grad_enabled():
            return _NOTHING  # no autograd node, no backward (and no time spent on it)
        x = data if input is None else input
        h0, c0 = (hx[0], hx[1]) if isinstance(hx, (list, tuple)) else (hx, None)
        hidden, proj, group = _layout(params, has_biases, num_layers, bidirectional, gates)
        batch = _batch_of(h0)
        return network_backward_cost(
            kind,
            _rows(x),
            x.shape[-1],
            hidden,
            batch=batch,
            min_batch=_min_batch(batch_sizes, batch),
            proj_size=proj,
            num_layers=num_layers,
            bidirectional=bidirectional,
            input_grad=requires_grad(x),
            h0_grad=requires_grad(h0),
            c0_grad=requires_grad(c0),
            params=[ParamGrads.of(params[i : i + group], has_biases, bool(proj)) for i in range(0, len(params), group)],
            dropout=dropout,
            train=train,
        )

    formula.__name__ = formula.__qualname__ = f"{name}_backward"
    formula.__doc__ = f"Backward of ``torch.{name}`` (the unit), from what requires grad at forward time."
    return formula


def _cell_backward(kind: str, name: str):
    def formula(out, input, hx, w_ih, w_hh, b_ih=None, b_hh=None, **_) -> Cost:
        if not torch.is_grad_enabled():
            return _NOTHING
        h, c = (hx[0], hx[1]) if isinstance(hx, (list, tuple)) else (hx, None)
        rows = _rows(input)
        return layer_backward_cost(
            kind, rows, w_ih.shape[1], w_hh.shape[1], first_batch=rows, last_batch=rows,
            input_grad=requires_grad(input), h0_grad=requires_grad(h), c0_grad=requires_grad(c),
            params=ParamGrads(w_ih.requires_grad, w_hh.requires_grad, requires_grad(b_ih), requires_grad(b_hh)),
            incoming_fan_in=True,
        )

    formula.__name__ = formula.__qualname__ = f"{name}_backward"
    formula.__doc__ = (
        f"Backward of one ``torch.{name}`` step: an incoming state that requires grad is taken "
        "as the previous step's output of a loop (its gradient joins the one from its other use)."
    )
    return formula



# -- the units: the torch functions the modules call, each with its backward ----------------
# torch.lstm & co. have no Python signature: the registry binds a call to the schema of the
# aten op of the same name whose overload fits it (lstm.input or lstm.data), so the network
# formulas take ``input`` or ``data``/``batch_sizes``. torch._VF.lstm is torch.lstm.
for _kind, _name, _cell_only in _RNNS:
    _backward = (_cell_backward if _cell_only else _network_backward)(_kind, _name)
    REGISTRY.register_unit(getattr(torch, _name), name=_name, backward=_backward)(_FORWARD[_name])


# -- fused backward kernels, counted with the same functions -------------------------------
@REGISTRY.register(aten.mkldnn_rnn_layer_backward)
def mkldnn_rnn_layer_backward(out, input, weight1, *, hx_, mode, hidden_size, has_biases, **_) -> Cost:
    """One layer and direction of the oneDNN LSTM backward (CPU ``nn.LSTM`` without the unit).

    The kernel computes every gradient whatever requires grad: the input's, ``hx``'s and
    ``cx``'s, both weights', and one bias gradient (oneDNN keeps ``b_ih + b_hh`` as one
    bias; torch returns it twice). Padded input only (no projections, no packing).
    """
    kind = _kind_of(weight1.shape[0], hidden_size, mode)
    batch = _batch_of(hx_)
    return layer_backward_cost(
        kind, _rows(input), input.shape[-1], hidden_size, first_batch=batch, last_batch=batch, input_grad=True,
        h0_grad=True, c0_grad=kind == "lstm",
        # one bias gradient: oneDNN adds b_ih + b_hh into one bias
        params=ParamGrads(True, True, bool(has_biases), False),
    )


@REGISTRY.register(aten._cudnn_rnn_backward, aten.miopen_rnn_backward)
def cudnn_rnn_backward(out, input, weight, weight_stride0, *, hx, grad_output, grad_hy, grad_cy, mode, hidden_size,
                       num_layers, dropout, train, bidirectional, batch_sizes, output_mask, proj_size=0, **_) -> Cost:
    """cuDNN (and MIOpen: no ``proj_size``) RNN/GRU/LSTM backward, the whole network
    (padded or packed: then ``input`` is the packed data).

    The data gradients (input, ``hx``, ``cx``) are computed unconditionally (torch runs
    the data backward whatever ``output_mask`` says: it updates the reserve space the
    weight backward reads); the weight gradients, all of them, only if ``output_mask[3]``.
    A missing ``grad_output``/``grad_hy``/``grad_cy`` is replaced by zeros (the same
    work); with none of them, torch returns at once.
    """
    if grad_output is None and grad_hy is None and grad_cy is None:
        return _NOTHING
    has_biases = _has_biases(weight_stride0, proj_size)
    kind = _kind_of(weight[0].shape[0] if len(weight) else 0, hidden_size, mode)
    dirs = 2 if bidirectional else 1
    batch = _batch_of(hx)
    grads = ParamGrads(True, True, has_biases, has_biases, bool(proj_size)) if output_mask[3] else NO_PARAM_GRADS
    return network_backward_cost(
        kind,
        _rows(input),
        input.shape[-1],
        hidden_size,
        batch=batch,
        min_batch=_min_batch(batch_sizes, batch),
        proj_size=proj_size,
        num_layers=num_layers,
        bidirectional=bidirectional,
        input_grad=True,
        h0_grad=True,
        c0_grad=kind == "lstm",
        params=[grads] * (num_layers * dirs),
        dropout=dropout,
        train=train,
    )


@REGISTRY.register("aten::lstm_mps_backward", missing_ok=True)
def lstm_mps_backward(out, *, input, hx, params, has_biases, num_layers, dropout, train, bidirectional, **_) -> Cost:
    """The Apple-GPU LSTM backward (``_lstm_mps``'s): every gradient, whatever requires grad."""
    dirs = 2 if bidirectional else 1
    batch = _batch_of(hx[0]) if hx else 1
    grads = ParamGrads(True, True, has_biases, has_biases)
    return network_backward_cost(
        "lstm", _rows(input), input.shape[-1], params[1].shape[0] // GATES["lstm"], batch=batch,
        num_layers=num_layers, bidirectional=bidirectional, input_grad=True, h0_grad=True, c0_grad=True,
        params=[grads] * (num_layers * dirs), dropout=dropout, train=train,
    )


@REGISTRY.register(aten._thnn_fused_lstm_cell_backward_impl, aten._thnn_fused_lstm_cell_backward)
def thnn_fused_lstm_cell_backward(out, grad_hy, grad_cy, cx, cy, workspace, has_bias, **_) -> Cost:
    """The CUDA LSTM cell backward after its products (``mm``, counted apart): the gate
    gradients, ``dcx = dc * f`` (always computed), the add of ``grad_cy`` to the ``c'``
    gradient when given, and one bias gradient (the gates' gradient summed; torch returns
    it for both biases)."""
    hidden, rows = cx.shape[-1], prod(cx.shape[:-1])
    flops = rows * (gates_backward_flops("lstm", hidden) + elementwise_flops(hidden))
    if grad_cy is not None:
        flops += rows * elementwise_flops(hidden)
    if has_bias:
        flops += rows * GATES["lstm"] * hidden
    return Cost.of_flops(flops)


@REGISTRY.register(aten._thnn_fused_gru_cell_backward)
def thnn_fused_gru_cell_backward(out, grad_hy, workspace, has_bias, **_) -> Cost:
    """The CUDA GRU cell backward after its products: the gate gradients (``dhx``'s direct
    term ``g*z`` among them) and, with biases, the input and hidden gate gradients summed
    (two bias gradients: they differ in the ``n`` block)."""
    hidden, rows = grad_hy.shape[-1], prod(grad_hy.shape[:-1])
    flops = rows * gates_backward_flops("gru", hidden)
    if has_bias:
        flops += 2 * rows * GATES["gru"] * hidden
    return Cost.of_flops(flops)
