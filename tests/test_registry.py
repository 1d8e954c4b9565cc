"""The registry on its own: formulas bound by name, checked against every schema they serve."""

import pytest
import torch

from flopsight.formulas import REGISTRY, ZERO, Cost, Registry
from flopsight.formulas.binding import FormulaSignatureError

aten = torch.ops.aten


def _overloads():
    for packet, formula in REGISTRY.ops().items():
        if formula is ZERO:
            continue
        for name in packet.overloads():
            yield getattr(packet, name)


def test_every_formula_fits_every_overload_it_counts():
    """A schema change in a new torch (an argument renamed or removed) fails here, loudly,
    instead of a formula reading the wrong value at run time."""
    errors = [str(REGISTRY.resolve(op).error) for op in _overloads() if REGISTRY.resolve(op).error is not None]
    assert errors == []


def test_every_unit_formula_fits_every_signature_of_its_functions():
    """Units are bound by their function's Python signature or by the aten schemas of the same
    name; a unit formula must take the arguments of each."""
    from flopsight.formulas.binding import check_signature

    errors = []
    for function, unit in REGISTRY.units().items():
        for binder in unit._binders:
            for formula in filter(None, (unit.formula, unit.backward)):
                try:
                    check_signature(formula, binder, f"{unit.name} ({function})")
                except FormulaSignatureError as e:
                    errors.append(str(e))
    assert errors == []


def test_arguments_arrive_by_schema_name_with_defaults_filled_in():
    reg = Registry()
    seen = {}

    @reg.register(aten.addmm)
    def addmm(out, self, mat1, mat2, *, beta, alpha, **_):
        seen.update(beta=beta, alpha=alpha, rows=mat1.shape[0])
        return Cost()

    a, b, c = torch.ones(2), torch.ones(2, 3), torch.ones(3, 2)
    reg.resolve(aten.addmm.default).cost(None, (a, b, c), {"alpha": 2})
    assert seen == {"beta": 1, "alpha": 2, "rows": 2}  # beta from the schema's default


def test_out_buffers_are_dropped_and_out_named_arguments_need_a_positional_only_result():
    reg = Registry()

    @reg.register(aten.mm)
    def mm(out, self, mat2):  # no catch-all: the .out overload's `out=` buffer is not passed
        return Cost(1, 2)

    buf = torch.empty(2, 2)
    assert reg.resolve(aten.mm.out).cost(buf, (torch.ones(2, 3), torch.ones(3, 2)), {"out": buf}) == Cost(1, 2)

    @reg.register("aten::_scaled_dot_product_flash_attention_for_cpu_backward")
    def clash(out, grad_out, **_):  # the schema has an argument named `out`
        return Cost()

    error = reg.resolve(aten._scaled_dot_product_flash_attention_for_cpu_backward.default).error
    assert isinstance(error, FormulaSignatureError) and "positional-only" in str(error)


def test_a_formula_that_needs_a_missing_argument_is_reported_not_guessed():
    reg = Registry()

    @reg.register(aten.mm)
    def mm(out, input, weight, **_):  # aten.mm's arguments are (self, mat2)
        return Cost()

    entry = reg.resolve(aten.mm.default)
    assert isinstance(entry.error, FormulaSignatureError)
    with pytest.raises(FormulaSignatureError, match="'input', 'weight'"):
        entry.cost(None, (torch.ones(1, 1), torch.ones(1, 1)), {})


def test_positional_formulas_are_rejected():
    reg = Registry()
    reg.register(aten.mm)(lambda out, *args, **kwargs: Cost())
    assert "by name" in str(reg.resolve(aten.mm.default).error)
