"""Scripted and traced models (torch.jit.script / torch.jit.trace).

TorchScript runs aten ops through the dispatcher, so the counting mode sees them all; module
hooks fire for the scripted module Python calls and not for its submodules, so its ops are
attributed to it. (tests/conftest.py checks that no hook or mode is left behind.)
"""


import pytest
import torch
from torch import nn

import flopsight
from flopsight.capture.model.scripted import is_scripted, type_name
from flopsight.capture.model.state import ModelState

# torch 2.13 deprecates TorchScript; users still have scripted models
pytestmark = pytest.mark.filterwarnings(r"ignore:`torch\.jit\.\w+` is deprecated:DeprecationWarning")
B = 3
# Linear(4, 8) -> ReLU -> Linear(8, 2), batch 3: MACs B * (4*8 + 8*2) = 3 * 48 = 144
# (FLOPs: 2 * 144 + bias adds B * (8 + 2) + ReLU B * 8 = 342, compared with the eager model's)
MACS = B * (4 * 8 + 8 * 2)


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def scripted():
    return torch.jit.script(mlp())


def traced():
    return torch.jit.trace(mlp(), torch.ones(B, 4))


def bn_scripted():
    torch.manual_seed(0)
    return torch.jit.script(nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Linear(6, 2)).train())


def snapshot(model):
    return (
        [m.training for m in model.modules()],
        {k: v.clone() for k, v in model.state_dict().items()},
    )


def assert_same(before, after):
    assert before[0] == after[0]
    assert before[1].keys() == after[1].keys()
    for k in before[1]:
        assert torch.equal(before[1][k], after[1][k]), k


def test_helpers():
    s, t = scripted(), traced()
    assert is_scripted(s) and is_scripted(t) and not is_scripted(mlp())
    assert [type_name(m) for m in s.modules()] == ["Sequential", "Linear", "ReLU", "Linear"]
    assert [type_name(m) for m in t.modules()] == ["Sequential", "Linear", "ReLU", "Linear"]


def test_model_state_restores_the_buffers_of_a_scripted_model():
    # a ScriptModule's _buffers is an OrderedDictWrapper: no clear(), keys() is a list
    model = bn_scripted()
    before = snapshot(model)
    state = ModelState(model)
    model(torch.randn(8, 4))
    assert int(model.state_dict()["1.num_batches_tracked"]) == 1
    state.rewind()
    assert_same(before, snapshot(model))
    model.eval()
    state.restore()
    assert_same(before, snapshot(model))


def test_model_state_puts_back_a_replaced_buffer_of_a_scripted_model():
    model = bn_scripted()
    bn = list(model.modules())[2]
    original = bn.running_mean
    state = ModelState(model)
    bn._buffers["running_mean"] = torch.full((6,), 5.0)  # TorchScript code may assign attributes
    state.restore()
    assert torch.equal(bn.running_mean, torch.zeros(6)) and bn.running_mean is original


@pytest.mark.parametrize("build", [scripted, traced], ids=["script", "trace"])
def test_totals_equal_the_eager_model_and_go_to_the_root(build):
    model = build()
    x = torch.ones(B, 4)
    eager = flopsight.profile(mlp(), x)
    result = flopsight.profile(model, x)
    assert result.total.forward.macs == MACS == eager.total.forward.macs
    assert result.total.forward.flops == eager.total.forward.flops
    assert result.total.params == eager.total.params == 4 * 8 + 8 + 8 * 2 + 2
    assert result.unsupported_ops == eager.unsupported_ops
    # submodules run inside TorchScript: their hooks never fire, the root holds every op
    assert result.total.self.forward.macs == MACS
    assert [s.type_name for s in result.walk()] == ["Sequential", "Linear", "ReLU", "Linear"]
    assert [s.ran for s in result.walk()] == [True, False, False, False]
    assert [c.stats.macs for c in result.root_calls] == [MACS]
    assert result.root_calls[0].batch_size == B


def test_profiling_a_scripted_model_leaves_it_as_found():
    model, x = bn_scripted(), torch.randn(8, 4)
    before, rng = snapshot(model), torch.get_rng_state()
    result = flopsight.profile(model, x, warm_up=2)
    assert_same(before, snapshot(model))
    assert torch.equal(rng, torch.get_rng_state())
    # Linear(4, 6) and Linear(6, 2) on 8 rows
    assert result.total.forward.macs == 8 * (4 * 6 + 6 * 2)


@pytest.mark.parametrize("build", [scripted, traced], ids=["script", "trace"])
def test_get_model_profile_of_a_scripted_or_traced_model(build, capsys):
    model = build().train()
    before = snapshot(model)
    flops, macs, params = flopsight.get_model_profile(model, input_shape=(B, 4), as_string=False)
    assert (macs, params) == (MACS, 58)
    assert "Sequential(" in capsys.readouterr().out
    assert_same(before, snapshot(model))


def test_flops_profiler_around_a_scripted_model():
    model = scripted()
    prof = flopsight.FlopsProfiler(model)
    prof.start_profile()
    model(torch.ones(B, 4))
    prof.stop_profile()
    assert prof.get_total_macs() == MACS
    prof.end_profile()


def test_an_eager_model_with_a_scripted_submodule_attributes_its_ops_to_it():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = scripted()
            self.head = nn.Linear(2, 1)

        def forward(self, x):
            return self.head(self.body(x))

    result = flopsight.profile(Net(), torch.ones(B, 4))
    assert result.module("body").forward.macs == MACS
    assert result.module("body").self.forward.macs == MACS  # its Linear children never ran
    assert result.module("head").forward.macs == B * 2
    assert result.total.forward.macs == MACS + B * 2
