"""One report pipeline: one options object, a report model of numbers, renderers that only
format it, and one function that writes any report anywhere."""

from __future__ import annotations

import io

import pytest
import torch
from models import Stack

import flopsight
from flopsight.analysis.report import Report, TreeAlias, TreeEnd, TreeEntry
from flopsight.analysis.report_options import ReportOptions
from flopsight.renderers import FORMATS
from flopsight.renderers.output import write
from flopsight.renderers.text_renderer import format_text, render_text
from flopsight.result import reporting


@pytest.fixture
def result(fake_clock):
    return flopsight.profile(Stack(width=8, depth=3), torch.ones(2, 8))


def test_options_are_checked_once_for_every_format(result):
    with pytest.raises(TypeError, match="^colapse: not a report option; did you mean 'collapse'\\?$"):
        result.render("text", colapse=True)
    with pytest.raises(TypeError, match="^nonsense: not a report option; expected one of profile_step, "):
        result.render("json", nonsense=1)
    with pytest.raises(ValueError, match="top: expected an int >= 0"):
        result.render("csv", top=-1)  # checked, though CSV does not read it
    with pytest.raises(TypeError, match="detailed: expected True or False"):
        ReportOptions(detailed=1)


def test_a_format_ignores_the_options_it_does_not_use(result):
    for fmt in FORMATS:
        if fmt not in ("text", "md", "html"):
            assert result.render(fmt, peak=1e12, profile_step=3, collapse=True) == result.render(fmt)
    assert result.render("md", module_depth=0, title="x") == result.render("md")
    assert result.render("text", top=3, title="x", indent=2) == result.render("text")


def test_indent_defaults_are_each_formats_own(result):
    assert result.render("json").startswith('{\n "schema_version"')
    assert "\n" not in result.render("trace").rstrip("\n")
    assert result.render("trace", indent=1).startswith('{\n "traceEvents"')


def test_the_report_model_holds_numbers_and_the_text_formats_it(result):
    options = ReportOptions(collapse=True, ops=2, peak=1e12)
    report = Report(result, options)
    entries = [e for e in report.tree.entries if isinstance(e, TreeEntry)]
    opened = [e for e in entries if e.opened]
    assert len([e for e in report.tree.entries if isinstance(e, TreeEnd)]) == len(opened)
    assert not any(isinstance(e, TreeAlias) for e in report.tree.entries)
    assert entries[0].key is None and entries[0].figures.macs == result.total.forward.macs
    assert report.efficiency.efficiency.peak_flops == 1e12 and report.operators.top == 2
    assert report.operators.entries[0].path == "" and report.tree.collapse
    assert format_text(report) == render_text(result, collapse=True, ops=2, peak=1e12)
    plain = Report(result)
    assert plain.efficiency is None and plain.operators is None and plain.transformer is None
    assert Report(result, ReportOptions(detailed=False)).tree is None


def test_sections_are_immutable(result):
    report = Report(result)
    with pytest.raises(AttributeError):
        report.summary.params = 0
    with pytest.raises(AttributeError):
        report.aggregated.forward[0].depth = 3


def test_write_to_a_stream_stdout_and_a_path_in_a_missing_folder(result, tmp_path, capsys):
    stream = io.StringIO()
    assert write(result, stream, module_depth=0) == stream.getvalue() == render_text(result, module_depth=0)
    assert write(result, None, "md") == capsys.readouterr().out == result.render("md")
    path = tmp_path / "a" / "b" / "r.trace.json"
    assert write(result, path) == path.read_text() == result.render("trace")
    write("as it is\n", tmp_path / "c" / "r.json")  # text is written as it is, whatever the extension
    assert (tmp_path / "c" / "r.json").read_text() == "as it is\n"
    with pytest.raises(IsADirectoryError, match="^target: .* is a directory"):
        write(result, tmp_path)
    with pytest.raises(TypeError, match="^subject: expected a ProfileResult"):
        write(3)


@pytest.mark.multiprocess
def test_the_data_model_reaches_the_renderers_by_name_with_nothing_installed(result, tmp_path):
    """``render`` and ``save`` are thin calls into the renderers, found by their module's name:
    importing flopsight loads no renderer and installs nothing."""
    import subprocess
    import sys

    from flopsight.renderers import output

    assert reporting.renderers() is output
    loaded = subprocess.run([sys.executable, "-c", "import sys, flopsight; "
                             "print(any(m.startswith('flopsight.renderers') for m in sys.modules))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "False"
    result.save(tmp_path / "new" / "r.md", top=1)
    assert (tmp_path / "new" / "r.md").read_text() == result.render("md", top=1)


def test_a_diff_and_a_gate_are_written_the_same_way(result, tmp_path):
    d = flopsight.diff(result, result)
    path = tmp_path / "d" / "diff.md"
    assert write(d, path) == path.read_text() == d.render("md")
    (gate,) = d.evaluate(["flops>+1%"])
    assert write(gate, io.StringIO()) == gate.message
