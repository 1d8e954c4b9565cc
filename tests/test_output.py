"""One way to check an output file and to render and write a report, for every front-end."""

import os

import pytest
import torch

import flopsight
from flopsight.__main__ import main
from flopsight.renderers.output import check_output_file, print_report, write_report
from flopsight.renderers.text_renderer import render_text


def result():
    return flopsight.profile(torch.nn.Linear(4, 2), torch.ones(1, 4), clock=flopsight.FakeClock())


@pytest.mark.parametrize("ok", [None, "", "report.txt"])
def test_none_empty_and_paths_in_existing_directories_are_accepted(ok, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    check_output_file(ok)
    check_output_file(tmp_path / "r.txt")  # a PathLike


def test_bad_output_files_name_the_argument(tmp_path):
    with pytest.raises(TypeError, match="^output_file: expected a path or None, got int$"):
        check_output_file(3)
    with pytest.raises(IsADirectoryError, match="^output_file: .* is a directory; expected a file path$"):
        check_output_file(tmp_path)
    check_output_file(tmp_path / "missing" / "r.txt")  # the directory is created on writing
    with pytest.raises(TypeError, match="^config_output: expected a path or None, got list$"):
        check_output_file([], "config_output")


def test_write_report_to_stdout_or_a_file(tmp_path, capsys):
    write_report("a\n")
    write_report("b\n", "")
    assert capsys.readouterr().out == "a\nb\n"
    path = tmp_path / "r.txt"
    path.write_text("old, longer content\n")
    write_report("c\n", path)  # replaces the file
    write_report("d\n", os.fspath(path))
    assert path.read_text() == "d\n" and capsys.readouterr().out == ""


def test_print_report_renders_writes_and_returns_the_text(tmp_path, capsys):
    r = result()
    text = print_report(r, module_depth=0, detailed=False)
    assert text == render_text(r, module_depth=0, detailed=False) == capsys.readouterr().out
    path = tmp_path / "r.txt"
    assert print_report(r, path, profile_step=3) == path.read_text() == render_text(r, profile_step=3)
    assert capsys.readouterr().out == ""


def test_the_three_front_ends_write_the_same_way(tmp_path, capsys, fake_clock):
    model = torch.nn.Linear(4, 2)
    # DeepSpeed facade: get_model_profile and FlopsProfiler.print_model_profile
    path = tmp_path / "gmp.txt"
    flopsight.get_model_profile(model, input_shape=(1, 4), output_file=str(path))
    assert path.read_text().startswith("\n" + " DeepSpeed Flops Profiler ".center(78, "-")) and capsys.readouterr().out == ""
    with pytest.raises(TypeError, match="output_file: expected a path or None"):
        flopsight.get_model_profile(model, input_shape=(1, 4), output_file=3)
    prof = flopsight.FlopsProfiler(model)
    prof.start_profile()
    model(torch.ones(1, 4))
    prof.stop_profile()
    prof.print_model_profile(output_file=str(tmp_path / "fp.txt"))
    assert (tmp_path / "fp.txt").read_text() == render_text(prof.result)
    prof.print_model_aggregated_profile(module_depth=0)
    assert capsys.readouterr().out.startswith("Top 1 modules")
    prof.end_profile()
    # attach
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = tmp_path / "attach.txt"
    with flopsight.attach(model, opt, {"enabled": True, "output_file": str(out)}) as handle:
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
    assert out.read_text() == handle.report and capsys.readouterr().out == ""
    # the CLI: stdout
    assert main(["--model", "resnet18", "--no-detailed", "--depth", "0", "--warm-up", "0"]) == 0
    assert "Profile Summary at step 0" in capsys.readouterr().out
