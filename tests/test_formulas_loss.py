"""Losses, through the nn.*Loss modules users call: hand-derived FLOPs, CPU == meta.

Shapes: ``N = 8`` samples, ``C = 10`` classes, so a pointwise loss sees ``n = 80``
elements. Per-element constants are those of docs/conventions/reduction_loss_zero.md
(mse 2, l1 2, smooth_l1 6, huber 5, bce 9 (+1 weight), bce_with_logits 4 (+4 pos_weight,
+1 weight), soft_margin 5); a reduction adds ``n`` ('sum') or ``n + 1`` ('mean').

Composite losses (cross_entropy, kl_div, margin ranking, hinge, cosine embedding,
triplet, poisson/gaussian nll, multilabel soft margin) are counted through the ops they
dispatch; their expected totals list those ops, priced by the elementwise family's
convention (1 per op per result element, selection 0), the activation family's
(log_softmax and logsigmoid 1 per element) and the reduction family's (sum n, mean n+1,
2-norm 2n+out).
"""

import pytest
import torch
from helpers import measure_cpu_meta, measure_on, ops_of, python_backend_only
from torch import nn

from flopsight.formulas import Cost, loss

N, C = 8, 10
n = N * C  # 80


def LOGITS():
    return torch.randn(N, C)


def LOGP():
    return torch.randn(N, C).log_softmax(-1)


def LABELS():
    return torch.randint(0, C, (N,))


def PROBS():
    return torch.rand(N, C) * 0.98 + 0.01


def BINARY():
    return torch.randint(0, 2, (N, C)).float()


def SIGNS(*shape):
    return lambda: torch.randint(0, 2, shape).float() * 2 - 1


CASES = [
    # -- nll: negate each picked log-prob (8), accumulate (8), divide (1) -----------------------
    ("nll_mean", nn.NLLLoss(), lambda: (LOGP(), LABELS()), N + N + 1),
    ("nll_sum", nn.NLLLoss(reduction="sum"), lambda: (LOGP(), LABELS()), N + N),
    ("nll_none", nn.NLLLoss(reduction="none"), lambda: (LOGP(), LABELS()), N),
    ("nll_ignore_index", nn.NLLLoss(ignore_index=3), lambda: (LOGP(), LABELS()), N + N + 1),  # dense
    # weighted: + a multiply each; a weighted mean also sums the weights (8) before dividing
    ("nll_weighted_mean", nn.NLLLoss(weight=torch.rand(C)), lambda: (LOGP(), LABELS()), 2 * N + N + N + 1),
    ("nll_weighted_sum", nn.NLLLoss(weight=torch.rand(C), reduction="sum"), lambda: (LOGP(), LABELS()), 2 * N + N),
    ("nll_weighted_none", nn.NLLLoss(weight=torch.rand(C), reduction="none"), lambda: (LOGP(), LABELS()), 2 * N),
    # 2d (segmentation): (2, C, 3, 3) against (2, 3, 3): 18 targets
    ("nll_2d", nn.NLLLoss(), lambda: (torch.randn(2, C, 3, 3), torch.randint(0, C, (2, 3, 3))), 18 + 18 + 1),
    ("nll_unbatched", nn.NLLLoss(), lambda: (torch.randn(C), torch.tensor(3)), 1 + 1 + 1),
    # -- cross entropy = _log_softmax (1 per logit) + nll ---------------------------------------
    ("cross_entropy", nn.CrossEntropyLoss(), lambda: (LOGITS(), LABELS()), n + (N + N + 1)),
    ("cross_entropy_2d", nn.CrossEntropyLoss(), lambda: (torch.randn(2, C, 3, 3), torch.randint(0, C, (2, 3, 3))),
     2 * C * 9 + (18 + 18 + 1)),
    # label smoothing: log_softmax n, nll 17, smooth term -(sum over classes) n + N (neg),
    # its mean over non-ignored targets: sum N + divide 1, then (1-ls)*nll + smooth*ls/C: 3
    ("cross_entropy_label_smoothing", nn.CrossEntropyLoss(label_smoothing=0.1), lambda: (LOGITS(), LABELS()),
     n + (N + N + 1) + (n + N) + (N + 1) + 3),
    # probability targets: log_softmax n, multiply n, sum n, negate 1, divide by N 1
    ("cross_entropy_probs", nn.CrossEntropyLoss(), lambda: (LOGITS(), PROBS()), n + n + n + 1 + 1),
    # -- regression: k per element + reduction -------------------------------------------------
    ("mse_mean", nn.MSELoss(), lambda: (LOGITS(), LOGITS()), 2 * n + n + 1),
    ("mse_sum", nn.MSELoss(reduction="sum"), lambda: (LOGITS(), LOGITS()), 2 * n + n),
    ("mse_none", nn.MSELoss(reduction="none"), lambda: (LOGITS(), LOGITS()), 2 * n),
    ("l1_mean", nn.L1Loss(), lambda: (LOGITS(), LOGITS()), 2 * n + n + 1),  # sub, abs, mean
    ("l1_none", nn.L1Loss(reduction="none"), lambda: (LOGITS(), LOGITS()), 2 * n),
    ("smooth_l1", nn.SmoothL1Loss(), lambda: (LOGITS(), LOGITS()), 6 * n + n + 1),
    ("smooth_l1_beta0_is_l1", nn.SmoothL1Loss(beta=0.0), lambda: (LOGITS(), LOGITS()), 2 * n + n + 1),
    ("huber", nn.HuberLoss(), lambda: (LOGITS(), LOGITS()), 5 * n + n + 1),
    ("huber_delta_sum", nn.HuberLoss(reduction="sum", delta=2.0), lambda: (LOGITS(), LOGITS()), 5 * n + n),
    # -- binary cross-entropy ----------------------------------------------------------------------
    ("bce", nn.BCELoss(), lambda: (PROBS(), BINARY()), 9 * n + n + 1),
    ("bce_weight", nn.BCELoss(weight=torch.rand(C)), lambda: (PROBS(), BINARY()), 10 * n + n + 1),
    ("bce_logits", nn.BCEWithLogitsLoss(), lambda: (LOGITS(), BINARY()), 4 * n + n + 1),
    ("bce_logits_pos_weight", nn.BCEWithLogitsLoss(pos_weight=torch.rand(C)), lambda: (LOGITS(), BINARY()),
     8 * n + n + 1),
    ("bce_logits_both_none", nn.BCEWithLogitsLoss(weight=torch.rand(C), pos_weight=torch.rand(C), reduction="none"),
     lambda: (LOGITS(), BINARY()), 9 * n),
    ("soft_margin", nn.SoftMarginLoss(), lambda: (LOGITS(), SIGNS(N, C)()), 5 * n + n + 1),
    # -- margin losses with kernels ----------------------------------------------------------------
    # per (sample, class) 4 (+1 p=2, +1 weight); a divide by C per sample (8); mean over 8: 9
    ("multi_margin", nn.MultiMarginLoss(), lambda: (LOGITS(), LABELS()), 4 * n + N + N + 1),
    ("multi_margin_p2_weight", nn.MultiMarginLoss(p=2, weight=torch.rand(C)), lambda: (LOGITS(), LABELS()),
     6 * n + N + N + 1),
    ("multi_margin_none", nn.MultiMarginLoss(reduction="none"), lambda: (LOGITS(), LABELS()), 4 * n + N),
    # dense over (sample, target slot, class): 4 * 8 * 10 * 10, divide per sample 8, mean 9
    ("multilabel_margin", nn.MultiLabelMarginLoss(), lambda: (LOGITS(), torch.randint(-1, C, (N, C))),
     4 * N * C * C + N + N + 1),
    # -- composite losses ------------------------------------------------------------------------
    # xlogy(t, t) n, t * input n, subtract n; batchmean: sum n, divide by N 1
    ("kl_div_batchmean", nn.KLDivLoss(reduction="batchmean"), lambda: (LOGP(), PROBS()), 3 * n + n + 1),
    # exp(t) * (t - input): 3n; sum n
    ("kl_div_log_target", nn.KLDivLoss(reduction="sum", log_target=True), lambda: (LOGP(), LOGP()), 3 * n + n),
    # (-y * (x1 - x2) + margin).clamp_min(0): neg, sub, mul, add, clamp (5 * 8); mean 9
    ("margin_ranking", nn.MarginRankingLoss(), lambda: (torch.randn(N), torch.randn(N), SIGNS(N)()), 5 * N + N + 1),
    # (margin - x).clamp_min(0) 2n; two `y != ±1` compares 2n (the wheres are free); add n; mean n+1
    ("hinge_embedding", nn.HingeEmbeddingLoss(), lambda: (LOGITS(), SIGNS(N, C)()), 5 * n + n + 1),
    # x1·x2: mul n + sum n; |x1|^2, |x2|^2: (mul n + sum n + eps add N) each; sqrt(m1*m2): 2N;
    # cos = divide N; 1 - cos N; (cos - margin).clamp_min(0) 2N; two y == ±1 compares 2N; add N; mean N+1
    ("cosine_embedding", nn.CosineEmbeddingLoss(), lambda: (LOGITS(), LOGITS(), SIGNS(N)()),
     2 * n + 2 * (2 * n + N) + 2 * N + N + N + 2 * N + 2 * N + N + N + 1),
    # two pairwise distances ‖a - b + eps‖: sub n, add n, 2-norm 2n + N; then d1 + margin - d2,
    # clamp: 3N; mean N+1
    ("triplet_margin", nn.TripletMarginLoss(), lambda: (LOGITS(), LOGITS(), LOGITS()),
     2 * (n + n + 2 * n + N) + 3 * N + N + 1),
    # exp(x) - t * x: 3n; mean n+1
    ("poisson_nll", nn.PoissonNLLLoss(), lambda: (LOGITS(), PROBS()), 3 * n + n + 1),
    # per element: two logsigmoids, y*, 1-y, -x, *, +, negate (8n); sum over C n; / C: N; mean N+1
    ("multilabel_soft_margin", nn.MultiLabelSoftMarginLoss(), lambda: (LOGITS(), BINARY()), 8 * n + n + N + N + 1),
]


@pytest.mark.parametrize("module, inputs, flops", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_loss(module, inputs, flops):
    assert measure_cpu_meta(module, *inputs()) == (0, flops)


def test_gaussian_nll_cpu():
    # reads var.min() with .item(): no meta run. var < 0 check n (the any() is bool: 0),
    # clamp n, log n, (x - t) n, ^2 n, / var n, + log n, * 0.5 n; mean n+1
    assert measure_on("cpu", nn.GaussianNLLLoss(), LOGITS(), LOGITS(), PROBS()) == (0, 8 * n + n + 1)


def test_ctc_loss_cpu(backend):
    # _ctc_loss has no meta kernel. T=6 frames, 4 samples, targets of length 3: the alpha
    # table is (4, 6, 2*3+1) = 168 cells at 13 FLOPs, plus 9 per sample; then F.ctc_loss's
    # mean divides each loss by its target length (4) and averages (4 + 1)
    T, B, S = 6, 4, 3
    inputs = (torch.randn(T, B, 5).log_softmax(2), torch.randint(1, 5, (B, S)),
              torch.full((B,), T), torch.full((B,), S))
    cells = B * T * (2 * S + 1)
    python_backend_only(backend)  # the mean's divisor is formed another way in a plain run
    assert measure_on("cpu", nn.CTCLoss(), *inputs) == (0, 13 * cells + 9 * B + B + B + 1)


def test_cross_entropy_splits_into_log_softmax_and_nll():
    ops = ops_of(nn.CrossEntropyLoss(), LOGITS(), LABELS())
    assert ops == {"aten._log_softmax": (1, 0, n), "aten.nll_loss_forward": (1, 0, N + N + 1)}


def test_kernel_losses_dispatch_their_own_op():
    # the per-element constants apply to one fused kernel each, on every device
    assert set(ops_of(nn.SmoothL1Loss(), LOGITS(), LOGITS())) == {"aten.smooth_l1_loss"}
    assert set(ops_of(nn.BCEWithLogitsLoss(), LOGITS(), BINARY())) == {"aten.binary_cross_entropy_with_logits"}


def test_mse_broadcast_target_counts_the_broadcast_shape():
    # F.mse_loss warns and broadcasts a (C,) target against (N, C): n elements
    with pytest.warns(UserWarning, match="target size"):
        assert measure_on("cpu", nn.MSELoss(), LOGITS(), torch.randn(C)) == (0, 2 * n + n + 1)


def test_integer_free_and_reduction_names():
    assert loss.reduction_cost(80, "none") == 0
    assert loss.reduction_cost(80, 2) == 80
    assert loss.reduction_cost(80, "mean") == 81
    with pytest.raises(ValueError, match="reduction"):
        loss.reduction_cost(80, "avg")
    i = torch.ones(4, 5, dtype=torch.long)
    assert loss.mse_loss(None, i, i, reduction=1) == Cost(0, 0)


def test_l1_formula_matches_its_decomposition():
    # l1_loss decomposes before dispatch; its formula (for backends that keep it) agrees
    x, y = LOGITS(), LOGITS()
    assert loss.l1_loss(torch.tensor(0.0), x, y, reduction=1) == Cost(*measure_on("cpu", nn.L1Loss(), x, y))
