"""Ops go to the innermost active module; totals are derived from self values."""

import pytest
import torch
from models import KwargsOnly, LeNet, Recursive, SharedChild, Stack, TiedLM
from torch import nn

import flopsight


def assert_additive(result):
    """inclusive == self + sum(children) for every module, phase and measure."""
    for s in result.walk():
        for phase in s.inclusive:
            for measure in ("macs", "flops", "latency"):
                whole = getattr(s.inclusive[phase], measure)
                parts = getattr(s.self[phase], measure) + sum(
                    getattr(result.module(c).inclusive[phase], measure) for c in s.children
                )
                assert whole == pytest.approx(parts), (s.name, phase, measure)


def test_lenet_per_module_macs_match_hand_derivation():
    result = flopsight.profile(LeNet(), torch.ones(8, 3, 32, 32))
    for name, macs in LeNet.expected_macs(8).items():
        assert result.module(name).forward.macs == macs, name
    assert result.total.forward.flops == LeNet.expected_flops(8)
    assert_additive(result)


def test_functional_calls_in_forward_go_to_the_root_not_dropped():
    # F.relu and torch.flatten run in LeNet.forward itself: DeepSpeed drops them
    result = flopsight.profile(LeNet(), torch.ones(2, 3, 32, 32))
    relu_flops = (6 * 28 * 28 + 16 * 10 * 10 + 120 + 84) * 2
    assert result.total.self.forward.flops == relu_flops
    assert result.total.self.forward.macs == 0


def test_ops_outside_the_model_are_not_the_models_unless_no_model_is_given():
    model = nn.Sequential(nn.Linear(3, 2))
    x, w = torch.ones(4, 5), torch.ones(5, 7)
    with flopsight.Profiler(model) as prof:
        model(torch.ones(4, 3))  # 4*3*2 MACs in the Linear
        _ = x @ w  # outside the model: 4*5*7 MACs, not the model's
    assert prof.result.module("0").forward.macs == prof.result.total.forward.macs == 4 * 3 * 2
    with flopsight.Profiler() as everything:
        model(torch.ones(4, 3))
        _ = x @ w
    assert everything.result.total.forward.macs == 4 * 3 * 2 + 4 * 5 * 7


def test_module_called_several_times_keeps_call_count_and_sums_costs():
    lin = nn.Linear(4, 4)

    class ThreeTimes(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def forward(self, x):
            return self.lin(self.lin(self.lin(x)))

    result = flopsight.profile(ThreeTimes(), torch.ones(2, 4))
    assert result.module("lin").calls == 3
    assert result.module("lin").forward.macs == 3 * 2 * 4 * 4


def test_shared_module_is_attributed_per_call_to_the_calling_path():
    result = flopsight.profile(SharedChild(), torch.ones(2, 4))
    per_call = 2 * 4 * 4
    assert result.module("enc.0").forward.macs == per_call
    assert result.module("dec.0").forward.macs == per_call
    assert result.module("enc").forward.macs == 2 * per_call
    assert result.module("dec").forward.macs == per_call
    assert result.module("enc.0").shared_with == ("dec.0",)
    # a child is never larger than its parent, and the root is the sum
    for s in result.walk():
        for c in s.children:
            assert result.module(c).forward.macs <= s.forward.macs
    assert result.total.forward.macs == 3 * per_call
    assert result.total.params == 2 * 16  # the shared weight once
    assert_additive(result)


def test_recursion_counts_every_level_without_double_counting():
    result = flopsight.profile(Recursive(), torch.ones(3, 4), kwargs={"depth": 2})
    assert result.total.calls == 3  # depth 2, 1, 0
    assert result.total.forward.macs == 3 * 3 * 4 * 4
    assert result.total.forward.latency > 0
    # the outer call's span contains the inner ones: inclusive equals the outer span only
    assert result.total.self.forward.latency == result.total.forward.latency


def test_module_called_with_keyword_arguments_only():
    result = flopsight.profile(KwargsOnly(), kwargs={"x": torch.ones(3, 4), "scale": 2.0})
    assert result.module("proj").forward.macs == 3 * 4 * 2
    assert result.module("proj").calls == 1
    assert result.total.self.forward.flops == 3 * 2  # the multiply by scale


def test_parameter_free_model():
    model = nn.Sequential(nn.ReLU(), nn.Softmax(dim=-1))
    result = flopsight.profile(model, torch.ones(2, 5))
    assert result.total.params == 0
    assert result.total.forward.flops == 2 * 5 + 2 * 5  # relu 1/elem, softmax 1/elem
    flops, macs, params = flopsight.get_model_profile(model, input_shape=(2, 5), print_profile=False, as_string=False)
    assert (flops, macs, params) == (20, 0, 0)


def test_container_shows_children_totals_and_unused_module_is_not_called():
    result = flopsight.profile(Stack(width=8, depth=3), torch.ones(2, 8))
    layers = result.module("layers")
    assert layers.calls == 0 and layers.ran
    assert layers.forward.macs == 3 * 2 * 8 * 8
    assert layers.forward.latency == pytest.approx(sum(result.module(f"layers.{i}").forward.latency for i in range(3)))
    assert not result.module("norms.2").ran
    assert result.module("norms.1").ran


def test_tied_weights_count_once():
    result = flopsight.profile(TiedLM(vocab=10, dim=4), torch.zeros(2, 3, dtype=torch.long))
    assert result.total.params == 10 * 4
    assert result.module("head").params == 10 * 4
    assert result.module("embed").params == 10 * 4


def test_trainable_and_frozen_parameters():
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    model[0].requires_grad_(False)
    result = flopsight.profile(model, torch.ones(1, 4))
    assert result.total.params == 15 + 8
    assert result.total.params_trainable == 8
    assert result.total.params_frozen == 15


def test_zero3_partitioned_parameters_count_by_ds_numel():
    class Partitioned(nn.Module):
        """Parameters as ZeRO-3 leaves them between gathers: empty locally, full size in ds_numel."""

        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 3)
            full = {"weight": 12, "bias": 3}
            for name, p in self.lin.named_parameters():
                p.data = torch.empty(0)
                p.ds_numel = full[name]

        def forward(self, x):
            return x * 2

    result = flopsight.profile(Partitioned(), torch.ones(1, 4))
    assert result.total.params == 15
    assert result.module("lin").params == 15


def test_ignored_module_types_fold_into_their_parent():
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 2)))
    result = flopsight.profile(model, torch.ones(1, 4), ignore_modules=[nn.Linear])
    assert result.module("0").ignored and result.module("0").forward.macs == 0
    assert result.total.self.forward.macs == 16
    assert result.module("1").self.forward.macs == 8
    assert result.total.forward.macs == 24


def test_alias_names_for_one_module_under_the_same_parent():
    lin = nn.Linear(2, 2)

    class Aliased(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = lin
            self.b = lin

        def forward(self, x):
            return self.b(self.a(x))

    result = flopsight.profile(Aliased(), torch.ones(1, 2))
    # one module under two names of the same parent: reported once, with both calls
    assert result.module("a").calls == 2
    assert result.module("b") is result.module("a") and result.module("a").aliases == ("b",)
    assert result.total.forward.macs == 2 * 4
