"""What a profile counts: only the profiled module's calls, each alias once, through caught
exceptions, never the passes of a profile nested inside it (regressions found by real runs)."""

import warnings

import pytest
import torch
from models import LeNet
from torch import nn

import flopsight
from flopsight import FlopsProfiler, get_model_profile
from flopsight.renderers.text_renderer import render_text

X = torch.ones(2, 3, 32, 32)  # LeNet at batch 2


def test_a_profiler_given_a_submodule_counts_only_that_submodule():
    net = LeNet()
    prof = FlopsProfiler(net.fc1)
    prof.start_profile()
    net(X)
    prof.stop_profile()
    # fc1 is Linear(400, 120) on 2 rows: 2 * 400 * 120 = 96,000 MACs (the whole LeNet is 1,303,440)
    assert prof.get_total_macs() == 96_000
    # 2 FLOPs per MAC + one bias add per output element (2 * 120)
    assert prof.get_total_flops() == 2 * 96_000 + 240
    prof.end_profile()


def test_a_submodule_profiler_measures_the_submodule_backward_only():
    net = LeNet()
    with flopsight.Profiler(net.fc1) as prof:
        net(X).sum().backward()
    result = prof.result
    # fc1's input (conv features) requires grad: grad_input (2x120 @ 120x400) and
    # grad_weight (120x2 @ 2x400) are 96,000 MACs each; the loss and other layers are not fc1's
    assert result.total.backward.macs == 2 * 96_000
    assert result.total.forward.macs == 96_000


def test_a_profile_around_user_code_does_not_count_the_code_around_the_model():
    model = nn.Linear(8, 4)
    with flopsight.Profiler(model) as prof:
        y = model(torch.ones(3, 8))
        (y @ torch.ones(4, 5)).sum()  # user code after the model: 3 * 4 * 5 MACs, not the model's
    assert prof.result.total.forward.macs == 3 * 8 * 4


class Aliased(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(10, 1)
        self.b = self.a

    def forward(self, x):
        return self.a(x) + self.b(x)


def test_an_alias_under_the_same_parent_is_one_module_with_both_calls(fake_clock):
    result = flopsight.profile(Aliased(), torch.ones(4, 10), warm_up=0)
    a = result.module("a")
    assert a.calls == 2 and a.forward.macs == 2 * 4 * 10  # two calls of 4 rows x 10 x 1
    assert result.module("b") is a  # the alias reads the same module
    assert result.total.forward.macs == 80 and result.total.params == 11
    assert "not called" not in render_text(result, profile_step=0)  # the report never says so


class FailsOnce(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 8)
        self.fail = True

    def forward(self, x):
        y = self.fc(x)
        if self.fail:
            self.fail = False
            raise RuntimeError("transient")
        return y


def test_counting_goes_on_after_an_exception_the_caller_caught():
    model = FailsOnce()
    with flopsight.Profiler(model) as prof:
        with pytest.raises(RuntimeError, match="transient"):
            model(torch.ones(1, 16))
        model(torch.ones(1, 16))
    # fc ran in both calls: 2 * 16 * 8 = 256 MACs, as DeepSpeed counts
    assert prof.result.total.forward.macs == 256


def test_a_profile_nested_in_a_running_profiler_counts_alone_and_the_outer_one_counts_it_too():
    """The inner profile counts its pass as if alone; the outer one counts what ran in its span:
    the inner profile's two passes (counted, then timed: warm_up=1) and its own forward."""
    net = LeNet()
    outer = FlopsProfiler(net)
    outer.start_profile()
    flops, macs, params = get_model_profile(net, args=[X], print_profile=False, as_string=False)
    net(X)
    outer.stop_profile()
    assert macs == LeNet.expected_macs(2)[""] == 1_303_440
    assert outer.get_total_macs() == 3 * 1_303_440
    outer.end_profile()


def test_ignore_modules_accepts_one_class_as_deepspeed_users_write_it():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    result = flopsight.profile(model, torch.ones(2, 4), ignore_modules=nn.ReLU, warm_up=0)
    assert result.module("1").ignored and not result.module("0").ignored
    flops, macs, _ = get_model_profile(model, input_shape=(2, 4), ignore_modules=nn.ReLU, print_profile=False,
                                       as_string=False)
    assert macs == 2 * 4 * 4
    with pytest.raises(TypeError, match="ignore_modules: expected an nn.Module subclass"):
        flopsight.profile(model, torch.ones(2, 4), ignore_modules=3)


def test_data_parallel_over_several_devices_is_warned_about():
    model = torch.nn.DataParallel(torch.nn.Linear(2, 2))  # on the CPU: no replicas, no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        flopsight.profile(model, torch.ones(1, 2))
    model.device_ids = [0, 1]  # as on two GPUs (where replicas run in threads of their own)
    with pytest.warns(UserWarning, match="nn.DataParallel over 2 devices runs its replicas in threads"):
        flopsight.Profiler(model).start().stop()
