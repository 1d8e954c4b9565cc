"""`flopsight diff` says what each side ran, warns on every difference, refuses module-level
comparison of two different model classes (unless forced) and says "no difference" when there
is none (issue 29, item 9).

Real profiles of small models, timed by a FakeClock (one ms per stamp) where a decision rests on
times, so nothing here asserts on wall-clock time.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from helpers import with_metadata
from torch import nn

import flopsight
from flopsight.__main__ import main
from flopsight.result.metadata import Metadata


class Net(nn.Module):
    """encoder (Linear 8->16, ReLU) -> head (Linear 16->4)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.encoder(x))


class Other(nn.Module):
    """Another model with Net's module paths and parameters: encoder (Linear 8->16, Tanh,
    Identity) -> head (Linear 16->4); one module more, so it takes longer on a FakeClock."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Identity())
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.encoder(x))


def another_net() -> nn.Module:
    """A model class also named ``Net``, defined elsewhere (another script's ``Net``)."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(8, 4)

        def forward(self, x):
            return self.head(x)

    return Net()


def run(model: nn.Module, batch: int = 2, **options) -> flopsight.ProfileResult:
    with torch.no_grad():
        return flopsight.profile(model, torch.ones(batch, 8), clock=flopsight.FakeClock(), **options)


@pytest.fixture(scope="module")
def b2():
    return run(Net())


# -- the header and its warnings -------------------------------------------------------------------------
def test_batch_2_against_batch_4_warns_that_the_inputs_differ(b2):
    d = flopsight.diff(b2, run(Net(), batch=4))
    # MACs of the batch: 2 x (8*16 + 16*4) = 384, 4 x 192 = 768: +100%, which the inputs explain
    assert (d.total["macs"].a, d.total["macs"].b) == (384, 768)
    assert d.differing == ["inputs"]
    assert ("inputs", "float32[2, 8]", "float32[4, 8]") in d.header()
    assert d.warnings == ["the inputs differ (a float32[2, 8], b float32[4, 8]): the profiles measured different "
                          "work, so counts and times change with the inputs, not only the model"]
    text = d.render()
    assert "warning: the inputs differ (a float32[2, 8], b float32[4, 8])" in text
    fields = ["model", "inputs", "dtype", "device", "backend", "torch", "flopsight"]
    header = text.splitlines()[2:2 + 2 + len(fields)]  # title, dashes, one row per field
    assert header[0].split() == ["run", "a", "b"]
    assert [line.split()[0] for line in header[2:]] == fields
    assert header[3].split() == ["inputs", "float32[2,", "8]", "float32[4,", "8]", "differs"]
    data = json.loads(d.render("json"))
    assert {"field": "inputs", "a": "float32[2, 8]", "b": "float32[4, 8]", "differs": True} in data["header"]
    assert data["warnings"] == d.warnings


@pytest.mark.parametrize("field, changes", [
    ("dtype", {"dtype": "bfloat16"}),
    ("device", {"device": "cuda:0", "device_type": "cuda", "device_name": "NVIDIA H100 80GB HBM3"}),
    ("backend", {"backend": "native"}),  # a FakeClock times ops in Python: b2 counted on "python"
    ("torch", {"torch_version": "2.99.0"}),
    ("flopsight", {"flopsight_version": "9.9"}),
])
def test_every_difference_of_the_runs_is_a_warning(b2, field, changes):
    """What another run would have recorded: each field of the header, changed alone, is warned on."""
    d = flopsight.diff(b2, with_metadata(b2, **changes))
    assert d.differing == [field]
    (warning,) = d.warnings
    assert warning.startswith(f"the {field} differ (a ")
    assert f"warning: {warning}" in d.render() and f"**warning**: {warning}" in d.render("md")


def test_a_file_without_the_fields_loads_and_says_what_it_does_not_record(tmp_path, b2):
    """A profile saved by an older flopsight: no model class, backend or inputs in its metadata."""
    data = json.loads(b2.render("json"))
    for key in ("model_class", "backend", "inputs"):
        data["metadata"].pop(key)
    (tmp_path / "old.json").write_text(json.dumps(data))
    old = flopsight.diff(str(tmp_path / "old.json"), b2)
    assert old.a.model_class == "" and old.modules_compared  # the same class name: modules compared
    assert old.notes == ["a does not record its inputs, backend (an older file?): those could not be compared"]
    assert old.warnings == []
    assert "inputs     ? (not recorded)  float32[2, 8]" in old.render()


def test_the_metadata_records_the_model_class_and_it_round_trips(tmp_path, b2):
    assert b2.metadata.model == "Net" and b2.metadata.model_class == f"{__name__}.Net"
    b2.save(tmp_path / "r.json")
    assert flopsight.ProfileResult.from_dict(json.loads((tmp_path / "r.json").read_text())).metadata == b2.metadata
    assert Metadata.from_dict({"model": "Net"}).model_class == ""  # an old file


# -- two different model classes ---------------------------------------------------------------------------
def test_two_model_classes_give_totals_and_say_why_not_modules(b2):
    d = flopsight.diff(b2, run(Other()))
    assert not d.modules_compared and d.modules == {} and d.changed == []
    assert d.differing == ["model"] and d.header()[0] == ("model", "Net", "Other")
    # the totals are still compared: ReLU counts 2*16 = 32 FLOPs, tanh (one FLOP per element too) the same
    assert d.total["params"].delta == 0
    text = d.render()
    assert "warning: the model classes differ (a Net, b Other): modules are not compared" in text
    assert ("Modules: not compared: the model classes differ (a Net, b Other), and a module path in one model is "
            "not the same module in the other, so no module-level change or cause is given") in text
    assert "Model totals" in text and "~ encoder" not in text
    with pytest.raises(ValueError, match="gate 'flops@head>0': modules are not compared: the model classes differ"):
        d.evaluate(["flops@head>0"])
    with pytest.raises(ValueError, match="pass force=True"):
        d.module("head")
    assert [g.passed for g in d.evaluate(["params>0"])] == [True]  # gates on the totals still work
    data = json.loads(d.render("json"))
    assert data["module_level"]["compared"] is False and data["module_level"]["text"].startswith("not compared")
    assert data["modules"] == []


def test_force_compares_the_modules_of_two_classes_and_says_so(b2):
    d = flopsight.diff(b2, run(Other()), force=True)
    assert d.modules_compared and d.forced
    assert d.module("encoder.1").type_a == "ReLU" and d.module("encoder.1").type_b == "Tanh"
    assert d.warnings == ["the model classes differ (a Net, b Other): modules compared by path anyway (force), "
                          "though a path need not be the same module in both"]
    with pytest.raises(TypeError, match="force: expected True or False, got str"):
        flopsight.diff(b2, b2, force="yes")


def test_two_classes_of_one_name_are_two_models(b2):
    d = flopsight.diff(b2, run(another_net()))
    assert not d.modules_compared
    assert d.header()[0] == ("model", f"{__name__}.Net", f"{__name__}.another_net.<locals>.Net")


def test_the_verdict_names_no_module_of_two_different_models():
    """Five passes a side (a FakeClock: every pass of one model takes the same time): the pass
    time moved beyond its noise, and without force no module is named as its cause."""
    a, b = run(Net(), repeat=5), run(Other(), repeat=5)
    refused, forced = flopsight.diff(a, b), flopsight.diff(a, b, force=True)
    assert refused.verdict is not None and refused.verdict.step.significant
    assert all(not c.modules for c in refused.verdict.causes)
    assert any(c.modules for c in forced.verdict.causes)  # what it would have said: module names
    verdict_line = next(line for line in refused.render().splitlines() if line.startswith("Verdict"))
    assert "encoder" not in verdict_line and "head" not in verdict_line


# -- no difference -------------------------------------------------------------------------------------------
def test_identical_profiles_say_no_difference(b2):
    d = flopsight.diff(b2, b2)
    assert d.sameness().none and d.sameness().times == "identical"
    text = d.render()
    assert "No difference: the counts and times are identical." in text
    assert not d.warnings and "warning" not in text


def test_identical_repeated_profiles_say_no_difference_not_zero_seconds_slower():
    r = run(Net(), repeat=5)
    text = flopsight.diff(r, r).render()
    assert "No difference: the counts and times are identical." in text
    assert "0 s slower" not in text and "Verdict" not in text


def test_times_within_the_noise_are_no_difference(b2):
    # forward calls (ms) 10, 12, 11, 13 vs 11, 13, 10, 12: medians 11.5 both, the ranks interleave
    a = dataclasses.replace(b2, spans={"forward": [0.010, 0.012, 0.011, 0.013]})
    b = dataclasses.replace(b2, spans={"forward": [0.011, 0.013, 0.010, 0.012]})
    d = flopsight.diff(a, b)
    assert d.sameness().times == "noise" and d.sameness().none
    assert "No difference in counts; times within the noise (fwd latency 0 (0%), p=1, 4 vs 4 calls)." in d.render()
    assert json.loads(d.render("json"))["sameness"]["no_difference"] is True


def test_times_of_one_call_each_cannot_be_no_difference(b2):
    b = dataclasses.replace(b2, spans={"forward": [b2.spans["forward"][0] * 2]})
    d = flopsight.diff(b2, b)
    assert d.sameness().times == "untested" and not d.sameness().none
    assert "but 1 vs 1 calls cannot tell a change from noise" in d.render()


def test_times_beyond_the_noise_are_a_difference(b2):
    # 4 calls of 10-13 ms against 4 of 20-23 ms: every b above every a, no ties, so the exact
    # two-sided p = 2 x (1 ordering of C(8, 4) = 70) = 2/70 < 0.05
    a = dataclasses.replace(b2, spans={"forward": [0.010, 0.011, 0.012, 0.013]})
    b = dataclasses.replace(b2, spans={"forward": [0.020, 0.021, 0.022, 0.023]})
    same = flopsight.diff(a, b).sameness()
    assert same.times == "changed" and same.p_value == pytest.approx(2 / 70) and not same.none
    assert "The counts are identical; times changed beyond the noise" in flopsight.diff(a, b).render()


def test_a_count_that_differs_is_no_headline(b2):
    d = flopsight.diff(b2, run(Net(), batch=4))
    assert not d.sameness().counts and "No difference" not in d.render()


# -- the latencies are the result's --------------------------------------------------------------------------
def test_the_diffs_latency_is_the_results_latency():
    """Five timed passes (a real clock: the samples differ; only figures of one result are
    compared, never a time against a number): the diff's forward latency is the result's."""
    with torch.no_grad():
        r = flopsight.profile(Net(), torch.ones(2, 8), repeat=5)
    d = flopsight.diff(r, r)
    calls = len(r.spans["forward"])
    assert d.total["fwd_latency"].a == pytest.approx(r.phase_total("forward").latency / calls, rel=1e-12)
    assert d.module("head")["fwd_latency"].a == pytest.approx(r.module("head").forward.latency / calls, rel=1e-12)


# -- the command line ------------------------------------------------------------------------------------------
def test_the_cli_warns_refuses_and_forces(tmp_path, capsys, b2):
    b2.save(tmp_path / "a.json")
    run(Net(), batch=4).save(tmp_path / "b4.json")
    run(Other()).save(tmp_path / "other.json")
    b2.save(tmp_path / "copy.json")

    assert main(["diff", str(tmp_path / "a.json"), str(tmp_path / "b4.json")]) == 0
    assert "warning: the inputs differ (a float32[2, 8], b float32[4, 8])" in capsys.readouterr().out

    assert main(["diff", str(tmp_path / "a.json"), str(tmp_path / "copy.json")]) == 0
    assert "No difference: the counts and times are identical." in capsys.readouterr().out

    assert main(["diff", str(tmp_path / "a.json"), str(tmp_path / "other.json"), "--fail-on", "flops@head>0"]) == 2
    assert "pass force=True (flopsight diff --force)" in capsys.readouterr().err
    assert main(["diff", str(tmp_path / "a.json"), str(tmp_path / "other.json"), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["module_level"]["compared"] is False
    assert main(["diff", str(tmp_path / "a.json"), str(tmp_path / "other.json"), "--force",
                 "--fail-on", "flops@head>0"]) == 0
    assert "~ encoder.1  ReLU -> Tanh" in capsys.readouterr().out


def test_the_diffs_repr_is_one_short_line(b2):
    # as ProfileResult's: typing a diff in a notebook must not print every module's rows.
    # Net at batch 2 -> 4: FLOPs double (+100.00%); encoder, encoder.0 (Linear), encoder.1 (ReLU: one
    # FLOP per element, twice the elements) and head all change: 4 of the 4 paths below the root
    d = flopsight.diff(b2, run(Net(), batch=4))
    assert repr(d) == "<ProfileDiff Net -> Net: FLOPs +100.00%, 4 of 4 modules changed, 1 warning>"
    assert "modules not compared, 1 warning>" in repr(flopsight.diff(b2, run(another_net())))
