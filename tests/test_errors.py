"""Bad input gets an error that names the argument and what was expected."""

import pytest
import torch
from torch import nn

import flopsight


def model():
    return nn.Linear(4, 2)


class Exploding(nn.Module):
    """A model that fails if it ever runs: errors must come before the model runs."""

    def forward(self, x):
        raise AssertionError("the model ran")


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


def test_output_file_in_a_missing_directory_is_created_as_deepspeed_does(tmp_path):
    missing = tmp_path / "no" / "such" / "report.txt"
    flopsight.get_model_profile(model(), input_shape=(1, 4), output_file=str(missing))
    assert "Profile Summary at step 1:" in missing.read_text()


def test_output_file_that_is_a_directory_is_an_error_before_the_model_runs(tmp_path):
    with pytest.raises(IsADirectoryError, match="^output_file: .* is a directory"):
        flopsight.get_model_profile(Exploding(), input_shape=(1, 4), output_file=str(tmp_path))


@pytest.mark.parametrize("warm_up", [-1, 1.5, "2", True])
def test_warm_up_must_be_a_non_negative_int(warm_up):
    with pytest.raises(ValueError, match="warm_up: expected an int >= 0"):
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


@pytest.mark.parametrize("depth, top, match", [(-2, 1, "module_depth: expected an int >= -1"),
                                               (1.5, 1, "module_depth"), (-1, -1, "top_modules: expected an int >= 0"),
                                               (-1, True, "top_modules")])
def test_report_layout_is_checked_before_the_model_runs(depth, top, match):
    with pytest.raises(ValueError, match=match):
        flopsight.get_model_profile(Exploding(), input_shape=(1, 4), module_depth=depth, top_modules=top)


def test_top_modules_0_lists_no_module_per_depth_as_deepspeed_does(capsys):
    flopsight.get_model_profile(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), input_shape=(1, 4), top_modules=0,
                                detailed=False)
    out = capsys.readouterr().out
    assert "Top 0 modules in terms of params, MACs or fwd latency at different model depths:" in out
    assert "    params      - {}" in out


def test_input_shape_wins_over_args_with_a_warning_as_in_deepspeed():
    with pytest.warns(UserWarning, match="input_shape and args both given: the input is built from input_shape"):
        flops, macs, params = flopsight.get_model_profile(model(), input_shape=(3, 4), args=[torch.ones(1, 4)],
                                                          print_profile=False, as_string=False)
    assert macs == 3 * 4 * 2  # from the (3, 4) input


def test_flops_profiler_getters_read_0_after_reset_and_print_warns_before_measuring(capsys):
    net = model()
    prof = flopsight.FlopsProfiler(net)
    with pytest.warns(UserWarning, match="print_model_profile: nothing measured yet"):
        prof.print_model_profile()
    assert capsys.readouterr().out == ""
    prof.start_profile()
    net(torch.ones(1, 4))
    assert prof.get_total_macs() == 8
    prof.reset_profile()
    assert (prof.get_total_macs(), prof.get_total_flops(), prof.get_total_duration()) == (0, 0, 0)
    assert prof.get_total_params() == 10 and prof.get_total_macs(as_string=True) == "0 MACs"
    net(torch.ones(1, 4))
    assert prof.get_total_macs() == 8
    prof.end_profile()
