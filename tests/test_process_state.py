"""Everything flopsight keeps for the life of a process is in one place (flopsight/_process.py),
and a test can put it all back as a fresh process has it."""

from __future__ import annotations

import warnings

import torch

import flopsight
import flopsight.integrations.attach  # noqa: F401  (their state objects, made at import)
import flopsight.integrations.deepspeed.engine  # noqa: F401
from flopsight._process import PROCESS, WARNED, reset
from flopsight.capture.backends.native.recorder import RECORDER
from flopsight.torch_support import UntestedTorchWarning


def test_the_process_state_is_one_object_of_named_parts():
    flopsight.profile(torch.nn.Linear(2, 2), torch.ones(1, 2))
    assert {"sessions", "recorder", "stance", "gathering", "routes", "values read", "attach finishes",
            "deepspeed install", "profiled modules", "warned"} <= set(PROCESS.names())
    assert all(callable(getattr(PROCESS, name).reset) for name in PROCESS.names())


def test_reset_gives_a_fresh_processs_state_and_keeps_the_native_build(monkeypatch):
    """A warning given once per process is given again after reset; the loaded extension stays
    (a library cannot be unloaded) and still counts."""
    module = RECORDER.load(quiet=True)
    monkeypatch.setattr(torch, "__version__", "2.16.0")  # outside the tested range: warned once
    WARNED.first("untested torch")  # as if this process had warned already
    with warnings.catch_warnings():
        warnings.simplefilter("error", UntestedTorchWarning)
        flopsight.profile(torch.nn.Linear(2, 2), torch.ones(1, 2))
    reset()
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            result = flopsight.profile(torch.nn.Linear(2, 2), torch.ones(1, 2))
        assert any(w.category is UntestedTorchWarning for w in seen)
        assert RECORDER.loaded is module and result.total.forward.macs == 4  # 1 row x 2 x 2
    finally:
        reset()
