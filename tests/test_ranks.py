"""Many ranks, one result: every rank's profile gathered on rank 0; a missing, failed or
non-profiling rank named and left out of the figures over ranks."""

from __future__ import annotations

import json

import pytest
import torch

import flopsight
from flopsight.analysis.ranks import rank_figures, spread
from flopsight.capture.assembly.gather import check_gather_timeout, gather_ranks


@pytest.fixture(scope="module")
def run(gloo_scenarios):
    """The folder tests/multirank/gather_worker.py wrote into."""
    return gloo_scenarios / "gather"


def test_rank_0_holds_every_ranks_result_the_others_none(run):
    held = json.loads((run / "ranks0.json").read_text())
    assert (held["both"], held["one_missing"], held["failed_in_span"], held["profile_failed"]) == (2, 2, 2, 2)
    assert json.loads((run / "ranks1.json").read_text()) == {"both": 0, "sleeper": 0, "failed_in_span": 0}
    result = flopsight.load(run / "both.json")
    # Linear(8, 16) + Linear(16, 4): 8*16 + 16*4 = 192 MACs per row; rank r ran 2 + r rows
    assert [r.total.forward.macs for r in result.ranks] == [2 * 192, 3 * 192]
    assert [r.metadata.rank for r in result.ranks] == [0, 1] and result.missing_ranks == []
    assert result.rank_notes == {}
    figures = rank_figures(result)
    assert figures.world == 2 and figures.healthy == 2 and figures.iteration is not None
    assert {(m.path, m.phase) for m in figures.modules} >= {("", "forward"), ("0", "forward"), ("2", "forward")}
    assert "straggler (by busy time: all but waiting for other ranks):" in (run / "both.txt").read_text()


def test_the_straggler_is_the_rank_the_others_waited_for(run):
    # issue 37 item 4: rank 1 slept 1 s in its step; rank 0 waited for it in the backward's
    # all-reduce, so both steps end together and their step times cannot tell: busy times can
    # (a second: longer than the machine's load ever holds rank 0 back, which would make it
    # busy that long instead of waiting)
    result = flopsight.load(run / "sleeper.json")
    figures = rank_figures(result)
    s = figures.straggler
    # it slept 1 s: busy about that at least (its step less what it waited for, and a completion
    # stamped by a callback that waits for the GIL can read a few milliseconds late under load)
    assert s is not None and s.rank == 1 and s.busy >= 0.99
    busy = {b.rank: b for b in figures.busy}
    assert busy[0].waited >= 1.0 - busy[1].waited - busy[0].busy  # rank 0 waited out the rest of the sleep
    assert s.excess == busy[1].busy - busy[0].busy and s.share == 100 * s.excess / busy[1].step
    report = (run / "sleeper.txt").read_text()
    assert "straggler (by busy time: all but waiting for other ranks):" in report and " rank 1, busy " in report
    assert "rank 0, step / busy / waited for communication:" in report
    # the JSON holds them too, derived from the ranks' results (a reader need not recompute them)
    data = json.loads((run / "sleeper.json").read_text())
    assert data["rank_figures"]["straggler"]["rank"] == 1 and len(data["rank_figures"]["busy"]) == 2


def test_a_rank_that_started_but_sent_nothing_is_named_not_waited_for(run):
    result = flopsight.load(run / "one_missing.json")
    assert result.ranks[0] is not None and result.ranks[1] is None and result.missing_ranks == [1]
    report = (run / "one_missing.txt").read_text()
    assert "ranks reporting:" in report and "1 of 2" in report
    assert "ranks missing (no result within gather_timeout):" in report
    # while waiting, rank 0 said for whom (the worker lowers the 5 s before the warning to 0)
    assert "rank 0 is waiting for the results of rank(s) 1" in json.loads((run / "ranks0.json").read_text())["warned"]


def test_a_rank_that_raised_in_its_span_is_failed_and_left_out_of_the_figures(run):
    result = flopsight.load(run / "failed_in_span.json")
    # rank 1 fed 5 features to Linear(8, 16), the layer at path "0"
    assert result.rank_notes == {1: "failed: RuntimeError raised in module '0' (Linear)"}
    assert result.missing_ranks == []
    figures = rank_figures(result)
    assert figures.failed == {1: "RuntimeError raised in module '0' (Linear)"} and figures.healthy == 1
    # one healthy rank: nothing to compare it with
    assert figures.iteration is None and figures.modules == [] and figures.straggler is None
    report = (run / "failed_in_span.txt").read_text()
    assert "rank 1 failed:" in report and "RuntimeError raised in module '0' (Linear)" in report
    assert "straggler" not in report and "Per-rank Profile" not in report and "1 of 2" in report


def test_a_rank_whose_profile_raised_tells_rank_0_at_once(run):
    result = flopsight.load(run / "profile_failed.json")
    # rank 1's last layer, Linear(15, 4) at path "2", got 16 features
    assert result.ranks[1] is None and result.missing_ranks == []
    assert result.rank_notes == {1: "failed: RuntimeError raised in module '2' (Linear)"}
    # rank 0 did not wait out the default gather_timeout (60 s) for it
    assert json.loads((run / "ranks0.json").read_text())["profile_failed_s"] < 30


def test_a_rank_that_never_profiles_is_named_and_not_waited_for(run):
    result = flopsight.load(run / "rank0_only.json")
    assert result.rank_notes == {1: "not profiling"} and result.missing_ranks == []
    assert rank_figures(result).not_profiling == [1]
    report = (run / "rank0_only.txt").read_text()
    assert "ranks not profiling (never started a profile):" in report and "straggler" not in report
    # the default gather_timeout is 60 s; rank 1 profiled in step until this profile, so it is
    # waited for PEER_WAIT (2 s) and no more (benchmarks/rank0_only.py measures a rank 0 alone)
    assert json.loads((run / "ranks0.json").read_text())["rank0_only_s"] < 30


def test_spread_and_straggler_over_ranks():
    # ranks 0, 1, 3 and 4 took 1, 2, 3 and 6 s (rank 2 sent nothing): mean 3, the slowest rank 4
    s = spread([1.0, 2.0, None, 3.0, 6.0])
    assert s == (1.0, 3.0, 6.0, 4)
    assert spread([None, None]) is None


def test_outside_torch_distributed_there_is_nothing_to_gather():
    result = flopsight.profile(torch.nn.Linear(2, 2), torch.ones(1, 2), warm_up=0)
    assert gather_ranks(result) == ([], {}) and result.ranks == () and rank_figures(result) is None
    assert "ranks reporting" not in flopsight.renderers.text_renderer.render_text(result)


@pytest.mark.parametrize("timeout", [0, -1, "60", True])
def test_gather_timeout_must_be_a_positive_number(timeout):
    with pytest.raises(ValueError, match="gather_timeout: expected a positive number of seconds"):
        check_gather_timeout(timeout)
    with pytest.raises(ValueError, match="gather_timeout"):
        flopsight.Profiler(torch.nn.Linear(2, 2), gather_timeout=timeout)


def test_parallel_sizes_are_given_or_detected():
    from flopsight.capture.model.parallel import check_parallel, detect_parallel

    assert detect_parallel(torch.nn.Linear(2, 2)) is None  # one process, nothing to say
    assert detect_parallel(torch.nn.Linear(2, 2), given={"tp": 4, "pp": 2}) == {"world": 1, "tp": 4, "pp": 2}
    with flopsight.Profiler(torch.nn.Linear(2, 2), parallel={"tp": 2, "zero_stage": 0}) as prof:
        prof.model(torch.ones(1, 2))
    assert prof.result.metadata.parallel == {"world": 1, "tp": 2, "zero_stage": 0}
    with pytest.raises(ValueError, match="parallel: unknown key 'mp'"):
        check_parallel({"mp": 2})
    with pytest.raises(ValueError, match=r"parallel\['dp'\]: expected a positive int, got 0"):
        check_parallel({"dp": 0})
    with pytest.raises(TypeError, match="parallel: expected a dict"):
        flopsight.Profiler(torch.nn.Linear(2, 2), parallel=[2])
