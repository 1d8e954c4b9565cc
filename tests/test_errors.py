"""Bad input gets an error that names the argument and what was expected."""

import pytest
import torch
from torch import nn

import flopsight


def model():
    return nn.Linear(4, 2)


def test_model_that_is_not_a_module():
    with pytest.raises(TypeError, match=r"model: expected a torch.nn.Module, got function"):
        flopsight.get_model_profile(lambda x: x, input_shape=(1, 4))
    with pytest.raises(TypeError, match="model: expected a torch.nn.Module"):
        flopsight.profile("bert", torch.ones(1))
    with pytest.raises(TypeError, match="model: expected a torch.nn.Module"):
        flopsight.FlopsProfiler(object())


def test_no_inputs_at_all():
    with pytest.raises(ValueError, match=r"input_shape: the model needs inputs; pass input_shape=\(...\), args"):
        flopsight.get_model_profile(model())


@pytest.mark.parametrize("shape", [[1, 4], (1, "4"), (), (1, 4.0), (0, 4), (True, 4), 4])
def test_input_shape_must_be_a_tuple_of_positive_ints(shape):
    with pytest.raises(TypeError, match="input_shape: expected a non-empty tuple of positive ints"):
        flopsight.get_model_profile(model(), input_shape=shape, print_profile=False)


def test_input_shape_and_args_together():
    with pytest.raises(ValueError, match="input_shape: give either input_shape or args"):
        flopsight.get_model_profile(model(), input_shape=(1, 4), args=[torch.ones(1, 4)])


def test_unknown_mode():
    with pytest.raises(ValueError, match=r"mode: expected one of 'forward', 'generate', got 'backward'"):
        flopsight.get_model_profile(model(), input_shape=(1, 4), mode="backward")


def test_generate_on_a_model_without_generate():
    with pytest.raises(ValueError, match="mode: Linear has no method 'generate' to profile"):
        flopsight.get_model_profile(model(), input_shape=(1, 4), mode="generate")


def test_func_name_that_is_not_a_method():
    with pytest.raises(ValueError, match="func_name: Linear has no method 'predict'"):
        flopsight.profile(model(), torch.ones(1, 4), func_name="predict")


def test_func_name_profiles_any_method():
    class WithEncode(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 3)

        def encode(self, x):
            return self.proj(x)

    result = flopsight.profile(WithEncode(), torch.ones(2, 4), func_name="encode")
    assert result.module("proj").forward.macs == 2 * 4 * 3
    assert result.metadata.method == "encode"


def test_output_file_in_a_missing_directory(tmp_path):
    missing = tmp_path / "no" / "such" / "report.txt"
    with pytest.raises(FileNotFoundError, match="output_file: directory .* does not exist"):
        flopsight.get_model_profile(model(), input_shape=(1, 4), output_file=str(missing))
    assert not missing.parent.exists()


@pytest.mark.parametrize("warm_up", [-1, 1.5, "2", True])
def test_warm_up_must_be_a_non_negative_int(warm_up):
    with pytest.raises(ValueError, match="warm_up: expected a non-negative int"):
        flopsight.profile(model(), torch.ones(1, 4), warm_up=warm_up)


def test_args_and_kwargs_types():
    with pytest.raises(TypeError, match="args: expected a tensor, a tuple or a list"):
        flopsight.profile(model(), args={"x": 1})
    with pytest.raises(TypeError, match="kwargs: expected a dict"):
        flopsight.profile(model(), kwargs=[1])


def test_ignore_modules_must_be_module_types():
    with pytest.raises(TypeError, match="ignore_modules: expected nn.Module subclasses"):
        flopsight.profile(model(), torch.ones(1, 4), ignore_modules=["Linear"])


def test_unknown_timing():
    with pytest.raises(ValueError, match="timing: expected one of"):
        flopsight.profile(model(), torch.ones(1, 4), timing="fast")


def test_unknown_module_path_suggests_close_names():
    result = flopsight.profile(nn.Sequential(nn.Linear(4, 2)), torch.ones(1, 4))
    with pytest.raises(KeyError, match=r"name: no module at path '00'.*did you mean '0'"):
        result.module("00")
