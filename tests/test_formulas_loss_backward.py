"""Loss backward: ``loss = criterion(pred, target); loss.backward()`` as users run it.

Each loss kernel's backward kernel costs its per-element gradient expression on the
``n`` elements of the prediction (see ``loss.py``): mse 3, smooth L1 6, Huber 5, BCE 6
(+1 weight, +1 mean), soft margin 8; nll writes one value per target. Composite losses
(L1, BCE with logits, KL, cross-entropy's extras) cost the elementwise ops autograd runs.
The prediction requires grad; the target does not. CPU and meta count the same (except the
kernels torch has no meta kernel for: the margin losses and CTC).
"""

from __future__ import annotations

import pytest
import torch
from helpers import formula_of, layer_backward, meta
from torch import nn

from flopsight.formulas import Cost

aten = torch.ops.aten

B, C = 4, 6
n = B * C  # prediction elements


def P():  # predictions
    return torch.randn(B, C, requires_grad=True)


def PROB():  # probabilities (BCELoss)
    return torch.rand(B, C).clamp(0.05, 0.95).requires_grad_()


def Y():  # regression targets
    return torch.randn(B, C)


def T():  # class targets
    return torch.randint(0, C, (B,))


CASES = [
    # (id, criterion, inputs, backward FLOPs, on meta)
    ("MSELoss", lambda: nn.MSELoss(), lambda: (P(), Y()), 3 * n, True),  # norm * (x - y) * g
    ("MSELoss none", lambda: nn.MSELoss(reduction="none"), lambda: (P(), Y()), 3 * n, True),
    ("SmoothL1Loss", lambda: nn.SmoothL1Loss(beta=0.5), lambda: (P(), Y()), 6 * n, True),
    # beta=0 is L1 (composite): g / n (expand, div), sgn(x - y)... : div, sgn, mul
    ("SmoothL1Loss beta=0", lambda: nn.SmoothL1Loss(beta=0.0), lambda: (P(), Y()), 3 * n, True),
    ("L1Loss", lambda: nn.L1Loss(), lambda: (P(), Y()), 3 * n, True),
    ("HuberLoss sum", lambda: nn.HuberLoss(delta=2.0, reduction="sum"), lambda: (P(), Y()), 5 * n, True),
    ("BCELoss", lambda: nn.BCELoss(), lambda: (PROB(), torch.rand(B, C)), (6 + 1) * n, True),  # + mean's divide
    # weight (+1), 'sum': no divide
    ("BCELoss weight sum", lambda: nn.BCELoss(weight=torch.rand(C), reduction="sum"),
     lambda: (PROB(), torch.rand(B, C)), (6 + 1) * n, True),
    # composite: (sigmoid(x) - y) * g / n: sigmoid, sub, mul, div_
    ("BCEWithLogitsLoss", lambda: nn.BCEWithLogitsLoss(), lambda: (P(), torch.rand(B, C)), 4 * n, True),
    # pos_weight: t = pw * y; (t + 1 - y) * sigmoid(x) - t, * g, / n: mul, add, sub, sigmoid, mul, sub, mul, div
    ("BCEWithLogitsLoss pos_weight", lambda: nn.BCEWithLogitsLoss(pos_weight=torch.rand(C)),
     lambda: (P(), torch.rand(B, C)), 8 * n, True),
    ("SoftMarginLoss", lambda: nn.SoftMarginLoss(), lambda: (P(), Y().sign()), 8 * n, True),
    # KL(batchmean), composite: g / B (1 scalar), -y * g: neg, mul
    ("KLDivLoss", lambda: nn.KLDivLoss(reduction="batchmean"), lambda: (P(), torch.rand(B, C)), 2 * n + 1, True),
    # nll: per target, -g (1) [* class weight (1)]; a mean divides g by the total weight once (1)
    ("NLLLoss", lambda: nn.NLLLoss(), lambda: (P(), T()), B + 1, True),
    ("NLLLoss none", lambda: nn.NLLLoss(reduction="none"), lambda: (P(), T()), B, True),
    ("NLLLoss weight", lambda: nn.NLLLoss(weight=torch.rand(C)), lambda: (P(), T()), 2 * B + 1, True),
    # NLLLoss2d: one target per pixel: 2*3*3 targets, mean
    ("NLLLoss 2d", lambda: nn.NLLLoss(), lambda: (torch.randn(2, 4, 3, 3, requires_grad=True),
                                                  torch.randint(0, 4, (2, 3, 3))), 2 * 3 * 3 + 1, True),
    # cross-entropy = log_softmax backward (4 per element) + nll backward (B + 1)
    ("CrossEntropyLoss", lambda: nn.CrossEntropyLoss(), lambda: (P(), T()), 4 * n + B + 1, True),
    ("CrossEntropyLoss weight sum", lambda: nn.CrossEntropyLoss(weight=torch.rand(C), reduction="sum"),
     lambda: (P(), T()), 4 * n + 2 * B, True),
    # label smoothing: + the smoothing term's backward: (eps / C) * g / B (3 scalar ops), its
    # negation per sample (B), the class-sum's gradient expanded (free) and added to nll's (n)
    ("CrossEntropyLoss smoothing", lambda: nn.CrossEntropyLoss(label_smoothing=0.1), lambda: (P(), T()),
     4 * n + B + 1 + 3 + B + n, True),
    # probability targets: -(y * log_softmax(x)).sum() / B: g / B (1), neg (1), * y (n), log_softmax (4n)
    ("CrossEntropyLoss probabilities", lambda: nn.CrossEntropyLoss(), lambda: (P(), torch.rand(B, C).softmax(-1)),
     4 * n + n + 2, True),
    # multi-margin: per (sample, class) margin term 2, compare 1, accumulate 1, * grad_output 1 (5);
    # p=2: + 2 (2 g z), weight: + 1
    ("MultiMarginLoss", lambda: nn.MultiMarginLoss(), lambda: (P(), T()), 5 * n, False),
    ("MultiMarginLoss p=2 weight", lambda: nn.MultiMarginLoss(p=2, weight=torch.rand(C)), lambda: (P(), T()),
     8 * n, False),
    # multilabel margin, dense over the C target slots: 5 per (sample, slot, class) + * grad_output (n)
    ("MultiLabelMarginLoss", lambda: nn.MultiLabelMarginLoss(), lambda: (P(), torch.randint(-1, C, (B, C))),
     5 * B * C * C + n, False),
]


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("name, criterion, inputs, flops, on_meta", CASES, ids=[c[0] for c in CASES])
def test_loss_backward(device, name, criterion, inputs, flops, on_meta):
    if device == "meta" and not on_meta:
        pytest.skip("torch has no meta kernel for this loss's backward")
    total, _ = layer_backward(device, criterion(), *inputs())
    assert total == (0, flops)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_loss_kernels_by_name(device):
    _, ops = layer_backward(device, nn.MSELoss(), P(), Y())
    assert ops == {"aten.mse_loss_backward": (1, 0, 3 * n)}
    _, ops = layer_backward(device, nn.CrossEntropyLoss(), P(), T())
    assert ops["aten._log_softmax_backward_data"] == (1, 0, 4 * n)
    assert ops["aten.nll_loss_backward"] == (1, 0, B + 1)


def test_ctc_loss_backward():
    """CTC (no meta kernel): log_probs (T=10, N=2, C=5), targets of length S=4 -> alpha and
    beta tables (N, T, 2S+1) = (2, 10, 9). Per cell: beta (13) + alpha + beta (1) + its
    log-add-exp into the character's accumulator (5) = 19; per log-probability
    (exp(lp) - exp(acc + nll - lp)) * g = 6."""
    log_probs = torch.randn(10, 2, 5).log_softmax(-1).detach().requires_grad_()
    targets, input_lengths, target_lengths = torch.randint(1, 5, (2, 4)), torch.tensor([10, 10]), torch.tensor([4, 3])
    kernel = 19 * 2 * 10 * 9 + 6 * 10 * 2 * 5
    total, ops = layer_backward("cpu", nn.CTCLoss(reduction="sum"), log_probs, targets, input_lengths, target_lengths)
    assert ops["aten._ctc_loss_backward"] == (1, 0, kernel)
    assert total == (0, kernel)
    # the default mean divides by the target lengths and the batch: 2 divides of the 2 losses' gradient
    total, _ = layer_backward("cpu", nn.CTCLoss(), log_probs, targets, input_lengths, target_lengths)
    assert total == (0, kernel + 2 + 2)


def test_loss_backward_formulas_called_directly():
    g, x, y = meta(()), meta(8, 10), meta(8, 10)
    assert formula_of(aten.huber_loss_backward)(meta(8, 10), g, x, y, reduction=1, delta=1.0) == Cost(0, 5 * 80)
    smooth_l1, bce = formula_of(aten.smooth_l1_loss_backward), formula_of(aten.binary_cross_entropy_backward)
    assert smooth_l1(meta(8, 10), g, x, y, reduction=1, beta=0.0) == Cost(0, 3 * 80)  # L1's
    assert bce(meta(8, 10), g, x, y, weight=None, reduction=0) == Cost(0, 6 * 80)
    target = meta(8, dtype=torch.int64)
    assert formula_of(aten.nll_loss_backward)(meta(8, 10), grad_output=g, self=x, target=target, weight=None,
                                              reduction=2, ignore_index=-100, total_weight=g) == Cost(0, 8)
    # integer predictions do no floating-point work
    i = meta(8, 10, dtype=torch.int64)
    assert formula_of(aten.mse_loss_backward)(i, grad_output=g, self=i, target=i, reduction=1) == Cost(0, 0)
