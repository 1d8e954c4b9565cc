"""Issue 29, item 13: an exception that leaves a ``Profiler`` span, raised by the code around
the model, fails the rank's profile: rank 0 names the rank failed, with the exception, and
draws no straggler verdict from its partial timings."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import flopsight
from flopsight.analysis.ranks import rank_figures


@pytest.fixture(scope="module")
def run(gloo_scenarios):
    """The folder tests/multirank/span_error_worker.py wrote into."""
    return gloo_scenarios / "span_error"


def test_a_rank_whose_span_raised_outside_the_model_is_named_failed(run):
    result = flopsight.load(run / "rank1_raised.json")
    failure = "ValueError raised in the profiled span, outside the model: bad batch"
    assert result.rank_notes == {1: f"failed: {failure}"}
    figures = rank_figures(result)
    assert figures.failed == {1: failure} and figures.healthy == 1
    assert figures.iteration is None and figures.straggler is None  # nothing to compare rank 0 with
    report = (run / "rank1_raised.txt").read_text()
    assert "rank 1 failed:" in report and failure in report
    assert "straggler" not in report


def test_rank_0_that_raised_does_not_wait_and_later_profiles_still_match(run):
    assert json.loads((run / "rank0.json").read_text()) == {
        "ranks": 0, "error": "ValueError raised in the profiled span, outside the model: bad batch"}
    after = flopsight.load(run / "after.json")
    # Linear(8, 16) + Linear(16, 4): 8*16 + 16*4 = 192 MACs per row, 2 rows on each rank
    assert [r.total.forward.macs for r in after.ranks] == [2 * 192, 2 * 192] and after.rank_notes == {}


def test_the_span_records_what_raised_and_leaves_the_model_as_found():
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    prof = flopsight.Profiler(model)
    with pytest.raises(KeyError):
        with prof:
            model(torch.ones(2, 4))
            raise KeyError("label")
    # 2 rows x 4 inputs x 3 outputs
    assert prof.result.total.forward.macs == 24 and not prof.running
    assert prof.result.metadata.error == "KeyError raised in the profiled span, outside the model: 'label'"
    assert "profile incomplete:" in prof.result.render()
    assert all(not (m._forward_pre_hooks or m._forward_hooks) for m in model.modules())


def test_an_error_raised_in_the_model_keeps_naming_its_module():
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(2, 1))
    prof = flopsight.Profiler(model)
    with pytest.raises(RuntimeError):
        with prof:
            model(torch.ones(2, 4))
    assert prof.result.metadata.error == "RuntimeError raised in module '1' (Linear)"


def test_a_long_message_is_cut_to_one_short_line():
    from flopsight.capture.assembly.gather import span_failure_text

    text = span_failure_text(RuntimeError("x" * 300 + "\nsecond line"))
    assert text.startswith("RuntimeError raised in the profiled span, outside the model: xxx") and "\n" not in text
    assert len(text) <= len("RuntimeError raised in the profiled span, outside the model: ") + 120
