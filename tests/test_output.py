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
    path.write_text("--- DeepSpeed Flops Profiler ---\nan old report, longer than the new one\n")
    write_report("--- DeepSpeed Flops Profiler ---\nc\n", path)  # replaces the report
    write_report("--- DeepSpeed Flops Profiler ---\nd\n", os.fspath(path))
    assert path.read_text() == "--- DeepSpeed Flops Profiler ---\nd\n" and capsys.readouterr().out == ""


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
    assert (path.read_text().startswith("\n" + " DeepSpeed Flops Profiler ".center(78, "-"))
            and capsys.readouterr().out == "")
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
    with flopsight.attach(model, opt, {"enabled": True, "profile_step": 0, "output_file": str(out)}) as handle:
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
    assert out.read_text() == handle.report and capsys.readouterr().out == ""
    # the CLI: stdout
    assert main(["--model", "resnet18", "--no-detailed", "--depth", "0", "--warm-up", "0"]) == 0
    assert "Profile Summary at step 0" in capsys.readouterr().out


# -- issue 18: files are never clobbered ------------------------------------------------------------------
def test_an_unknown_ending_is_refused_before_rendering_naming_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match=r"^output_file: '.*r\.yaml' ends in '\.yaml', which names no report format; "
                                         r"use one of \.trace\.json, \.json"):
        check_output_file(os.fspath(tmp_path / "r.yaml"))
    for fine in ("r.txt", "r.log", "r.out", "report", "r.trace.json", "r.ops.csv", "r.HTML"):
        check_output_file(tmp_path / fine)  # .txt, .log, .out and no ending: DeepSpeed's text report
    check_output_file(tmp_path / "r.yaml", fmt="json")  # a format given: any name


def test_a_file_that_is_not_a_report_is_left_as_it_is_unless_forced(tmp_path):
    r = result()
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes, not a report\n")
    with pytest.raises(FileExistsError, match="is not a report flopsight or DeepSpeed wrote"):
        r.save(notes)
    assert notes.read_text() == "my notes, not a report\n"
    r.save(notes, force=True)
    assert "DeepSpeed Flops Profiler" in notes.read_text()
    for name in ("r.txt", "r.json", "r.trace.json", "r.csv", "r.ops.csv", "r.md", "r.html"):
        r.save(tmp_path / name)
        r.save(tmp_path / name)  # its own report is replaced without asking
    (tmp_path / "empty.json").write_text("")
    r.save(tmp_path / "empty.json")  # an empty file holds nothing to lose


def test_a_failed_write_leaves_the_old_report_whole_and_no_temporary_file(tmp_path, monkeypatch):
    r = result()
    path = tmp_path / "r.json"
    r.save(path)
    good = path.read_text()
    os.chmod(path, 0o640)
    real_fdopen = os.fdopen

    class FullDisk:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, text):
            self.f.write(text[:8192])  # a part of it lands, then the disk is full
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: FullDisk(real_fdopen(fd, *a, **k)))
    with pytest.raises(OSError, match="No space left on device"):
        r.save(path, indent=2)
    monkeypatch.undo()
    assert path.read_text() == good and sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    r.save(path, indent=2)
    assert os.stat(path).st_mode & 0o777 == 0o640  # replaced, its permissions kept


def test_an_unwritable_folder_is_refused_before_anything_runs(tmp_path, monkeypatch):
    # (as root every folder is writable: os.access is what is consulted, so it says no here)
    monkeypatch.setattr(os, "access", lambda path, mode: os.fspath(path) != os.fspath(tmp_path))
    with pytest.raises(PermissionError, match=r"cannot write .*: the folder .* is not writable"):
        check_output_file(tmp_path / "missing" / "r.json")  # the nearest folder that exists decides


@pytest.mark.parametrize("content, problem", [
    (b'{"schema_version": 3, "modules": [{"name": "", "ty', "truncated: the JSON ends early"),
    (bytes(range(256)), "binary data, not JSON text"),
    (b"[1, 2, 3]", 'a JSON list, not an object with "schema_version" and "modules"'),
    (b'{"a": 1}', 'JSON without them, not an object with "schema_version" and "modules"'),
    (b"", "the file is empty"),
    (b'{"schema_version": 99, "modules": [], "metadata": {"flopsight_version": "9.0"}}',
     "written by flopsight 9.0, schema 99; this flopsight reads schema 3 and older"),
])
def test_load_names_the_file_and_what_is_wrong(tmp_path, content, problem):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(ValueError) as info:
        flopsight.load(path)
    assert str(info.value).startswith(f"{path}: ") and problem in str(info.value)


def test_dev_null_is_written_to_never_replaced():
    result().save(os.devnull)  # DeepSpeed users discard the report this way
    assert not os.path.isfile(os.devnull)  # still the device, not a file renamed over it
