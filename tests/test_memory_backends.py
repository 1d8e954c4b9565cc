"""Memory on both backends: the native one reads the allocators' reports (c10's memory-reporting
hook), the Python one each op's output storages; the Python figures are the check
(docs/conventions/memory.md)."""

from __future__ import annotations

import sys

import pytest
import torch
from helpers import assert_memory_agrees, close
from models import LeNet
from torch import nn

import flopsight
from flopsight.capture.backends.native.recorder import RECORDER

needs_native = pytest.mark.skipif(RECORDER.load(quiet=True) is None, reason="the native backend cannot be built here")


def cnn():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3), nn.ReLU(), nn.Flatten(), nn.Linear(16 * 6 * 6, 10))


def mlp():
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 10))


MODELS = {"mlp": (mlp, (32, 64)), "cnn": (cnn, (8, 3, 16, 16)), "lenet": (LeNet, (4, 3, 32, 32))}


def step(build, shape, backend):
    torch.manual_seed(0)
    model = build()
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(*shape)
    with flopsight.Profiler(model, optimizer=opt, memory=True, backend=backend) as prof:
        model(x).sum().backward()
        opt.step()
    return prof.result


@needs_native
@pytest.mark.parametrize("name", MODELS)
def test_the_step_peak_and_every_modules_figures_agree_within_5_percent(name):
    python, native = (step(*MODELS[name], backend) for backend in ("python", "native"))
    assert (python.metadata.backend, native.metadata.backend) == ("python", "native")
    assert_memory_agrees(python, native)
    for path in python.modules:
        assert python.module(path).memory.temporaries == 0  # the Python backend never sees inside an op
    # what it does see inside them: convolution's im2col buffers on the CPU, each op's own
    conv = "0" if name == "cnn" else "conv1" if name == "lenet" else None
    if conv is not None:
        assert native.module(conv).memory.temporaries > 0


@needs_native
def test_a_units_blocks_that_outlive_it_are_the_allocators_and_not_the_pythons():
    """Where a call counted whole keeps blocks it made past its return (attention's weights on
    the math path, a dropout mask: saved for backward), the native figure counts them and the
    Python one, which sees only the call's output, does not: the forward peaks differ by those,
    the activations (the same saved tensors, packed) and the step peak do not."""
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                     intermediate_size=128, vocab_size=500)
    ids = torch.randint(0, 500, (2, 32))
    results = {}
    for backend in ("python", "native"):
        torch.manual_seed(0)
        model = transformers.BertForSequenceClassification(config)
        opt = torch.optim.AdamW(model.parameters())
        with flopsight.Profiler(model, optimizer=opt, memory=True, backend=backend) as prof:
            model(input_ids=ids, labels=torch.zeros(2, dtype=torch.long)).loss.backward()
            opt.step()
        results[backend] = prof.result
    python, native = results["python"], results["native"]
    assert python.memory.activations == native.memory.activations
    assert close(python.memory.peak, native.memory.peak)
    assert native.memory.phase_peaks["forward"] > python.memory.phase_peaks["forward"]


def _with_kernels(model, x):
    with flopsight.Profiler(model, memory=True, kernels=True, backend="native") as prof:
        model(x)
    return prof.result


def _inside_torch_profiler(model, x):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        return flopsight.profile(model, x, memory=True, backend="native")


@needs_native
@pytest.mark.parametrize("run", [_with_kernels, _inside_torch_profiler])
def test_where_torch_profiler_holds_the_reports_memory_is_read_in_python(run):
    """The allocators report to the thread's one profiler state, which torch.profiler takes:
    a pass that records kernels, or one inside a running torch.profiler, reads memory in Python."""
    result = run(nn.Linear(4, 2), torch.ones(2, 4))
    assert result.metadata.backend == "python" and "torch.profiler" in result.metadata.backend_note
    assert result.memory.peak > 0


@needs_native
def test_native_memory_leaves_the_thread_as_found_also_after_an_exception():
    """The session's state goes onto the thread's debug info and comes off at stop, raised or
    not: torch.profiler (which takes the same slot) runs after it, and so does a profile."""
    recorder = RECORDER.load(quiet=True)
    model = nn.Linear(4, 2)
    with pytest.raises(RuntimeError, match="boom"):
        with flopsight.Profiler(model, memory=True, backend="native"):
            model(torch.ones(1, 4))
            raise RuntimeError("boom")
    assert not recorder.profiler_state()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as p:
        torch.ones(8) * 2
    assert len(p.key_averages()) > 0
    assert flopsight.profile(model, torch.ones(1, 4), memory=True).metadata.backend == "native"
    assert not recorder.profiler_state()


@needs_native
@pytest.mark.multiprocess
def test_no_allocator_warning_reaches_the_user(tmp_path):
    """c10's CPU allocator logs a warning for each block released while memory is reported that
    it saw allocated before; flopsight expects those (every tensor made before the session)."""
    import subprocess

    script = tmp_path / "run.py"
    script.write_text("import torch, flopsight\n"
                      "x = [torch.ones(64) for _ in range(4)]\n"
                      "m = torch.nn.Linear(64, 64)\n"
                      "with flopsight.Profiler(m, memory=True, backend='native'):\n"
                      "    m(torch.ones(2, 64)); del x\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True)
    assert "Memory block of unknown size" not in out.stderr


class TwoPlaces(nn.Module):
    """One Linear(16, 16) reached under two paths (``first`` and ``second``), a ReLU and a
    doubling between: which path a tensor it saves for backward belongs to depends on its caller."""

    def __init__(self):
        super().__init__()
        shared = nn.Linear(16, 16)
        self.first = nn.Sequential(shared)
        self.act = nn.ReLU()
        self.second = nn.Sequential(shared)

    def forward(self, x):
        return self.second(self.act(self.first(x)) * 2)


@needs_native
def test_saved_tensors_of_a_module_under_two_paths_go_to_the_path_that_called_it():
    # the native backend answers "which module runs" from its C++ call stack without charging,
    # except for a module with several paths, placed by its callers. Each call of the shared
    # Linear saves its input for backward: first.0 its 4 x 16 fp32 input x (4 * 16 * 4 = 256
    # bytes); the ReLU its output (256 bytes); the doubling (by a number) saves nothing; second.0
    # its input, the doubled tensor (256 bytes), not first.0 again
    python, native = (step(TwoPlaces, (4, 16), backend) for backend in ("python", "native"))
    assert native.metadata.backend == "native"
    for result in (python, native):
        saved = {path: result.module(path).memory.activations for path in ("first.0", "act", "second.0")}
        assert saved == {"first.0": 256, "act": 256, "second.0": 256}, result.metadata.backend
