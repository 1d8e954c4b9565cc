"""Collectives: kinds, payload bytes, bandwidths, attribution, on real gloo ranks."""

from __future__ import annotations

import pytest
import torch
from multirank.launch import rank_results

import flopsight
from flopsight.analysis.report_figures import communication_figures
from flopsight.capture.sources.collectives import collective_ops, payload_bytes
from flopsight.result.communication import Collective, bandwidths


# -- bandwidths: DeepSpeed's comms-logger definitions, derived by hand ----------------------
def test_all_reduce_bandwidths():
    # 1000 bytes in 1 ms on 4 ranks: algbw = 2 * 1000 / 1e-3 = 2e6; busbw = 1e6 * 2 * 3 / 4 = 1.5e6
    assert bandwidths("all_reduce", 1000, 1e-3, 4) == (2e6, 1.5e6)


def test_all_gather_and_reduce_scatter_bandwidths_count_every_rank_s_share():
    # 1000 bytes per rank, 4 ranks: 4000 bytes in 1 ms = 4e6; busbw = 4e6 * 3 / 4 = 3e6
    assert bandwidths("all_gather", 1000, 1e-3, 4) == (4e6, 3e6)
    assert bandwidths("reduce_scatter", 1000, 1e-3, 4) == (4e6, 3e6)


def test_all_to_all_and_point_to_point_bandwidths():
    assert bandwidths("all_to_all", 1000, 1e-3, 4) == (1e6, 0.75e6)  # busbw = 1e6 * 3 / 4
    for kind in ("broadcast", "send", "recv", "barrier"):
        assert bandwidths(kind, 1000, 1e-3, 4) == (1e6, 1e6)
    assert bandwidths("all_reduce", 1000, 0.0, 4) == (0.0, 0.0)  # no time measured: no rate


def test_report_figures_sum_each_kind_over_modules_and_phases():
    records = [
        Collective("all_reduce", "", "backward", 1, 600, 0.001, 2),
        Collective("all_reduce", "enc", "forward", 1, 200, 0.001, 2),
        Collective("barrier", "", "forward", 1, 0, 0.0005, 2),
    ]
    ar, barrier = communication_figures(records)
    # 800 bytes in 2 ms on 2 ranks: algbw = 2 * 800 / 2e-3 = 8e5, busbw = 4e5 * 2 * 1 / 2 = 4e5
    assert (ar.kind, ar.count, ar.bytes, ar.algbw, ar.busbw) == ("all_reduce", 2, 800, 8e5, 4e5)
    assert (barrier.count, barrier.bytes, barrier.busbw) == (1, 0, 0.0)


def test_payload_bytes_of_tensors_and_nested_lists():
    assert payload_bytes(torch.ones(100)) == 400
    assert payload_bytes([[torch.ones(3, dtype=torch.bfloat16)], torch.ones(2, dtype=torch.int64)]) == 6 + 16
    assert payload_bytes(None) == 0


def test_every_collective_op_is_free_and_has_a_kind():
    ops = collective_ops()
    assert {kind for kind, _, _ in ops.values()} >= {
        "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send", "recv", "barrier",
    }
    registry = flopsight.formulas.REGISTRY
    for op in ops:
        assert registry.resolve(op).formula is flopsight.formulas.registry.ZERO, op


def test_a_single_process_profile_has_no_collectives():
    model = torch.nn.Linear(4, 2)
    result = flopsight.profile(model, torch.ones(1, 4), warm_up=0)
    assert result.collectives() == [] and result.to_dict()["collectives"] == []
    with pytest.raises(ValueError, match="phase: expected one of"):
        result.collectives("bwd")


def test_collectives_survive_save_and_load(tmp_path):
    model = torch.nn.Linear(4, 2)
    result = flopsight.profile(model, torch.ones(1, 4), warm_up=0)
    record = Collective("all_gather", "layer", "forward", 3, 96, 0.25, 8)
    data = result.to_dict()
    data["collectives"] = [record.to_dict()]
    loaded = flopsight.ProfileResult.from_dict(data)
    assert loaded.collectives() == [record] and loaded.collectives("backward") == []


# -- two real gloo ranks ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def ranks(gloo_scenarios):
    """Both ranks' results of every scenario in tests/multirank/collectives_worker.py."""
    return rank_results(gloo_scenarios / "collectives")


def by_kind(result) -> dict[str, Collective]:
    return {c.kind: c for c in result.collectives()}


def test_every_kind_of_collective_with_its_payload_per_rank(ranks):
    for rank, result in enumerate(ranks("direct")):
        got = {kind: (c.count, c.bytes, c.group_size) for kind, c in by_kind(result).items()}
        p2p = {"send": (1, 24, 2)} if rank == 0 else {"recv": (1, 24, 2)}  # 6 fp32, rank 0 -> 1
        assert got == {
            "all_reduce": (2, 400 + 32, 2),  # 100 fp32 by torch.distributed, 8 by a functional collective
            "all_gather": (2, 12 + 12, 2),  # 3 fp32 this rank contributes, twice
            "reduce_scatter": (1, 8, 2),  # 2 fp32 this rank keeps of the 4 reduced
            "broadcast": (1, 20, 2),  # 5 fp32
            "all_to_all": (1, 16, 2),  # 4 fp32 this rank sends out
            "barrier": (1, 0, 2),
            **p2p,
        }
        for c in result.collectives():
            assert (c.module, c.phase) == ("", "forward")  # user code under Profiler(): the root
            assert c.latency > 0
        assert "ops not counted" not in flopsight.renderers.text_renderer.render_text(result)


def test_a_reduce_scatter_whose_work_has_no_future_lasts_until_its_wait_returns(ranks, gloo_scenarios):
    # gloo's reduce-scatter into one tensor returns at once; the rank waits in its wait() (for
    # the other, 0.2 s late, and the transfer). Rank 0 measured each call from before its
    # issue to the wait's return: the collective's time is that less only the Python before the
    # issue, so it holds nearly all of it (with no wait watched it was the issue alone, under 1%)
    result = ranks("late_reduce_scatter")[0]
    seconds = gloo_scenarios / "collectives" / "late_reduce_scatter.rank0.seconds"
    sync, asynchronous, restored = seconds.read_text().split()
    (c,) = result.collectives()
    assert (c.kind, c.count, c.bytes) == ("reduce_scatter", 2, 16)
    measured = float(sync) + float(asynchronous)
    assert 0.9 * measured <= c.latency <= measured
    # the rank waited for nearly all of it (the ops meanwhile: the wait's copy of its part)
    assert c.exposed >= 0.99 * c.latency
    assert restored == "True"  # the Work class's own wait is back


def test_a_profile_stopping_leaves_another_s_watch_on_a_wait(ranks, gloo_scenarios):
    # the inner profile stopped before the wait: the outer one still times the collective to
    # the wait's return (rank 0 measured from before its issue, rank 1 joined 0.2 s late)
    result = ranks("nested_reduce_scatter")[0]
    seconds = gloo_scenarios / "collectives" / "nested_reduce_scatter.rank0.seconds"
    measured, restored = seconds.read_text().split()
    (c,) = result.collectives()
    assert c.kind == "reduce_scatter" and 0.9 * float(measured) <= c.latency <= float(measured)
    assert restored == "True"


def test_ddp_all_reduces_every_gradient_once_in_the_backward_at_the_root(ranks):
    # Linear(16, 32) + Linear(32, 4): 16*32 + 32 + 32*4 + 4 = 676 fp32 gradients, 4 bytes each
    for result in ranks("ddp"):
        assert result.collectives() == result.collectives("backward")
        (bucket,) = result.collectives()
        assert (bucket.kind, bucket.module, bucket.count, bucket.bytes, bucket.group_size) == (
            "all_reduce", "", 1, 676 * 4, 2
        )
        assert bucket.latency > 0 and bucket.busbw > 0
        report = flopsight.renderers.text_renderer.render_text(result)
        assert "all_reduce (calls, bytes per rank, time, algbw, busbw): " in report
        assert "bwd MACs per GPU" in report  # after DeepSpeed's training lines


def test_ddp_reduces_one_bucket_per_layer_all_charged_to_the_roots_backward(ranks):
    # one bucket per Linear(512, 512): (512*512 + 512) fp32 gradients each. Which layers a
    # bucket holds cannot be read from DDP without copying every bucket: the root's
    for result in ranks("ddp_buckets"):
        (c,) = result.collectives("backward")
        assert (c.kind, c.module, c.count, c.bytes) == ("all_reduce", "", 3, 3 * (512 * 512 + 512) * 4)


def test_a_collective_in_a_module_s_forward_is_that_module_s(ranks):
    for result in ranks("module"):
        (c,) = result.collectives()
        assert (c.kind, c.module, c.phase, c.bytes) == ("all_reduce", "1", "forward", 2 * 4 * 4)


def test_compute_hides_an_asynchronous_collective_and_the_rank_waits_for_a_synchronous_one(ranks):
    # rank 0 computes in its asynchronous flight for sure; rank 1 joined last and may not have
    for rank, result in enumerate(ranks("overlap")):
        (c,) = result.collectives()
        assert c.count == 2 and c.exposed > 0 and (c.overlapped > 0 or rank == 1)
        assert abs(c.exposed + c.overlapped - c.latency) < 1e-9
        comm = result.iteration.communication
        assert comm.exposed > 0 and (comm.overlapped > 0 or rank == 1)
        a = result.iteration.anatomy
        assert a.communication <= comm.exposed + 1e-9 and abs(a.total - result.iteration.latency) < 1e-9


def test_ddp_step_anatomy_adds_up_to_the_iteration(ranks):
    for result in ranks("ddp"):
        it = result.iteration
        a = it.anatomy
        assert abs(a.total - it.latency) < 1e-9
        assert a.forward > 0 and a.backward > 0 and a.step > 0 and a.other >= 0
        report = flopsight.renderers.text_renderer.render_text(result)
        for label in ("step anatomy, fwd compute:", "step anatomy, communication waited for (exposed):"):
            assert label in report


def test_fsdp2_gathers_each_layer_in_its_forward_and_reduce_scatters_in_the_backward(ranks):
    for result in ranks("fsdp2"):
        # each rank contributes half of each layer: fc1 (16*32 + 32) * 4 B / 2, fc2 (32*4 + 4) * 4 B / 2;
        # gathered again for the backward (fc1's prefetched during fc2's): each charged to its layer
        for phase in ("forward", "backward"):
            gathers = {c.module: (c.count, c.bytes) for c in result.collectives(phase) if c.kind == "all_gather"}
            assert gathers == {"0": (1, 1088), "2": (1, 264)}, phase
        scatter = [c for c in result.collectives("backward") if c.kind == "reduce_scatter"]
        assert sum(c.bytes for c in scatter) == 1088 + 264  # each rank keeps half of every gradient
        # counted once at full size, whatever the sharding: 8 rows * (16*32 + 32*4) MACs
        assert (result.total.params, result.total.forward.macs) == (676, 8 * (16 * 32 + 32 * 4))
        assert result.unsupported_ops == {}  # FSDP2's own copy ops are free
        assert result.metadata.parallel == {"world": 2, "dp": 2}  # fully_shard's 1-D mesh: data parallel


# -- where the overlap comes from, without ranks ---------------------------------------------------
def test_in_flight_credits_each_collective_with_the_ops_run_during_it():
    from flopsight.capture.sources.collectives import InFlight, _Call, merged_flights

    flight = InFlight()
    a = _Call("all_reduce", "", "backward", 4, 2, issued=1.0, returned=1.1)
    b = _Call("all_gather", "", "backward", 4, 2, issued=2.0, returned=2.1)
    flight.add(a)
    flight.add(b)
    flight.ran([1.5], [2.5])  # overlaps a by 1.0 (1.5..2.5), b by 0.5 (2.0..2.5)
    a.done = 3.0
    flight.ran([2.8], [3.5])  # a ends at 3.0: 0.2 more for a; b still in flight: 0.7
    assert (round(a.overlapped, 9), round(b.overlapped, 9)) == (1.2, 1.2)
    assert [c.kind for c in flight.calls] == ["all_gather"]  # a is done before this op ended: dropped
    b.done = 4.0
    # flights 1..3 and 2..4 merge into 1..4 (3 s), of which the largest share, 1.2 s, was compute
    ((start, end, overlapped),) = merged_flights([a, b])
    assert (start, end, round(overlapped, 9)) == (1.0, 4.0, 1.2)


def test_a_completion_stamped_after_the_capture_is_collected_changes_none_of_its_figures():
    # a Work's completion is stamped by a Python callback on the backend's thread, which may run
    # late (it waits for the GIL): the records and the timeline, read from the collected capture
    # one after the other, must not see it appear between them
    from flopsight.capture.sources.collectives import CollectivesSource, _Call

    source = object.__new__(CollectivesSource)
    call = _Call("all_reduce", "", "backward", 4, 2, issued=1.0, returned=1.25)
    source.calls = [call]
    (collected,) = source.collect(None).calls
    call.complete()  # stamped now, long after its return
    # never seen complete while collected: its flight ends at its return, 1.25 - 1.0 s
    assert (collected.done, collected.seconds) == (None, 0.25)


def test_in_flight_credits_ops_heard_after_the_collective_completed():
    # the native backend charges ops in batches: a collective may be done before its ops are heard
    from flopsight.capture.sources.collectives import InFlight, _Call

    flight = InFlight()
    a = _Call("all_reduce", "", "backward", 4, 2, issued=1.0, returned=1.1)
    flight.add(a)
    a.done = 3.0
    flight.ran([1.5], [2.0])  # 0.5 inside the flight; a still ends after it: kept
    flight.ran([2.5], [3.5])  # 0.5 more (2.5..3.0); a done before this op ended: dropped
    flight.ran([3.6], [4.0])  # after it: nothing
    assert round(a.overlapped, 9) == 1.0 and flight.calls == []



def test_in_flight_credits_a_batch_of_ops_as_it_credits_them_one_by_one():
    # the native backend tells a batch of ops at once: the same overlap as op by op
    from flopsight.capture.sources.collectives import InFlight, _Call

    starts, ends = [0.0, 1.5, 2.5, 3.6, 5.0], [1.2, 2.0, 3.5, 4.0, 6.0]
    def calls():
        a = _Call("all_reduce", "", "backward", 4, 2, issued=1.0, returned=1.1)
        b = _Call("send", "", "backward", 4, 2, issued=1.8, returned=1.9)
        c = _Call("recv", "", "backward", 4, 2, issued=7.0, returned=7.1)  # after every op
        a.done = 3.0
        return a, b, c
    one_by_one, batch, shuffled = InFlight(), InFlight(), InFlight()
    heard = {}
    for flight in (one_by_one, batch, shuffled):
        heard[flight] = calls()
        for call in heard[flight]:
            flight.add(call)
    for t0, t1 in zip(starts, ends):
        one_by_one.ran([t0], [t1])
    batch.ran(starts, ends)
    # two threads' ops, not one after another: the same (op by op, in the order heard)
    shuffled.ran([starts[1], starts[0], *starts[2:]], [ends[1], ends[0], *ends[2:]])
    # a (1.0..3.0): 0.2 + 0.5 + 0.5 = 1.2; b (1.8..open): 0.2 + 1.0 + 0.4 + 1.0 = 2.6; c: none
    for flight in (one_by_one, batch, shuffled):
        assert [round(c.overlapped, 9) for c in heard[flight]] == [1.2, 2.6, 0.0]
        assert [c.kind for c in flight.calls] == ["send", "recv"]  # a done before the last op ended: dropped


def _with_op_time(data: dict, **seconds_by_phase: float) -> None:
    """Give the root module one compute op per phase taking the given seconds."""
    (root,) = [m for m in data["modules"] if m["name"] == ""]
    root["ops"] = {phase: {"aten.mm": {"macs": 0, "flops": 0, "latency": t, "calls": 1}}
                   for phase, t in seconds_by_phase.items()}


def test_anatomy_splits_the_exposed_time_over_the_phases():
    result = flopsight.profile(torch.nn.Linear(4, 2), torch.ones(1, 4), warm_up=0)
    data = result.to_dict()
    # a 10 s iteration: forward 2 s, backward 3 s, step 1 s; collectives in flight for 4 s
    # (merged), 1 s of it hidden behind compute: 3 s exposed, issued as 2 s (backward) and
    # 1 s (step) of exposed time; 4 s outside the phases, none of it waiting
    data["spans"] = {"iteration": [10.0], "forward": [2.0], "backward": [3.0], "step": [1.0],
                     "communication": [4.0], "communication_overlapped": [1.0]}
    data["collectives"] = [Collective("all_reduce", "", "backward", 1, 8, 3.0, 2, 2.0, 1.0).to_dict(),
                           Collective("all_gather", "", "step", 1, 8, 1.0, 2, 1.0, 0.0).to_dict()]
    # the ops computed 1.5 s of the forward, 0.5 s of the backward, nothing in the step
    _with_op_time(data, forward=1.5, backward=0.5)
    it = flopsight.ProfileResult.from_dict(data).iteration
    assert (it.communication.exposed, it.communication.overlapped) == (3.0, 1.0)
    # waited: fwd 0, bwd min(2, 3 - 0.5) = 2, step min(1, 1 - 0) = 1
    # compute: fwd 1.5, bwd min(0.5, 3 - 2) = 0.5, step 0
    # framework: fwd 2 - 1.5 = 0.5, bwd 3 - 2 - 0.5 = 0.5, step 1 - 1 - 0 = 0 -> 1
    # other: 10 - 6 outside the phases, none of the exposure left for it (3 - 3) -> 4
    a = it.anatomy
    assert (a.forward, a.backward, a.step, a.framework, a.communication, a.other) == (1.5, 0.5, 0.0, 1.0, 3.0, 4.0)
    assert a.total == 10.0


def test_anatomy_caps_what_a_phase_waited_at_its_wall_time_and_still_adds_up():
    result = flopsight.profile(torch.nn.Linear(4, 2), torch.ones(1, 4), warm_up=0)
    data = result.to_dict()
    # step 1 s, but its collectives were exposed 1.5 s (they ran on after it): the step waited
    # 1 s, computed 0; the flights' other 1 s of exposure falls outside the phases (2 s there)
    data["spans"] = {"iteration": [6.0], "forward": [1.0], "backward": [2.0], "step": [1.0],
                     "communication": [3.0], "communication_overlapped": [0.5]}
    data["collectives"] = [Collective("all_gather", "", "step", 2, 8, 2.0, 2, 1.5, 0.5).to_dict()]
    # ops: all of the forward, 1.5 s of the backward (its other 0.5 s hooks and Python)
    _with_op_time(data, forward=1.0, backward=1.5)
    a = flopsight.ProfileResult.from_dict(data).iteration.anatomy
    # exposed 3 - 0.5 = 2.5: 1 in the step, 1.5 outside (of the 6 - 4 = 2 s there)
    assert (a.forward, a.backward, a.step, a.framework, a.communication, a.other) == (1.0, 1.5, 0.0, 0.5, 2.5, 0.5)
    assert a.total == 6.0


def test_anatomy_counts_recompute_ops_as_backward_compute_and_leaves_collective_ops_out():
    result = flopsight.profile(torch.nn.Linear(4, 2), torch.ones(1, 4), warm_up=0)
    data = result.to_dict()
    data["spans"] = {"iteration": [4.0], "forward": [1.0], "backward": [2.0]}
    _with_op_time(data, forward=0.25, backward=0.5, recompute=0.75)
    (root,) = [m for m in data["modules"] if m["name"] == ""]
    # a collective's op (its wait) is communication, never compute
    root["ops"]["backward"]["c10d.allreduce_"] = {"macs": 0, "flops": 0, "latency": 0.5, "calls": 1}
    a = flopsight.ProfileResult.from_dict(data).iteration.anatomy
    # bwd compute 0.5 + 0.75 = 1.25 of its 2 s, framework 0.75 + (1 - 0.25) = 1.5, other 4 - 3 = 1
    assert (a.forward, a.backward, a.framework, a.other) == (0.25, 1.25, 1.5, 1.0)


def test_a_modules_op_time_leaves_its_collectives_and_hooks_out():
    from flopsight.analysis.report import module_rows

    model = torch.nn.Sequential(torch.nn.Linear(4, 2))
    data = flopsight.profile(model, torch.ones(1, 4), warm_up=0).to_dict()
    for m in data["modules"]:
        m["ops"] = {}
        if m["name"] == "0":  # the Linear: 0.25 s of compute and 0.5 s waiting in a collective
            m["ops"] = {"forward": {"aten.addmm": {"macs": 8, "flops": 18, "latency": 0.25, "calls": 1},
                                    "c10d.allreduce_": {"macs": 0, "flops": 0, "latency": 0.5, "calls": 1}}}
        if m["name"] == "":  # the root's own: a view, 0.125 s
            m["ops"] = {"forward": {"aten.view": {"macs": 0, "flops": 0, "latency": 0.125, "calls": 1}}}
    rows = {r.path: r for r in module_rows(flopsight.ProfileResult.from_dict(data)) if r.phase == "forward"}
    # the Linear: 0.25 (its collective is communication); the root: its own 0.125 + the Linear's 0.25
    assert (rows["0"].op_latency, rows[""].op_latency) == (0.25, 0.375)
