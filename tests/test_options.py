"""ProfileOptions: one frozen set of options, validated once, whose errors name the field; every
front-end builds one."""

import dataclasses
import re

import pytest
import torch
from torch import nn

import flopsight
from flopsight import ProfileOptions


@pytest.mark.parametrize("field, value, error, message", [
    ("memory", "yes", TypeError, "memory: expected a bool, got str"),
    ("kernels", 1, TypeError, "kernels: expected a bool"),
    ("attention", "causal", ValueError, "attention: expected one of 'dense', 'effective'"),
    ("backend", "cuda", ValueError, "backend: expected one of 'auto', 'native', 'python'"),
    ("ignore_modules", [int], TypeError, "ignore_modules: expected nn.Module subclasses"),
    ("registry", {}, TypeError, "registry: expected a flopsight Registry"),
    ("gather_timeout", 0, ValueError, "gather_timeout: expected a positive number of seconds"),
    ("warm_up", -1, ValueError, "warm_up: expected an int >= 0, got -1"),
    ("warm_up", 1.0, ValueError, "warm_up: expected an int >= 0, got 1.0"),
    ("repeat", True, ValueError, "repeat: expected a positive int (how many calls to time), got True"),
    ("mode", "train", ValueError, "mode: expected one of 'forward', 'generate'"),
    ("func_name", 3, TypeError, "func_name: expected a method name"),
    ("timing", "both", ValueError, "timing: expected one of 'auto', 'separate', 'subtract'"),
    ("optimizer", object(), TypeError, "optimizer: expected a torch.optim.Optimizer"),
    ("batch_size", 0, ValueError, "batch_size: expected a positive int or None, got 0"),
    ("parallel", {"tp": 0}, ValueError, "parallel['tp']: expected a positive int, got 0"),
    ("steps", 0, ValueError, "steps: expected a positive int or None"),
])
def test_each_field_is_checked_once_and_its_error_names_it(field, value, error, message):
    message = re.escape(message)
    with pytest.raises(error, match=message):
        ProfileOptions(**{field: value})
    # the same message from every way in that takes the field
    model = nn.Linear(2, 2)
    takes_call = field not in ("optimizer", "batch_size", "parallel", "steps")
    with pytest.raises(error, match=message):
        if takes_call:
            flopsight.profile(model, torch.ones(1, 2), **{field: value})
        else:
            flopsight.Profiler(model, **{field: value})


def test_it_is_frozen_and_replace_validates_again():
    options = ProfileOptions(memory=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.memory = False
    assert options.replace(repeat=3).repeat == 3 and options.replace(repeat=3).memory
    with pytest.raises(ValueError, match="repeat"):
        options.replace(repeat=0)
    with pytest.raises(TypeError, match="colour: not an option of a profile"):
        ProfileOptions.of(colour="red")
    with pytest.raises(TypeError, match="options: expected a flopsight.ProfileOptions"):
        flopsight.profile(nn.Linear(2, 2), torch.ones(1, 2), options={"memory": True})


def test_a_call_refuses_span_options_and_a_span_call_options():
    model = nn.Linear(2, 2)
    with pytest.raises(ValueError, match=r"steps: profile\(\) does not take it"):
        flopsight.profile(model, torch.ones(1, 2), steps=2)
    with pytest.raises(ValueError, match="repeat: Profiler does not take it"):
        flopsight.Profiler(model, repeat=3)


def test_one_options_object_drives_profile_and_profiler_alike():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    options = ProfileOptions(ignore_modules=[nn.Sequential], clock=flopsight.FakeClock(), memory=True,
                             gather_timeout=None)
    call = flopsight.profile(model, torch.ones(3, 4), options=options.replace(warm_up=0))
    with flopsight.Profiler(model, options=options) as prof:
        model(torch.ones(3, 4))
    for result in (call, prof.result):
        # 3 * (4*8 + 8*2) = 144 MACs, all at the root: the Sequential is ignored, its children with it
        assert result.total.forward.macs == 144 and result.memory is not None
    # explicit fields override the object's
    assert flopsight.profile(model, torch.ones(3, 4), options=options, memory=False, warm_up=0).memory is None


def test_the_front_ends_build_one():
    pytest.importorskip("transformers")
    from flopsight.integrations.hf import FlopsightCallback
    from flopsight.integrations.lightning import FlopsightCallback as LightningCallback

    hf = FlopsightCallback(memory=True, attention="effective", batch_size=4)
    assert hf.options == ProfileOptions(memory=True, attention="effective", batch_size=4, steps=1)
    with pytest.raises(ValueError, match="batch_size: expected a positive int or None"):
        FlopsightCallback(batch_size=0)
    pl = LightningCallback(memory=True, steps=2)
    assert pl.options.memory and pl.options.steps == 2
    with pytest.raises(ValueError, match="steps: expected a positive int or None"):
        LightningCallback(steps=0)
    with pytest.raises(ValueError, match=r"warm_up: expected an int >= 0"):
        flopsight.get_model_profile(nn.Linear(2, 2), (1, 2), warm_up=-1, print_profile=False)
