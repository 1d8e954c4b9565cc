"""Suite-wide checks: every test must leave torch as it found it."""

import pytest
import torch

from flopsight._torch_private import (
    active_dispatch_modes,
    active_function_modes,
    compiler_stance,
    global_module_hooks,
    saved_tensors_hooks_active,
)

collect_ignore_glob = ["multirank/*_worker.py"]  # scripts run by torchrun, not test modules

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


@pytest.fixture
def golden(request):
    """``golden(name, text)``: compare ``text`` with tests/golden/<name> (or rewrite it with --regen-golden)."""
    from pathlib import Path

    def check(name: str, text: str) -> None:
        path = Path(__file__).parent / "golden" / name
        if request.config.getoption("--regen-golden"):
            path.write_text(text)
        assert path.exists(), f"missing golden file {path}; run pytest --regen-golden and review the diff"
        assert text == path.read_text()

    return check


@pytest.fixture
def fake_clock(monkeypatch):
    """Make every profile in the test use a deterministic FakeClock (1 ms per stamp)."""
    import flopsight
    import flopsight.profiler

    monkeypatch.setattr(flopsight.profiler, "default_clock", lambda device: flopsight.FakeClock(step=1e-3))
