"""The ``attention=`` option: its values (:data:`ATTENTION_CONVENTIONS`), the formulas that
honour it (marked with :func:`effective_family`: each takes a keyword-only ``effective=False``)
and :func:`attention_registry`, which puts ``partial(formula, effective=True)`` in their place
for ``attention="effective"``: only the score entries kept are counted.

>>> import torch
>>> from flopsight.formulas.attention import scaled_dot_product_attention
>>> # effective: a causal 16 x 16 square keeps 16*17/2 = 136 of 256 entries per head
>>> q = torch.ones(1, 1, 16, 8)
>>> scaled_dot_product_attention(None, q, q, q, is_causal=True, effective=True)
Stats(macs=2176, flops=4624)
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from ..registry import READS_VALUES, Registry

__all__ = ["ATTENTION_CONVENTIONS", "attention_registry", "effective_family", "reads_values"]

#: The values of the ``attention=`` option: how attention score products are counted, every
#: entry (``"dense"``), or only the ones a causal mask, a window, a packed batch or a block
#: mask leaves in (``"effective"``).
ATTENTION_CONVENTIONS = ("dense", "effective")

# Every formula of this family takes a keyword-only ``effective=False``; the effective
# registry registers ``partial(formula, effective=True)`` in its place (see attention_registry).
_FAMILY: set[Callable] = set()


def effective_family(fn: Callable) -> Callable:
    """Decorator: ``fn`` takes ``effective=False``; the effective registry uses its variant."""
    _FAMILY.add(fn)
    return fn


def reads_values(formula: Callable | None) -> bool:
    """Whether ``formula``'s count may read tensor values: the attention family's (or its
    effective variant: a mask's kept entries, a packed batch's offsets), a formula registered
    with ``reads_values=True``, or one whose code calls :func:`~.entries.read_values`. The
    native backend keeps such an op's values and costs it on them, in Python.

    >>> from flopsight.formulas.attention.entries import read_values
    >>> def mine(out, input, **_):
    ...     return read_values(lambda t: int(t.count_nonzero()), input)
    >>> reads_values(mine), reads_values(lambda out, **_: None)
    (True, False)
    """
    if formula is None:
        return False
    if formula in _FAMILY or getattr(formula, "func", None) in _FAMILY or getattr(formula, READS_VALUES, False):
        return True
    code = getattr(formula, "__code__", None)  # read_values as a global, or from an enclosing function
    return code is not None and ("read_values" in code.co_names or "read_values" in code.co_freevars)


def _effective(formula: Callable) -> Callable:
    variant = functools.partial(formula, effective=True)
    variant.__name__ = f"{formula.__name__}[effective]"  # type: ignore[attr-defined]
    variant.__doc__ = formula.__doc__
    return variant


def attention_registry(registry: Registry, attention: str = "dense") -> Registry:
    """The registry that counts attention by the convention ``attention``:

    * ``"dense"`` (the default, DeepSpeed-compatible): ``registry`` itself;
    * ``"effective"``: a copy of ``registry`` whose attention formulas (ops and units, the
      backward formulas included) count only the score entries kept -- a causal band, a
      sliding window, the sequences of a packed or nested batch, a boolean / ``-inf`` mask's
      kept entries (when its values are readable: not on meta), a flex ``BlockMask``'s
      computed blocks. Formulas a user replaced are left alone.

    >>> import torch
    >>> from flopsight.formulas import REGISTRY
    >>> attention_registry(REGISTRY, "dense") is REGISTRY
    True
    >>> effective = attention_registry(REGISTRY, "effective")
    >>> q = torch.ones(1, 1, 4, 8)   # causal 4 x 4: 10 of 16 entries; MACs 10*8*2
    >>> sdpa = effective.unit(torch.nn.functional.scaled_dot_product_attention)
    >>> sdpa.cost(None, sdpa.bind((q, q, q), {"is_causal": True}))
    Stats(macs=160, flops=340)
    """
    registry.register_imported()  # what a module imported since defines, before it is copied
    if attention == "dense":
        return registry
    if attention != "effective":
        raise ValueError(f"attention: expected one of {', '.join(map(repr, ATTENTION_CONVENTIONS))}, got {attention!r}")
    new = registry.copy()
    variants: dict[Callable, Callable] = {}

    def variant(fn):
        if fn not in variants:
            variants[fn] = _effective(fn)
        return variants[fn]

    for op, formula in list(registry.ops().items()):
        if formula in _FAMILY:
            new.register(op)(variant(formula))
    for function, unit in list(registry.units().items()):
        if unit.formula in _FAMILY:
            backward = unit.backward
            if backward in _FAMILY:
                backward = variant(backward)
            new.register_unit(function, name=unit.name, backward=backward, reaches=unit.reaches,
                              may_run=unit.may_run)(variant(unit.formula))
    return new
