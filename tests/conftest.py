"""Suite-wide checks: every test must leave torch as it found it."""

import functools
import os
import re

import background
import pytest
import torch
from background import early_fixture
from hypothesis import HealthCheck, settings

from flopsight._torch_private import (
    active_dispatch_modes,
    active_function_modes,
    compiler_stance,
    global_module_hooks,
    saved_tensors_hooks_active,
)

collect_ignore_glob = ["multirank/*_worker.py"]  # scripts run by torchrun, not test modules

# -- property tests (tests/test_properties_*.py): HYPOTHESIS_PROFILE=long draws many more cases ---------------
# The default profile is small and derandomized, so make test and CI draw the same cases every run; a
# test's examples run under one function-scoped fixture (torch_left_clean checks the whole test), and
# deadline=None: profiling a model is slow and its first call builds things, which is no failure.
_PROPERTY_SETTINGS = dict(deadline=None, database=None, print_blob=True,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.register_profile("default", max_examples=25, derandomize=True, **_PROPERTY_SETTINGS)
settings.register_profile("long", max_examples=400, derandomize=False, **_PROPERTY_SETTINGS)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

torch.set_num_threads(max(1, min(2, torch.get_num_threads())))


@pytest.fixture(autouse=True)
def torch_left_clean():
    """No dispatch/function modes and no global module hooks may outlive a test."""
    before = global_module_hooks()
    yield
    assert active_dispatch_modes() == [], "a TorchDispatchMode was left active"
    assert active_function_modes() == [], "a TorchFunctionMode was left active"
    assert global_module_hooks() == before, "global module hooks were left installed"
    assert compiler_stance() == "default", "torch.compile's stance was left changed"
    assert not saved_tensors_hooks_active(), "a saved_tensors_hooks context was left active"


def pytest_addoption(parser):
    parser.addoption("--regen-golden", action="store_true", help="rewrite tests/golden/* from the current output")


# -- both counting backends -----------------------------------------------------------------
#: test modules whose counts are checked on both backends (the native one when it builds here):
#: every test_formulas_* module and these
BOTH_BACKENDS = {
    "test_attribution", "test_capture", "test_training", "test_transformers_models", "test_extensions",
    "test_coverage_sweep", "test_scripted", "test_devices", "test_generate_encoder_decoder",
    "test_attention_option", "test_scope", "test_registry", "test_backward_span", "test_memory",
}
DISPATCH_MODE_BRANCH = (
    "under a dispatch mode torch takes its tensor-subclass branch here (isTensorSubclassLike): the "
    "Python path counts that branch, the native recorder the one a plain run takes (docs/native.md)"
)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "python_backend(reason): counted on the Python backend only (the native one differs, for reason)")
    config.addinivalue_line(
        "markers", "any_backend: run once, whatever the backend (the test checks registration, not counts)")
    config.addinivalue_line(
        "markers", "multiprocess: starts other processes: ranks (torchrun, the deepspeed launcher) or an interpreter")
    config.addinivalue_line("markers", "browser: drives headless Chromium")
    config.addinivalue_line("markers", "torch_versions: run by make test-matrix on every tested torch, "
                                       "whether or not it starts an interpreter")


def pytest_generate_tests(metafunc):
    module = metafunc.module.__name__.rpartition(".")[2]
    if metafunc.definition.get_closest_marker("any_backend") is not None:
        return
    if "backend" in metafunc.fixturenames and (module.startswith("test_formulas_") or module in BOTH_BACKENDS):
        metafunc.parametrize("backend", ["python", "native"], indirect=True)


def _native_available() -> bool:
    from flopsight.capture.backends.native.recorder import RECORDER

    return RECORDER.load(quiet=True) is not None


@pytest.fixture(autouse=True)
def backend(request, monkeypatch):
    """Which counting backend the test's profiles use (``$FLOPSIGHT_BACKEND``): both, one after
    the other, in the modules of BOTH_BACKENDS; the environment's elsewhere (None)."""
    name = getattr(request, "param", None)
    if name == "native":
        marker = request.node.get_closest_marker("python_backend")
        if marker is not None:
            pytest.skip(f"Python backend only: {marker.args[0]}")
        if not _native_available():
            pytest.skip("the native backend cannot be built here")
    if name is not None:
        monkeypatch.setenv("FLOPSIGHT_BACKEND", name)
    return name


def pytest_report_header(config):
    from flopsight.capture.backends.native.recorder import RECORDER

    if RECORDER.load(quiet=True) is not None:
        return "flopsight backends: python and native (the counting tests run on both)"
    return f"flopsight backends: python only (native not built: {RECORDER.failure})"


#: what a module's repr says differently between torch releases, normalised in every golden
#: comparison (LayerNorm says ``bias=True`` from torch 2.12 on)
_REPR_VARIES = ((re.compile(r"(elementwise_affine=\w+), bias=True\)"), r"\1)"),)


def _normalised(text: str) -> str:
    for pattern, replacement in _REPR_VARIES:
        text = pattern.sub(replacement, text)
    return text


@functools.cache
def _pinned_torch() -> str:
    """The torch release ``make test`` pins (constraints.txt)."""
    from pathlib import Path

    pins = (Path(__file__).parents[1] / "constraints.txt").read_text().splitlines()
    return next(line.split("==")[1].strip() for line in pins if line.startswith("torch=="))


@pytest.fixture
def golden(request):
    """``golden(name, text)``: compare ``text`` with tests/golden/<name> (or rewrite it with --regen-golden).

    Where a torch release runs other ops for the same model (their names, and so the FakeClock's
    stamps), its own file tests/golden/torch-<major.minor>/<name> is compared instead; the
    folder's README says why. --regen-golden on the pinned torch rewrites the shared file, on
    another one that release's file (only where it differs from the shared one)."""
    from pathlib import Path

    from flopsight.formulas.availability import release

    def check(name: str, text: str) -> None:
        text = _normalised(text)
        shared = Path(__file__).parent / "golden" / name
        own = Path(__file__).parent / "golden" / "torch-{}.{}".format(*release(torch.__version__)) / name
        if request.config.getoption("--regen-golden"):
            if release(torch.__version__) == release(_pinned_torch()):
                shared.write_text(text)
            elif text != _normalised(shared.read_text()):
                own.parent.mkdir(exist_ok=True)
                own.write_text(text)
            elif own.exists():
                own.unlink()
        path = own if own.exists() else shared
        assert path.exists(), f"missing golden file {path}; run pytest --regen-golden and review the diff"
        assert text == _normalised(path.read_text())

    return check


@pytest.fixture
def fake_clock(monkeypatch):
    """Make every profile in the test use a deterministic FakeClock (1 ms per stamp)."""
    import flopsight
    import flopsight.profiler

    monkeypatch.setattr(flopsight.profiler, "default_clock", lambda device: flopsight.FakeClock(step=1e-3))


# -- ranks: one launch per launcher serves every test module (tests/multirank/scenarios.py) -----------------
# Each launch is an early fixture (tests/background.py): it starts with the session, beside the
# in-process tests, and the tests that use it run last. DeepSpeed's first: it takes longest.
@early_fixture
def deepspeed_scenarios(tmp_path_factory):
    """The folder of the DeepSpeed launch: a folder of files per scenario (compare, engine, zero_stages,
    ds_parallel)."""
    from multirank.launch import launch_scenarios

    return launch_scenarios(tmp_path_factory, "deepspeed")


@early_fixture
def gloo_scenarios(tmp_path_factory):
    """The folder of the torchrun launch: a folder of files per scenario (collectives, backends, hf, lightning, attach,
    span_error, parallel, parallel_plans, gather)."""
    from multirank.launch import launch_scenarios

    return launch_scenarios(tmp_path_factory, "gloo")


@early_fixture
def gloo4_scenarios(tmp_path_factory):
    """The folder of the 4-rank torchrun launch: a folder of files per scenario (parallel4)."""
    from multirank.launch import launch_scenarios

    return launch_scenarios(tmp_path_factory, "gloo4")


@early_fixture
def scripts(tmp_path_factory):
    """The interpreters tests registered with ``background.early_script``, run: name -> its
    ``subprocess.CompletedProcess``."""
    return background.run_scripts()


@pytest.fixture(scope="session", autouse=True)
def _early_launches(request, tmp_path_factory):
    """Every early fixture a selected test needs, started before the first test."""
    background.start({name for item in request.session.items for name in item.fixturenames
                      if name in background.JOBS}, tmp_path_factory)


# -- kinds of tests: `make test-fast` leaves out those that start other processes or a browser -------------
#: what in a test's (or one of its fixtures') source starts other processes: ranks, or an
#: interpreter of its own (each import of torch costs 1.5 to 2 s)
_MULTIPROCESS = ("_scenarios(", "subprocess.run(", "subprocess.Popen(", "subprocess_run(")


def _sources(item) -> str:
    """The source of the test function and of every fixture it uses (cached per function)."""
    import inspect

    functions = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    if info is not None:
        functions += [d.func for defs in info.name2fixturedefs.values() for d in defs]
    text = []
    for f in functions:
        if f is None:
            continue
        cached = _SOURCE.get(f)
        if cached is None:
            try:
                cached = inspect.getsource(f)
            except (OSError, TypeError):
                cached = ""
            _SOURCE[f] = cached
        text.append(cached)
    return "\n".join(text)


_SOURCE: dict = {}


def pytest_collection_finish(session):
    """Move what imports and collection built (torch, transformers, DeepSpeed, Lightning, 6,000
    test items) out of the collector's reach: every full collection, the automatic ones and
    those libraries call (accelerate's after each Trainer), then walks only what tests make."""
    import gc

    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(config, items):
    early = {id(item) for item in items if background.JOBS.keys() & set(getattr(item, "fixturenames", ()))}
    # last: their launches ran meanwhile
    items[:] = [item for item in items if id(item) not in early] + [item for item in items if id(item) in early]
    for item in items:
        source = _sources(item)
        if id(item) in early or any(mark in source for mark in _MULTIPROCESS):
            item.add_marker(pytest.mark.multiprocess)
        if "browser" in getattr(item, "fixturenames", ()) or "Chromium(" in source:
            item.add_marker(pytest.mark.browser)
