"""The built-in models and ``python -m flopsight``."""

import pytest
import torch

import flopsight
from flopsight.__main__ import main
from flopsight.cli import zoo


def conv(cout, hw, cin, k):
    return cout * hw * hw * cin * k * k  # MACs per image: Cout * Hout * Wout * Cin * k * k


def test_resnet18_macs_per_stage_match_hand_derivation():
    model, inputs = zoo.build("resnet18", batch_size=1)
    with torch.no_grad():
        result = flopsight.profile(model, inputs)
    stem = conv(64, 112, 3, 7)
    layer1 = 4 * conv(64, 56, 64, 3)

    def stage(c, hw):  # a strided 3x3 conv, a 1x1 downsample, three more 3x3 convs
        return conv(c, hw, c // 2, 3) + conv(c, hw, c // 2, 1) + 3 * conv(c, hw, c, 3)

    expected = {"conv1": stem, "layer1": layer1, "layer2": stage(128, 28), "layer3": stage(256, 14),
                "layer4": stage(512, 7), "fc": 512 * 1000}
    for name, macs in expected.items():
        assert result.module(name).forward.macs == macs, name
    assert result.total.forward.macs == sum(expected.values()) == 1_814_073_344
    assert result.total.params == 11_689_512


def test_build_rejects_unknown_names_and_bad_batch_sizes():
    with pytest.raises(ValueError, match="name: expected one of resnet18, resnet34, resnet50"):
        zoo.build("vgg")
    with pytest.raises(ValueError, match="batch_size: expected a positive int"):
        zoo.build("resnet18", batch_size=0)


def test_build_takes_the_new_names_of_the_plain_torch_models():
    model, inputs = zoo.build("resnet-50", batch_size=2)
    assert type(model).__name__ == "ResNet" and tuple(inputs[0].shape) == (2, 3, 224, 224)
    assert zoo.param_count(model) == 25_557_032


def test_python_m_flopsight_prints_the_report(capsys):
    assert main(["--model", "resnet18", "--no-detailed", "--depth", "1", "--top", "2", "--warm-up", "0"]) == 0
    out = capsys.readouterr().out
    assert "fwd MACs per GPU:".ljust(70) + "  1.81 GMACs" in out
    assert "depth 1:" in out and "depth 2:" not in out and "Detailed Profile" not in out


def test_the_first_command_line_still_parses(capsys):
    # `python -m flopsight --model resnet50 ...` (no command) is `flopsight profile resnet50 ...`
    assert main(["--model", "resnet50", "--no-detailed", "--depth", "0", "--warm-up", "0"]) == 0
    assert "fwd MACs per GPU:".ljust(70) + "  4.09 GMACs" in capsys.readouterr().out
