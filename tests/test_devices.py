"""Counts do not depend on the device: CPU and meta agree for every reference model."""

import pytest
import torch
from models import JSC_Tiny, KwargsOnly, LeNet, Recursive, SharedChild, Stack, TiedLM
from torch import nn

import flopsight
from flopsight.cli import zoo

MODELS = {
    "lenet": (LeNet, lambda d: ((torch.ones(2, 3, 32, 32, device=d),), {})),
    "jsc_tiny": (JSC_Tiny, lambda d: ((torch.ones(4, 16, device=d),), {})),
    "stack": (Stack, lambda d: ((torch.ones(2, 8, device=d),), {})),
    "shared": (SharedChild, lambda d: ((torch.ones(2, 4, device=d),), {})),
    "recursive": (Recursive, lambda d: ((torch.ones(2, 4, device=d),), {"depth": 3})),
    "kwargs_only": (KwargsOnly, lambda d: ((), {"x": torch.ones(2, 4, device=d)})),
    "tied_lm": (TiedLM, lambda d: ((torch.zeros(2, 3, dtype=torch.long, device=d),), {})),
    "lstm_tagger": (
        lambda: nn.Sequential(nn.LSTM(8, 16, num_layers=2, bidirectional=True, batch_first=True)),
        lambda d: ((torch.ones(2, 5, 8, device=d),), {}),
    ),
    "transformer": (
        lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32, batch_first=True), 2),
        lambda d: ((torch.ones(2, 5, 16, device=d),), {}),
    ),
    "resnet18": (lambda: zoo.build("resnet18")[0], lambda d: ((torch.ones(1, 3, 64, 64, device=d),), {})),
}


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("grad", [False, True])
def test_cpu_and_meta_counts_are_identical(name, grad):
    factory, inputs = MODELS[name]
    torch.manual_seed(0)
    cpu_model = factory().eval()
    with torch.device("meta"):
        meta_model = factory().eval()
    with torch.set_grad_enabled(grad):
        cpu = flopsight.profile(cpu_model, *inputs("cpu"), warm_up=0)
        meta = flopsight.profile(meta_model, *inputs("meta"), warm_up=0)
    counts = {s.name: (s.forward.macs, s.forward.flops, s.calls) for s in cpu.walk()}
    assert cpu.total.forward.flops > 0
    assert counts == {s.name: (s.forward.macs, s.forward.flops, s.calls) for s in meta.walk()}
    assert cpu.unsupported_ops == meta.unsupported_ops == {}


def test_unsupported_op_is_warned_once_however_often_it_runs():
    registry = flopsight.REGISTRY.copy()
    registry.unregister(torch.ops.aten.addmm)
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2), nn.Linear(2, 2))
    with pytest.warns(flopsight.UnsupportedOpWarning) as record:
        result = flopsight.profile(model, torch.ones(1, 2), warm_up=0, registry=registry)
    assert [str(w.message).count("aten.addmm") for w in record] == [1]
    assert result.unsupported_ops == {"aten.addmm": 3}


def test_meta_report_says_its_latencies_are_not_the_hardwares():
    model = torch.nn.Linear(4, 4).to("meta")
    result = flopsight.profile(model, torch.ones(2, 4, device="meta"), warm_up=0)
    note = "note: profiled on the meta device: nothing ran on hardware, so latencies and FLOPS are n/a"
    assert any(" ".join(line.split()) == note for line in result.render("text").splitlines())
    cpu = flopsight.profile(torch.nn.Linear(4, 4), torch.ones(2, 4), warm_up=0)
    assert "meta device" not in cpu.render("text")


class _Placed:
    """Stands for a tensor placed on a device this machine may not have (only ``.device`` is read)."""

    def __init__(self, device):
        self.device = torch.device(device)


def placed(*devices: str) -> nn.Module:
    """A module whose parameters report these devices."""
    module = nn.Module()
    for i, device in enumerate(devices):
        module._parameters[f"p{i}"] = _Placed(device)  # straight into the dict: no Parameter check
    return module


def Offloaded() -> nn.Module:
    """A model whose first parameters stay on the CPU (CPU offload, FSDP's) and whose others
    are on ``cuda:1``."""
    return placed("cpu", "cpu", "cuda:1")


def test_the_timing_device_is_the_accelerator_the_model_or_its_inputs_are_on():
    from flopsight.capture.model.inputs import model_device
    from flopsight.capture.runtime.timing import CudaEventClock, HostClock, default_clock

    # not the first parameter's device: the accelerator one of them is on
    assert model_device(Offloaded()) == torch.device("cuda", 1)
    clock = default_clock(model_device(Offloaded()))
    assert isinstance(clock, CudaEventClock) and clock.device == torch.device("cuda", 1)

    # every parameter on the CPU, the inputs on a GPU: the GPU computes
    assert model_device(placed("cpu"), (_as_tensor_on("cuda:0"),)) == torch.device("cuda", 0)
    assert model_device(placed("cpu")) == torch.device("cpu")
    assert isinstance(default_clock(model_device(nn.Linear(2, 2))), HostClock)
    # no model: the CPU, unless this process has used CUDA
    expected = "cuda" if torch.cuda.is_available() and torch.cuda.is_initialized() else "cpu"
    assert model_device(nn.Module(), everything=True).type == expected


def _as_tensor_on(device):
    """A meta tensor that reports ``device`` (what model_device reads of an input)."""

    class Placed(torch.Tensor):
        @property
        def device(self):
            return torch.device(device)

    return torch.empty(1, device="meta").as_subclass(Placed)
