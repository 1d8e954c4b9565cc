"""A process's first profile costs what a later one costs: the native recorder's check runs once
per build (its verdict kept beside the build), and nothing imports ``torch._dynamo`` unless the
model or the span can compile (benchmarks/first_profile.py measures the times)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import flopsight
from flopsight.capture.backends.native import self_check
from flopsight.capture.backends.native.recorder import RECORDER, UNCHECKED

ROOT = Path(__file__).resolve().parents[1]
needs_native = pytest.mark.skipif(RECORDER.load(quiet=True) is None, reason="the native backend cannot be built here")


def test_a_first_profile_imports_no_dynamo_on_either_backend_unless_something_may_compile():
    """A plain model's profile on each backend, a training step included, then one after
    ``torch.compile`` made compiling possible (it imports dynamo itself): only then is the
    stance set, and so dynamo used."""
    script = """if True:
        import sys, torch, flopsight
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
        for backend in ("python", "native"):
            flopsight.profile(model, torch.ones(2, 4), backend=backend if backend == "python" else "auto")
            with flopsight.Profiler(model, backend=backend if backend == "python" else "auto"):
                model(torch.ones(2, 4)).sum().backward()
        print("after", "torch._dynamo" in sys.modules)
        compiled = torch.compile(model)
        print("compiling", "torch._dynamo" in sys.modules)
        with flopsight.Profiler(model, backend="python") as prof:
            model(torch.ones(2, 4))
        print("macs", prof.result.total.forward.macs)
    """
    if RECORDER.load(quiet=True) is not None:  # the build's check, done and kept: its checkpoint imports dynamo
        self_check.verdict(RECORDER.loaded)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    # 2 rows: 2*4*8 + 2*8*2 = 96 MACs
    assert done.stdout.split("\n")[:3] == ["after False", "compiling True", "macs 96"], done.stdout + done.stderr


@needs_native
def test_the_self_check_runs_once_per_build_and_later_processes_read_its_verdict(tmp_path, monkeypatch):
    """A verdict is kept in the build's folder under a key of the capture code: a new process
    (the recorder's verdicts forgotten) reads it; an edit of the capture code checks again."""
    monkeypatch.setattr(self_check, "cache_folder", lambda: tmp_path)
    monkeypatch.setattr(RECORDER, "verdict", UNCHECKED)
    ran = []
    monkeypatch.setattr(self_check, "disagreement", lambda module: ran.append(1))  # agrees (None)
    module = RECORDER.loaded
    assert self_check.verdict(module) is None and len(ran) == 1
    kept = (tmp_path / self_check.VERDICT_FILE).read_text().splitlines()
    assert kept == [self_check.key(), "agrees"]
    RECORDER.verdict = UNCHECKED  # a new process
    assert self_check.verdict(module) is None and len(ran) == 1
    monkeypatch.setattr(self_check, "key", lambda: "flopsight 0.0 edited")
    RECORDER.verdict = UNCHECKED
    assert self_check.verdict(module) is None and len(ran) == 2


@needs_native
def test_a_verdict_that_disagrees_is_kept_too_and_keeps_the_recorder_out(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(self_check, "cache_folder", lambda: tmp_path)
    monkeypatch.setattr(RECORDER, "verdict", UNCHECKED)
    (tmp_path / self_check.VERDICT_FILE).write_text(f"{self_check.key()}\ndisagrees: module 'x', forward: 1 MACs "
                                                     "against 2\n")
    result = flopsight.profile(torch.nn.Linear(4, 3), torch.ones(2, 4), backend="auto")
    assert result.metadata.backend == "python"
    assert result.metadata.backend_note == ("the native recorder disagrees with the Python path on this torch "
                                            "(module 'x', forward: 1 MACs against 2)")
    assert capsys.readouterr().err == ""  # said once, by the process that ran the check


def test_every_public_name_loads_from_its_own_module():
    """``import flopsight`` imports no torch; each name loads its own module when first used
    (a profile does not import the renderers, the diff or the integrations)."""
    assert all(getattr(flopsight, name) is not None for name in flopsight.__all__)
    assert set(flopsight.__all__) - {"__version__"} <= set(flopsight._WHERE)
