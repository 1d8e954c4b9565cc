"""The registry on its own: formulas bound by name, checked against every schema they serve."""

import importlib
import sys

import pytest
import torch
from torch import nn

import flopsight
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
    with pytest.raises(FormulaSignatureError, match="by name"):  # when registered, not at their first call
        Registry().register(aten.mm)(lambda out, *args, **kwargs: Cost())


# -- registering when a module is imported -----------------------------------------------------
@pytest.fixture
def probe(tmp_path, monkeypatch):
    """A throwaway module's name, importable from tmp_path, not imported yet (removed from
    sys.modules afterwards)."""
    name = "flopsight_when_imported_probe"
    (tmp_path / f"{name}.py").write_text("DEFINED = 'by the module'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_when_imported_registers_when_the_first_profile_after_the_import_starts(probe):
    reg = Registry()
    seen = []

    def register(registry):
        seen.append((registry, sys.modules[probe].DEFINED))  # the module's code has run
        registry.zero_cost(aten.view)

    finders = list(sys.meta_path)
    reg.when_imported(probe, register)
    assert sys.meta_path == finders  # nothing hooked into the import system
    before = reg.copy()
    importlib.import_module(probe)
    assert seen == [] and not reg.is_registered(aten.view)
    flopsight.profile(nn.Identity(), torch.ones(1, 2), registry=reg)  # a session starts (no op to count)
    assert seen == [(reg, "by the module")] and reg.is_registered(aten.view)
    assert reg.copy().is_registered(aten.view) and not before.is_registered(aten.view)
    before.register_imported()  # a copy made before the import waits on its own
    assert before.is_registered(aten.view) and len(seen) == 2
    reg.register_imported()
    assert len(seen) == 2  # once each


def test_when_imported_runs_at_once_for_a_module_already_imported(probe):
    importlib.import_module(probe)
    seen = []
    Registry().when_imported(probe, seen.append)
    assert len(seen) == 1


def test_a_module_that_failed_to_import_registers_nothing(probe, tmp_path):
    (tmp_path / f"{probe}.py").write_text("raise RuntimeError('broken')\n")
    reg, seen = Registry(), []
    reg.when_imported(probe, seen.append)
    with pytest.raises(RuntimeError, match="broken"):
        importlib.import_module(probe)
    reg.register_imported()
    assert seen == []


def test_a_registration_that_fails_is_warned_about_once_and_counting_goes_on(probe):
    reg = Registry()

    def register(registry):
        raise AttributeError("no attribute '_varlen_attn_out'")

    reg.when_imported(probe, register)
    importlib.import_module(probe)
    with pytest.warns(RuntimeWarning, match="could not register the formulas of flopsight_when_imported_probe"):
        reg.register_imported()
    reg.register_imported()  # not again


def test_a_free_ops_resolved_entry_costs_nothing_when_called_directly():
    # a free op (a view) has no argument binder: its cost is zero without binding anything
    import torch

    free = REGISTRY.resolve(torch.ops.aten.view.default)
    assert free.cost(torch.ones(2), (torch.ones(2), [2]), {}) == Cost()


def test_forward_names_follow_a_forward_reassigned_after_they_were_read():
    # read once per class and kept: a class whose forward is replaced (a patch, a library's
    # wrapper) is read again, so a unit's may_run sees the forward that will run
    from flopsight.formulas.registry import forward_names

    class Block(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.relu(x)

    assert "relu" in forward_names(Block()) and "dropout2d" not in forward_names(Block())

    def patched(self, x):
        return torch.nn.functional.dropout2d(x)

    Block.forward = patched
    assert "dropout2d" in forward_names(Block()) and "relu" not in forward_names(Block())
