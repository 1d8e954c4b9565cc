"""Rank failures injected at every phase of a profiled step (forward, backward, optimizer step,
the end of the span before gathering, and a rank whose process ends inside its span), on 2 gloo
ranks (tests/multirank/failures_worker.py): no rank waits past ``gather_timeout`` (plus a margin
for a loaded machine: a bound against a hang, not a measure of speed), and the failed rank is
always named: on rank 0 in ``rank_notes`` or ``missing_ranks``, on the rank itself in its
result's ``metadata.error``.

The space is small, so every case runs (no drawing): one launch of about 15 s, 5 of them rank 0
waiting out the ``gather_timeout`` for the rank that ended.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from background import early_fixture

pytestmark = pytest.mark.multiprocess

GATHER_TIMEOUT = 5.0
#: what a loaded 2-core machine may add to a wait (a bound against hanging, never a speed check)
MARGIN = 30.0
PHASES = ("forward", "backward", "step", "gather")
#: where each phase's failure is raised, as the failing rank's result says it
WHERE = {"forward": "raised in module '1' (Faulty)", "backward": "injected in backward",
         "step": "injected in step", "gather": "injected at gather"}


@early_fixture
def failure_ranks(tmp_path_factory) -> list[dict]:
    """What each rank of the launch recorded, per case (``"<phase>/rank<failing>"``)."""
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available")
    from multirank.launch import torchrun

    out = tmp_path_factory.mktemp("failures")
    torchrun(Path(__file__).parent / "multirank" / "failures_worker.py", str(out), str(GATHER_TIMEOUT), timeout=300)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


@pytest.mark.parametrize("phase", PHASES)
def test_rank_1_failing_is_named_on_rank_0_without_a_wait(failure_ranks, phase):
    failed, gatherer = failure_ranks[1][f"{phase}/rank1"], failure_ranks[0][f"{phase}/rank1"]
    assert failed["error"] is not None and WHERE[phase] in failed["metadata_error"]
    assert failed["seconds"] < GATHER_TIMEOUT + MARGIN
    assert gatherer["error"] is None and gatherer["ranks"] == 2 and gatherer["missing"] == []
    assert gatherer["notes"].keys() == {"1"}
    assert gatherer["notes"]["1"].startswith("failed: ") and WHERE[phase] in gatherer["notes"]["1"]
    assert gatherer["seconds"] < GATHER_TIMEOUT + MARGIN


@pytest.mark.parametrize("phase", PHASES)
def test_rank_0_failing_names_itself_and_rank_1_goes_on(failure_ranks, phase):
    failed, other = failure_ranks[0][f"{phase}/rank0"], failure_ranks[1][f"{phase}/rank0"]
    # rank 0's own exception goes on at once: it gathers nothing, and its result says why
    assert failed["error"] is not None and WHERE[phase] in failed["metadata_error"] and failed["ranks"] == 0
    assert failed["seconds"] < GATHER_TIMEOUT + MARGIN
    assert other["error"] is None and other["metadata_error"] is None
    assert other["seconds"] < GATHER_TIMEOUT + MARGIN


def test_a_rank_that_ends_inside_its_span_is_missing_after_gather_timeout(failure_ranks):
    gatherer = failure_ranks[0]["exit/rank1"]
    assert "exit/rank1" not in failure_ranks[1]  # its process ended inside the span
    assert gatherer["ranks"] == 2 and gatherer["missing"] == [1] and gatherer["notes"] == {}
    assert GATHER_TIMEOUT <= gatherer["seconds"] < GATHER_TIMEOUT + MARGIN
