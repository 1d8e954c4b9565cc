"""What depends on the torch release, checked on every release `make test-matrix` runs: ops that
come and go, the private APIs probed by feature, imports flopsight must leave as they are, two
profilers at once, the tested range."""

import importlib.util
import json
import warnings

import pytest
import torch
from background import early_script

import flopsight
from flopsight._torch_private import KINETO_ACTIVITY_TYPES, active_function_modes, exit_mode, kineto_device_work
from flopsight.formulas import REGISTRY, op_key
from flopsight.formulas.availability import ABSENT_ON_PURPOSE, expected_absent, release
from flopsight.torch_support import TESTED, UntestedTorchWarning, untested

pytestmark = pytest.mark.torch_versions  # make test-matrix runs the whole module (an interpreter too)

RELEASE = release(torch.__version__)

#: the registered ops each tested torch lacks (ABSENT_ON_PURPOSE says why)
LACKS = {
    (2, 9): {
        "aten::_flash_attention_forward_no_dropout_inplace", "aten::_upsample_lanczos2d_aa",
        "aten::_upsample_lanczos2d_aa_backward", "aten::_foreach_mm", "aten::_foreach_clone",
        "_c10d_functional::isend", "_c10d_functional::irecv", "_c10d_functional::batch_p2p_ops",
        "aten::_foreach_powsum", "aten::_scaled_mm_v2", "aten::_scaled_grouped_mm_v2",
    },
    (2, 11): {
        "aten::_flash_attention_forward_no_dropout_inplace", "aten::_upsample_lanczos2d_aa",
        "aten::_upsample_lanczos2d_aa_backward", "aten::_foreach_mm", "aten::_foreach_clone",
        "_c10d_functional::isend", "_c10d_functional::irecv", "_c10d_functional::batch_p2p_ops",
        "torch_attn::_varlen_attn_out",
    },
    (2, 13): set(),
    (2, 15): {"aten::cholesky"},
}


def _import_optional_modules():
    """Import each torch module whose import registers formulas (where this torch has it)."""
    for name in REGISTRY.modules_on_import():
        if importlib.util.find_spec(name) is not None:
            __import__(name)
    REGISTRY.register_imported()  # as the next profile would


def _defined(name: str) -> bool:
    try:
        op_key(name)
        return True
    except ValueError:
        return False


def test_the_tested_releases_are_the_ones_listed_here():
    assert {release(v) for v in TESTED} == set(LACKS)


@pytest.mark.skipif(RELEASE not in LACKS, reason=f"torch {torch.__version__} is not a tested release")
def test_the_registered_ops_this_torch_lacks_are_those_listed():
    _import_optional_modules()
    assert set(REGISTRY.missing()) == LACKS[RELEASE] == expected_absent(torch.__version__)


def test_every_registered_op_exists_or_is_absent_on_purpose():
    _import_optional_modules()
    absent = expected_absent(torch.__version__)
    unexplained = set(REGISTRY.missing()) - set(ABSENT_ON_PURPOSE)
    assert not unexplained, f"registered ops this torch lacks, not in availability.ABSENT_ON_PURPOSE: {unexplained}"
    for name, availability in ABSENT_ON_PURPOSE.items():
        if availability.module is not None and importlib.util.find_spec(availability.module) is None:
            continue  # defined by a module this torch does not have (varlen before 2.11)
        assert _defined(name) == (name not in absent), name
        assert REGISTRY.is_registered(name) if name not in absent else name in REGISTRY.missing(), name


def test_a_user_registration_of_an_op_this_torch_lacks_is_still_an_error():
    with pytest.raises(ValueError, match="no operator named 'aten::no_such_kernel'"):
        REGISTRY.copy().register("aten::no_such_kernel")(lambda out, **_: flopsight.Cost())


# -- imports flopsight must leave as they are ---------------------------------------------------------
#: in a fresh interpreter, run in the background (its test's docstring says what it checks)
FLOPSIGHT_FIRST = early_script("flopsight imported before torch's modules", """
import importlib.util, json, sys, warnings
warnings.simplefilter("error")
import torch
finders, filters = list(sys.meta_path), list(warnings.filters)
import flopsight
from flopsight.formulas import REGISTRY
from flopsight.formulas.availability import expected_absent
flopsight.profile  # the API, loaded on first use
assert sys.meta_path == finders and warnings.filters == filters
imported = []
for name in REGISTRY.modules_on_import():
    if importlib.util.find_spec(name) is not None:
        __import__(name)
        imported.append(name)
flopsight.profile(torch.nn.Linear(2, 2), torch.ones(1, 2))
print(json.dumps([imported, sorted(REGISTRY.missing()), sorted(expected_absent(torch.__version__))]))
""")


def test_importing_flopsight_first_leaves_the_users_own_torch_imports_working(scripts):
    """In a fresh interpreter: flopsight first, then each torch module it registers formulas for.
    Importing flopsight (its API and formulas too) changes neither the import system nor the
    warning filters; each import works as without flopsight (on 2.11 the user's varlen import
    raised), and the next profile registers what this torch defines."""
    run = scripts[FLOPSIGHT_FIRST]
    assert run.returncode == 0, run.stderr
    imported, missing, expected = json.loads(run.stdout.splitlines()[-1])
    assert missing == expected
    if importlib.util.find_spec("torch.nn.attention.varlen") is not None:
        assert "torch.nn.attention.varlen" in imported


# -- private APIs, probed by feature ------------------------------------------------------------------------
def test_kineto_events_are_read_by_what_this_torch_has():
    assert KINETO_ACTIVITY_TYPES == hasattr(torch._C._autograd._KinetoEvent, "activity_type")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.ones(4, 4) @ torch.ones(4, 4)
    events = prof.profiler.kineto_results.events()
    assert any(e.name() == "aten::mm" for e in events)
    assert not any(kineto_device_work(e) for e in events)  # a CPU-only trace has no device work


def test_without_activity_types_a_device_event_that_is_no_annotation_is_device_work():
    from flopsight._torch_private import _device_work_by_annotation

    class Event:  # the two fields the rule reads, as a device's kernel and a mirrored range
        def __init__(self, device, annotation):
            self.device, self.annotation = device, annotation

        def device_type(self):
            return self.device

        def is_user_annotation(self):
            return self.annotation

    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    assert [_device_work_by_annotation(Event(*e)) for e in ((cuda, False), (cuda, True), (cpu, False))] == [
        True, False, False]


def test_a_mode_leaves_the_stack_wherever_it_is_on_it():
    from torch.overrides import TorchFunctionMode

    a, b, c = TorchFunctionMode(), TorchFunctionMode(), TorchFunctionMode()
    for m in (a, b, c):
        m.__enter__()
    exit_mode(b)
    assert active_function_modes() == [a, c]
    exit_mode(a)
    exit_mode(c)
    exit_mode(c)  # no longer on it: nothing to do
    assert active_function_modes() == []


# -- two profilers at once --------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["python", "native"])
@pytest.mark.parametrize("first_to_stop", ["first started", "last started"])
def test_two_profilers_overlapping_in_either_order_count_what_each_saw(backend, first_to_stop):
    """A starts, B starts, then either stops first: each counts the forwards of its own span, as
    if it ran alone (Linear(4, 3) on 2 rows: 2 * 4 * 3 = 24 MACs a forward). Stopping A first
    crashed torch <= 2.9."""
    if backend == "native":
        from flopsight.capture.backends.native.recorder import RECORDER

        if RECORDER.load(quiet=True) is None:
            pytest.skip("the native backend cannot be built here")
    model, x = torch.nn.Linear(4, 3), torch.ones(2, 4)
    a, b = flopsight.Profiler(model, backend=backend), flopsight.Profiler(model, backend=backend)
    a.start()
    model(x)  # A
    b.start()
    model(x)  # B
    (a if first_to_stop == "first started" else b).stop()
    model(x)  # the one still running
    (b if first_to_stop == "first started" else a).stop()
    macs = a.result.total.forward.macs, b.result.total.forward.macs
    # A saw the first two forwards and, if it stopped last, the third; B the last two, or the second only
    assert macs == ((48, 48) if first_to_stop == "first started" else (72, 24))


# -- the tested range ---------------------------------------------------------------------------------------
def test_a_torch_outside_the_tested_range_gets_one_line_and_flopsight_runs(monkeypatch):
    assert untested("2.8.0") is not None and untested("2.16.0") is not None
    assert all(untested(v) is None for v in TESTED)
    monkeypatch.setattr(torch, "__version__", "2.16.0")
    from flopsight._process import WARNED

    monkeypatch.setattr(WARNED, "_keys", set())  # a fresh process's: nothing warned yet
    model, x = torch.nn.Linear(4, 3), torch.ones(2, 4)
    with pytest.warns(UntestedTorchWarning,
                      match=r"torch 2\.16\.0 is outside the tested range \(2\.9 to 2\.15\)") as seen:
        assert flopsight.profile(model, x).total.forward.macs == 24
    assert len([w for w in seen if w.category is UntestedTorchWarning]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", UntestedTorchWarning)
        flopsight.profile(model, x)  # once per process


# -- the native recorder against the Python path -----------------------------------------------------
def _native_or_skip():
    from flopsight.capture.backends.native.recorder import RECORDER

    recorder = RECORDER.load(quiet=True)
    if recorder is None:
        pytest.skip("the native backend cannot be built here")
    return recorder


def test_the_native_recorder_counts_the_self_check_model_as_the_python_path_on_this_torch():
    """RecordFunction's layout, the composite-op rule, recompute and backward numbering: what
    the self-check of a build compares (capture/backends/native/self_check.py)."""
    from flopsight.capture.backends.native.self_check import disagreement

    assert disagreement(_native_or_skip()) is None


def test_a_recorder_that_disagrees_is_not_used_and_one_line_says_so(monkeypatch, capsys, tmp_path):
    from flopsight.capture.backends.native import self_check
    from flopsight.capture.backends.native.recorder import RECORDER, UNCHECKED

    _native_or_skip()
    monkeypatch.setattr(self_check, "cache_folder", lambda: tmp_path)  # no verdict kept: checked now
    monkeypatch.setattr(RECORDER, "verdict", UNCHECKED)
    monkeypatch.setattr(self_check, "disagreement", lambda module: "module 'block', forward: 0 MACs against 64")
    model, x = torch.nn.Linear(4, 3), torch.ones(2, 4)
    for _ in range(2):
        result = flopsight.profile(model, x, backend="auto")
        assert result.metadata.backend == "python" and result.total.forward.macs == 24
        assert "disagrees with the Python path" in result.metadata.backend_note
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("flopsight:")]
    assert lines == [f"flopsight: the native backend disagrees with the Python path on torch {torch.__version__} "
                     "(module 'block', forward: 0 MACs against 64); counting with the Python path"]
