"""Loss functions with their own aten kernels: nll, mse, smooth L1, Huber, BCE, ...

Convention (as for :mod:`.reduction`): each arithmetic operation, transcendental
function or comparison in the kernel's per-element expression is one FLOP. A loss over
``n`` elements costs ``k * n`` for its per-element expression, plus its reduction:

* ``reduction='none'``: nothing more;
* ``'sum'``: ``n`` adds;
* ``'mean'``: ``n`` adds and one divide (``n + 1``).

Where the expression branches on values (``|d| < beta``), the costlier branch is
counted, so the count never depends on data. Per-element constants ``k``:

======================================  ==============================================  ===
op                                      expression counted                              k
======================================  ==============================================  ===
mse_loss                                (x - y)^2                                        2
l1_loss                                 |x - y|                                          2
smooth_l1_loss                          |d| < b ? 0.5 d^2 / b : |d| - 0.5 b              6
huber_loss                              |d| < δ ? 0.5 d^2 : δ (|d| - 0.5 δ)              5
binary_cross_entropy                    (y-1) max(log1p(-x), -100) - y max(log x, -100)  9
  + weight                              w * ·                                           +1
binary_cross_entropy_with_logits        (1 - y) x - logsigmoid(x)                         4
  + pos_weight                          ((pw - 1) y + 1) * logsigmoid(x)                +4
  + weight                              w * ·                                           +1
soft_margin_loss                        log(1 + exp(-y x))                                5
======================================  ==============================================  ===

``nll_loss`` picks one log-probability per target and negates it: 1 per target, +1 with
class weights (multiply); a weighted mean also sums the picked weights (``n``) before
its divide. ``ignore_index`` is not read (dense: every target counted).
``cross_entropy`` is not a kernel: it dispatches ``_log_softmax`` (counted by the
activation family) and ``nll_loss_forward``; with ``label_smoothing`` or probability
targets, the extra ops are counted by the elementwise and reduction families. The same
goes for the other composite losses (``kl_div``, ``margin_ranking``, ``hinge_embedding``,
``cosine_embedding``, ``triplet_margin``, ``poisson_nll``, ``gaussian_nll``,
``multilabel_soft_margin``): they are counted op by op through their decomposition.

Backward: each loss kernel's backward kernel costs its per-element gradient expression,
counted the same way, on the ``n`` elements of the gradient it returns (the input's
shape). The reduction's ``1/n`` is a scalar folded into the expression by the kernels
(no per-element divide) except where the kernel divides the whole gradient
(``binary_cross_entropy_backward``). Constants ``k`` (FLOPs per element):

======================================  ==============================================  ===
op                                      gradient expression counted                      k
======================================  ==============================================  ===
mse_loss_backward                       norm (x - y) g                                   3
smooth_l1_loss_backward                 d=x-y; d<=-b, d>=b ? ±norm g : norm d g / b      6
  beta <= 0 (l1)                        sgn(x - y) g                                     3
huber_loss_backward                     d=x-y; d<=-δ, d>=δ ? ±norm g δ : norm d g        5
binary_cross_entropy_backward           g (x - y) / max((1 - x) x, eps)                  6
  + weight, 'mean'                      · w, / n                                   +1, +1
soft_margin_loss_backward               -norm y e / (1 + e) g, e = exp(-y x)             8
======================================  ==============================================  ===

``nll_loss_backward``/``nll_loss2d_backward`` write one value per target into a zeroed
gradient: the incoming gradient, negated, times the class weight (1, +1 with weights);
with ``'mean'`` the incoming gradient is divided by the total weight once (+1).
``multi_margin_loss_backward``: per (sample, class) margin term (2), compare (1),
accumulate into the target's gradient (1), times ``grad_output`` (1), +2 for ``p=2``
(``2 g z``), +1 with weights. ``multilabel_margin_loss_backward``: per (sample, target
slot, class), dense: margin term (2), compare, two accumulates = 5, then ``n`` multiplies
by ``grad_output``. ``_ctc_loss_backward``: the beta table (as the forward's alpha: 13
per cell), per cell ``alpha + beta`` and its log-add-exp into the character's
accumulator (1 + 5), and per log-probability ``(exp(lp) - exp(acc + nll - lp)) g`` (6).
Composite losses (``l1_loss``, ``binary_cross_entropy_with_logits``, ``kl_div``,
``cross_entropy`` with probabilities...) are differentiated by autograd into elementwise
ops, counted by their own formulas.

>>> import torch
>>> from flopsight.formulas.loss import mse_loss, nll_loss
>>> x = torch.ones(8, 10)
>>> mse_loss(torch.tensor(0.), x, x, reduction=1)   # mean: 2*80 + 80 + 1
Stats(macs=0, flops=241)
>>> nll_loss((torch.tensor(0.), torch.tensor(8.)), x, torch.zeros(8, dtype=torch.long), None, reduction=2)
Stats(macs=0, flops=16)
>>> from flopsight.formulas.loss import mse_loss_backward
>>> mse_loss_backward(x, torch.tensor(1.), x, x, reduction=1)   # 3 per element
Stats(macs=0, flops=240)
"""

from __future__ import annotations

from .reduction import mean_flops
from .registry import REGISTRY, Cost, OpNames
from .shapes import any_float, broadcast_numel, numel

__all__ = [
    "reduction_cost", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "soft_margin_loss",
    "multi_margin_loss", "multilabel_margin_loss", "ctc_loss",
    "nll_loss_backward", "mse_loss_backward", "smooth_l1_loss_backward", "huber_loss_backward",
    "binary_cross_entropy_backward", "soft_margin_loss_backward", "multi_margin_loss_backward",
    "multilabel_margin_loss_backward", "ctc_loss_backward",
]

aten = OpNames("aten")  # names: an op this torch lacks is skipped (registry.builtins_loading)

_REDUCTIONS = {0: "none", 1: "mean", 2: "sum", "none": "none", "mean": "mean", "sum": "sum",
               "batchmean": "mean", "elementwise_mean": "mean"}


def _mode(reduction) -> str:
    try:
        return _REDUCTIONS[reduction]
    except (KeyError, TypeError):
        raise ValueError(f"reduction: expected 0/1/2 or 'none'/'mean'/'sum', got {reduction!r}") from None


def reduction_cost(n: int, reduction) -> int:
    """FLOPs to reduce ``n`` loss values: 0 (``none``), ``n`` (``sum``), ``n + 1`` (``mean``),
    as the reduction family counts ``sum`` and ``mean``."""
    mode = _mode(reduction)
    if mode == "none":
        return 0
    return mean_flops(n, 1) if mode == "mean" else n


def _pointwise(k: int, x, y, reduction) -> Cost:
    """``k`` FLOPs per (broadcast) element plus the reduction."""
    if not any_float((x, y)):
        return Cost()
    n = broadcast_numel(x.shape, y.shape)
    return Cost.of_flops(k * n + reduction_cost(n, reduction))


# -- classification ---------------------------------------------------------------------
@REGISTRY.register(aten.nll_loss_forward, aten.nll_loss2d_forward, aten.nll_loss, aten.nll_loss2d,
                   aten.nll_loss_nd)
def nll_loss(out, self, target, weight=None, reduction=1, **_) -> Cost:
    """Negate one picked log-probability per target (1), times its class weight (+1),
    accumulated (+1 unless 'none'); a weighted mean also sums the weights (+1) and
    divides once."""
    if not any_float((self,)):
        return Cost()
    mode = _mode(reduction)
    n = max(numel(target), 1)
    weighted = weight is not None
    flops = n * (1 + weighted)
    if mode != "none":
        flops += n
    if mode == "mean":
        flops += n * weighted + 1
    return Cost.of_flops(flops)


@REGISTRY.register(aten.multi_margin_loss)
def multi_margin_loss(out, self, target, p=1, margin=1, weight=None, reduction=1, **_) -> Cost:
    """Per (sample, class): ``margin - x[y] + x[c]`` (2), clamp at 0 (1), accumulate (1);
    +1 for ``p=2`` (square), +1 with ``weight``; a divide by C per sample; the reduction."""
    if not any_float((self,)):
        return Cost()
    samples = self.shape[0] if self.dim() == 2 else 1
    k = 4 + (p == 2) + (weight is not None)
    return Cost.of_flops(k * numel(self) + samples + reduction_cost(samples, reduction))


@REGISTRY.register(aten.multilabel_margin_loss_forward, aten.multilabel_margin_loss)
def multilabel_margin_loss(out, self, target, reduction=1, **_) -> Cost:
    """Per (sample, target slot, class): ``1 - x[y_j] + x[c]`` (2), clamp (1), accumulate
    (1). Dense: every one of the C target slots is counted (the real number of targets is
    data); a divide by C per sample; the reduction."""
    if not any_float((self,)):
        return Cost()
    classes = self.shape[-1] if self.dim() else 1
    samples = self.shape[0] if self.dim() == 2 else 1
    return Cost.of_flops(4 * samples * classes * classes + samples + reduction_cost(samples, reduction))


# -- regression ---------------------------------------------------------------------------
@REGISTRY.register(aten.mse_loss)
def mse_loss(out, self, target, reduction=1, **_) -> Cost:
    """Subtract and square: 2 per element."""
    return _pointwise(2, self, target, reduction)


@REGISTRY.register(aten.l1_loss)
def l1_loss(out, self, target, reduction=1, **_) -> Cost:
    """Subtract and abs: 2 per element (torch decomposes it to ``sub``/``abs``/``mean``
    before dispatch, which costs the same)."""
    return _pointwise(2, self, target, reduction)


@REGISTRY.register(aten.smooth_l1_loss)
def smooth_l1_loss(out, self, target, reduction=1, **_) -> Cost:
    """Subtract, abs, compare with beta, then the quadratic branch ``0.5 d^2 / beta``
    (square, scale, divide): 6 per element."""
    return _pointwise(6, self, target, reduction)


@REGISTRY.register(aten.huber_loss)
def huber_loss(out, self, target, reduction=1, **_) -> Cost:
    """Subtract, abs, compare with delta, then a 2-op branch (``0.5 d^2`` or
    ``delta (|d| - 0.5 delta)``): 5 per element."""
    return _pointwise(5, self, target, reduction)


@REGISTRY.register(aten.soft_margin_loss)
def soft_margin_loss(out, self, target, reduction=1, **_) -> Cost:
    """``log(1 + exp(-y x))``: multiply, negate, exp, add, log = 5 per element."""
    return _pointwise(5, self, target, reduction)


# -- binary cross-entropy -------------------------------------------------------------------
@REGISTRY.register(aten.binary_cross_entropy)
def binary_cross_entropy(out, self, target, weight=None, reduction=1, **_) -> Cost:
    """PyTorch's kernel ``(y - 1) max(log1p(-x), -100) - y max(log(x), -100)``: negate,
    log1p, clamp, log, clamp, subtract, 2 multiplies, subtract = 9 per element; +1 for
    ``weight``."""
    return _pointwise(9 + (weight is not None), self, target, reduction)


@REGISTRY.register(aten.binary_cross_entropy_with_logits)
def binary_cross_entropy_with_logits(out, self, target, weight=None, pos_weight=None, reduction=1, **_) -> Cost:
    """PyTorch's kernel ``(1 - y) x - lw * logsigmoid(x)``: subtract, multiply,
    logsigmoid (1, as an activation), subtract = 4 per element; ``pos_weight`` builds
    ``lw = (pw - 1) y + 1`` and multiplies by it (+4); ``weight`` multiplies (+1)."""
    k = 4 + 4 * (pos_weight is not None) + (weight is not None)
    return _pointwise(k, self, target, reduction)


# -- sequence -----------------------------------------------------------------------------
#: FLOPs per cell of CTC's forward (alpha) table: a log-sum-exp of the three predecessor
#: cells (2 compares for the max, 3 subtracts, 3 exps, 2 adds, log, add back the max = 12)
#: plus adding the emission log-probability (1).
CTC_FLOPS_PER_CELL = 13
#: Per sample at the end: log-sum-exp of the two final cells (compare, 2 subtracts, 2 exps,
#: add, log, add = 8) and the negation (1).
CTC_FLOPS_PER_SAMPLE = 9


@REGISTRY.register(aten._ctc_loss)
def ctc_loss(out, log_probs, **_) -> Cost:
    """Dense over the ``(N, T, 2S+1)`` alpha table the kernel returns (lengths are data).

    No meta kernel exists for ``_ctc_loss``; it is counted on CPU and CUDA.
    """
    if not any_float((log_probs,)):
        return Cost()
    log_alpha = out[1]
    samples = log_probs.shape[1] if log_probs.dim() == 3 else 1
    return Cost.of_flops(CTC_FLOPS_PER_CELL * numel(log_alpha) + CTC_FLOPS_PER_SAMPLE * samples)


# -- backward ---------------------------------------------------------------------------------
def _backward(k: int, out, x) -> Cost:
    """``k`` FLOPs per element of the returned gradient (the input's shape)."""
    if not any_float((x,)):
        return Cost()
    return Cost.of_flops(k * numel(out))


@REGISTRY.register(aten.nll_loss_backward, aten.nll_loss2d_backward)
def nll_loss_backward(out, grad_output, self, target, weight, reduction, **_) -> Cost:
    """Per target: the incoming gradient negated (1), times its class weight (+1), written
    into a zeroed gradient (free); ``'mean'`` divides the incoming gradient by the total
    weight once (+1). Dense: ``ignore_index`` is not read."""
    if not any_float((self,)):
        return Cost()
    n = max(numel(target), 1)
    return Cost.of_flops(n * (1 + (weight is not None)) + (_mode(reduction) == "mean"))


@REGISTRY.register(aten.mse_loss_backward)
def mse_loss_backward(out, grad_output, self, target, **_) -> Cost:
    """``norm * (x - y) * g`` (norm = 2, or 2/n for a mean: a scalar): 3 per element."""
    return _backward(3, out, self)


@REGISTRY.register(aten.smooth_l1_loss_backward)
def smooth_l1_loss_backward(out, grad_output, self, target, reduction, beta, **_) -> Cost:
    """``d = x - y`` (1), compare with ``-beta`` and ``beta`` (2), the costlier branch
    ``norm * d * g / beta`` (3): 6 per element. ``beta <= 0`` runs L1's backward,
    ``sgn(x - y) * g``: 3."""
    return _backward(3 if beta <= 0 else 6, out, self)


@REGISTRY.register(aten.huber_loss_backward)
def huber_loss_backward(out, grad_output, self, target, **_) -> Cost:
    """``d = x - y`` (1), compare with ``-delta`` and ``delta`` (2), a 2-multiply branch
    (``norm * g * delta`` or ``norm * d * g``): 5 per element."""
    return _backward(5, out, self)


@REGISTRY.register(aten.binary_cross_entropy_backward)
def binary_cross_entropy_backward(out, grad_output, self, target, weight=None, reduction=1, **_) -> Cost:
    """PyTorch's kernel ``g * (x - y) / max((1 - x) * x, eps)``: sub, sub, mul, max, div,
    mul = 6 per element; then ``grad.mul_(weight)`` (+1) and, for a mean,
    ``grad.div_(n)`` (+1)."""
    k = 6 + (weight is not None) + (_mode(reduction) == "mean")
    return _backward(k, out, self)


@REGISTRY.register(aten.soft_margin_loss_backward)
def soft_margin_loss_backward(out, grad_output, self, target, **_) -> Cost:
    """PyTorch's kernel: ``e = exp(-y * x)`` (neg, mul, exp: 3), ``y * e`` (1),
    ``* -norm`` (1), ``/ (1 + e)`` (add, div: 2), ``* g`` (1): 8 per element."""
    return _backward(8, out, self)


@REGISTRY.register(aten.multi_margin_loss_backward)
def multi_margin_loss_backward(out, grad_output, self, target, p, margin, weight=None, **_) -> Cost:
    """Per (sample, class): ``z = margin - x[y] + x[c]`` (2), ``z > 0`` (1), the
    gradient ``g`` or ``2 g z`` (+2 for ``p=2``), times the target's weight (+1),
    subtracted from the target's gradient (1); finally every element times
    ``grad_output`` (1)."""
    return _backward(5 + 2 * (p == 2) + (weight is not None), out, self)


@REGISTRY.register(aten.multilabel_margin_loss_backward)
def multilabel_margin_loss_backward(out, grad_output, self, target, **_) -> Cost:
    """Per (sample, target slot, class), dense over all C slots: ``1 - x[y_j] + x[c]``
    (2), compare (1), ``grad[y_j] -= g`` and ``grad[c] += g`` (2); then each gradient
    element times ``grad_output`` (1 per element)."""
    if not any_float((self,)):
        return Cost()
    classes = self.shape[-1] if self.dim() else 1
    samples = self.shape[0] if self.dim() == 2 else 1
    return Cost.of_flops(5 * samples * classes * classes + numel(self))


#: FLOPs per cell of CTC's backward: the beta table (the alpha recursion, backwards:
#: :data:`CTC_FLOPS_PER_CELL`), then ``alpha + beta`` (1) log-added into the accumulator of
#: the cell's character (compare, subtract, exp, log1p, add: 5).
CTC_BACKWARD_FLOPS_PER_CELL = CTC_FLOPS_PER_CELL + 1 + 5
#: Per log-probability: ``(exp(lp) - exp(acc + nll - lp)) * g``: exp, add, sub, exp, sub, mul.
CTC_BACKWARD_FLOPS_PER_LOGIT = 6


@REGISTRY.register(aten._ctc_loss_backward)
def ctc_loss_backward(out, grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood,
                      log_alpha, **_) -> Cost:
    """Dense over the ``(N, T, 2S+1)`` alpha/beta tables and the ``(T, N, C)``
    log-probabilities (lengths are data). No meta kernel exists; counted on CPU and CUDA."""
    if not any_float((log_probs,)):
        return Cost()
    return Cost.of_flops(CTC_BACKWARD_FLOPS_PER_CELL * numel(log_alpha)
                         + CTC_BACKWARD_FLOPS_PER_LOGIT * numel(log_probs))
