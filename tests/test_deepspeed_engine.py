"""The DeepSpeed engine profiling with flopsight (flopsight.deepspeed.install()), for real:
ZeRO stages 0 to 3, bf16 with gradient accumulation and activation checkpointing, on two
CPU ranks started by DeepSpeed's launcher (tests/multirank/deepspeed_worker.py)."""

from __future__ import annotations

import json
import re

import pytest

import flopsight
import flopsight.renderers.numbers

deepspeed = pytest.importorskip("deepspeed")


# The worker's MLP, Linear(16, 32) -> ReLU -> Linear(32, 4), on 4 rows per micro-batch:
PARAMS = 16 * 32 + 32 + 32 * 4 + 4  # 676, each tensor at its full size under ZeRO-3 too
FWD_MACS = 4 * (16 * 32 + 32 * 4)  # 2560, once (DeepSpeed's own profiler doubles it under ZeRO-3)
# backward: fc2's grad_input and grad_weight (4*4*32 each), fc1's grad_weight only (its
# input needs no gradient): 4*16*32
BWD_MACS = 2 * 4 * 4 * 32 + 4 * 16 * 32  # 3072


@pytest.fixture(scope="module")
def run(deepspeed_scenarios):
    """The folder tests/multirank/deepspeed_worker.py wrote into."""
    return deepspeed_scenarios / "engine"


def result(run, name):
    return flopsight.load(run / f"{name}.json")


def value(text, label):
    m = re.search(rf"^{re.escape(label)}:\s+(\S.*?)\s*$", text, re.M)
    assert m, f"no line {label!r}"
    return m.group(1)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_every_zero_stage_counts_the_model_once_at_full_size(run, stage):
    r = result(run, f"zero{stage}")
    assert (r.total.params, r.total.forward.macs, r.iteration.backward.macs) == (PARAMS, FWD_MACS, BWD_MACS)
    assert r.iteration.micro_batches == 1 and r.root_calls[0].batch_size == 4
    par = r.metadata.parallel  # read off the engine
    assert (par["world"], par["dp"], par["tp"], par["zero_stage"]) == (2, 2, 1, stage)
    # rank 1 measured the same step, and rank 0 gathered it
    assert len(r.ranks) == 2 and r.ranks[1].total.forward.macs == FWD_MACS and r.ranks[1].metadata.rank == 1
    report = (run / f"zero{stage}" / "report.txt").read_text()  # a folder the config named, created
    # DeepSpeed's title and numbering: profile_step 2 prints after the engine counted it
    assert "Profile Summary at step 3:" in report
    assert value(report, "params per GPU") == "676" and value(report, "fwd MACs per GPU") == "2.56 KMACs"
    assert value(report, "world size") == "2" and value(report, "data parallel size") == "2"
    assert value(report, "measured bwd MACs per GPU") == "3.07 KMACs"


def test_gradients_are_reduced_in_the_backward_and_the_step_is_the_whole_engine_step(run):
    # ZeRO 0-2 all-reduce every fp32 gradient once (676 * 4 bytes); ZeRO-3 reduce-scatters
    # them, each rank keeping half (1352 bytes); both are the root's backward
    for stage, kind, nbytes in [(0, "all_reduce", 2704), (1, "all_reduce", 2704), (2, "all_reduce", 2704),
                                (3, "reduce_scatter", 1352)]:
        r = result(run, f"zero{stage}")
        (reduce,) = [c for c in r.collectives("backward")]
        assert (reduce.kind, reduce.module, reduce.count, reduce.bytes, reduce.group_size) == (kind, "", 1, nbytes, 2)
        # engine.step() as a whole: ZeRO's own collectives (the overflow check, ZeRO 1-3
        # gathering the updated partitions) are inside the step's span
        assert r.step.latency > 0 and r.collectives("step")
    # ZeRO 1 and 2 gather the updated fp32 partitions: each rank gives its half, 338 * 4 bytes
    assert [(c.kind, c.bytes) for c in result(run, "zero2").collectives("step") if c.kind == "all_gather"] == [
        ("all_gather", 1352)]


def test_bf16_with_two_micro_batches_measures_the_whole_step(run):
    r = result(run, "zero2_bf16_accumulate2")
    it = r.iteration
    assert it.micro_batches == 2 and r.total.forward.macs == 2 * FWD_MACS and it.backward.macs == 2 * BWD_MACS
    (reduce,) = r.collectives("backward")
    assert (reduce.kind, reduce.count, reduce.bytes) == ("all_reduce", 2, 2 * 676 * 2)  # bf16 gradients, twice
    report = (run / "zero2_bf16_accumulate2" / "report.txt").read_text()
    assert value(report, "micro-batches per step (DeepSpeed's lines show one of them)") == "2"
    # DeepSpeed's line keeps its meaning, one micro-batch's forward; the step's is flopsight's own
    assert value(report, "fwd MACs per GPU") == "2.56 KMACs"  # FWD_MACS
    assert value(report, "measured fwd MACs per GPU, all micro-batches") == "5.12 KMACs"
    assert report.count("Profile Summary") == 1  # printed once, at the end of the profiled step
    # engine.step() ran twice, but only the one at the accumulation boundary updated the model
    assert it.step.calls == 1 and "optimizer steps" not in report


def test_deepspeeds_activation_checkpointing_is_measured_as_recompute(run):
    r = result(run, "checkpointed")
    # fc2 runs again in the backward pass: 4 * 32 * 4 MACs
    assert r.iteration.recompute.macs == 4 * 32 * 4
    assert r.iteration.backward.macs == BWD_MACS


def test_install_with_memory_reports_each_ranks_zero3_shards(run):
    r = result(run, "zero3_memory")
    # each of the 2 ranks holds half of the 676 fp32 parameters (1352 bytes), and Adam's two
    # moments of its half (2 * 1352) plus its step, a 0-d fp32 tensor (4 bytes), for the one
    # flat partition ZeRO-3 hands the torch optimizer: 2 * 1352 + 4 = 2708
    for rank in r.ranks:
        m = rank.memory
        assert m.params == 676 * 4 // 2 and m.optimizer_state == 2 * 1352 + 4
        assert m.activations > 0 and m.peak > 0
    assert "memory, params per GPU:" in (run / "zero3_memory" / "report.txt").read_text()


def test_the_blocks_steps_key_profiles_several_steps_each_on_its_own(run):
    r = result(run, "zero3_steps3")
    # steps 2, 3 and 4 on every rank: one step's counts, every step's times
    assert r.samples.count == 3 and r.samples.unit == "step"
    assert (r.total.params, r.total.forward.macs, r.total.backward.macs) == (PARAMS, FWD_MACS, BWD_MACS)
    assert r.iteration.step.calls == 1 and r.memory is None  # "memory": false in the block
    assert [x.samples.count for x in r.ranks] == [3, 3]
    report = (run / "zero3_steps3" / "report.txt").read_text()
    assert "Profile Summary at step 5:" in report  # printed after the last, as the engine counts
    # its loop calls engine.backward(loss_fn(engine(x))): the method is looked up before the
    # forward that begins the timed step, which still times the backward
    assert len(r.spans["timed.backward"]) == 1 and r.spans["timed.backward"][0] > 0
    assert "bwd latency:                                                            0 s" not in report
    # one step, one time (issue 37 item 3): the anatomy is the median step's, whose wall time the
    # step time over the steps gives; the latencies and the measured wall time say they are
    # the step before's
    median = flopsight.renderers.numbers.duration_to_string(r.samples.median("wall"))
    assert r.iteration.anatomy.total == pytest.approx(r.samples.median("wall")) == r.iteration.counted_latency
    assert value(report, "step anatomy, of the median step's wall time (3 steps)").startswith(median + " ")
    assert value(report, "step time over 3 steps (median, min-max)").startswith(median + " ")
    assert "step anatomy, of the profiled step's wall time" not in report
    assert value(report, "measured iter wall time (the step before, timed apart)") == \
        flopsight.renderers.numbers.duration_to_string(r.iteration.latency)
    assert "step time over 3 steps (median, min-max):" in report


def test_memory_is_counted_by_default_in_the_engine(run):
    assert result(run, "zero2").memory is not None
    assert "memory, peak allocated while profiling per GPU:" in (run / "zero2" / "report.txt").read_text()


@pytest.mark.parametrize("name", ["attach_engine", "attach_zero_optimizer"])
def test_attach_takes_the_engine_or_its_zero_optimizer(run, name):
    r = result(run, name)
    assert (r.total.forward.macs, r.iteration.backward.macs) == (FWD_MACS, BWD_MACS)
    # the whole engine.step() (or the ZeRO optimizer's step()) is the step, its backward()
    # the backward: the gradient all-reduce is the root's backward
    (reduce,) = r.collectives("backward")
    assert (reduce.kind, reduce.bytes) == ("all_reduce", 2704)
    assert r.step.latency > 0 and [c.kind for c in r.collectives("step")] == ["all_reduce", "all_gather"]
    report = (run / name / "report.txt").read_text()
    # attach counts as the engine does: profile_step 1 is step 2, and the title is the steps
    # counted when it prints: 2 after one step, 3 after the block's two
    assert f"Profile Summary at step {3 if name == 'attach_engine' else 2}:" in report
    if name == "attach_engine":  # the engine's parallel sizes; two steps, each on its own
        assert value(report, "world size") == "2" and value(report, "batch size per GPU") == "4"
        assert r.samples.count == 2 and r.iteration.step.calls == 1
        assert all(r.samples.figures["step"]) and "step time over 2 steps (median, min-max):" in report
    else:
        assert r.samples.count == 1


@pytest.mark.parametrize("name", ["zero0", "zero3", "zero2_bf16_accumulate2"])
def test_the_latencies_are_the_step_befores_timed_at_its_phases_boundaries(run, name):
    r = result(run, name)
    accumulate = 2 if "accumulate2" in name else 1
    for rank in r.ranks:  # every rank timed step 1 and counted step 2
        it, spans = rank.iteration, rank.spans
        # one forward and one backward call per micro-batch, one step (at the boundary)
        assert [len(spans[f"timed.{k}"]) for k in ("forward", "backward", "step", "iteration")] == [
            accumulate, accumulate, 1, 1]
        assert it.timed and it.latency == sum(spans["timed.iteration"])
        assert (it.forward.latency, it.backward.latency, it.step.latency) == tuple(
            sum(spans[f"timed.{k}"]) for k in ("forward", "backward", "step"))
        # the phases fit in the step; the counted step's own wall time is what its anatomy splits
        assert it.forward.latency + it.backward.latency + it.step.latency <= it.latency
        assert it.counted_latency == sum(spans["iteration"]) and it.anatomy.total == pytest.approx(it.counted_latency)
        # the native recorder's own time in its callbacks, measured: the profiler's part
        assert it.anatomy.profiler > 0
    report = (run / name / "report.txt").read_text()
    assert value(report, "latencies above (fwd, bwd, step, iter)").startswith("of the step before the profiled one")
    # the measured wall time says which step it is: the same one as the latencies above
    assert value(report, "measured iter wall time (the step before, timed apart)") == \
        flopsight.renderers.numbers.duration_to_string(r.iteration.latency)


def test_without_a_step_before_the_profiled_one_its_own_latencies_are_reported(run):
    # profile_step 1: the step before is the engine's first (its one-time setup), never timed
    r = result(run, "zero0_profile_step1")
    it = r.iteration
    assert not it.timed and not any(k.startswith("timed.") for k in r.spans)
    assert it.latency == sum(r.spans["iteration"]) and it.anatomy.total == pytest.approx(it.latency)
    report = (run / "zero0_profile_step1" / "report.txt").read_text()
    assert "Profile Summary at step 2:" in report and "latencies above" not in report


def test_nothing_is_left_installed_on_any_rank(run):
    for rank in (0, 1):
        state = json.loads((run / f"state.rank{rank}.json").read_text())
        assert state == {"restored": "deepspeed.profiling.flops_profiler.profiler", "dispatch_modes": 0,
                         "function_modes": 0, "module_hooks": 0, "engine_attributes": [], "engine_hooks": 0,
                         "install_engines_left": []}  # no engine keeps a hook or a wrapper (the timed step's)


def test_install_is_idempotent_and_uninstall_restores_deepspeeds_class():
    import deepspeed.runtime.engine as engine

    import flopsight.deepspeed as fd

    original = engine.FlopsProfiler
    try:
        fd.install()
        fd.install()
        assert engine.FlopsProfiler is fd.EngineProfiler and fd.installed()
    finally:
        fd.uninstall()
    assert engine.FlopsProfiler is original and not fd.installed()


def test_the_engine_profiler_without_an_engine_is_a_flops_profiler():
    import torch

    import flopsight.deepspeed as fd

    net = torch.nn.Linear(4, 2)
    prof = fd.EngineProfiler(net)
    prof.start_profile()
    net(torch.ones(3, 4))
    prof.stop_profile()
    assert prof.get_total_macs() == 3 * 4 * 2
    prof.end_profile()


def test_the_engine_profiler_takes_every_report_option_a_flops_profiler_takes(capsys):
    import inspect

    import torch

    import flopsight
    import flopsight.deepspeed as fd

    options = inspect.signature(flopsight.FlopsProfiler.print_model_profile).parameters
    assert inspect.signature(fd.EngineProfiler.print_model_profile).parameters.keys() == options.keys()
    net = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.ReLU())
    prof = fd.EngineProfiler(net)
    prof.start_profile()
    net(torch.ones(3, 4))
    prof.print_model_profile(ops=2, collapse=True)
    assert "Operator Profile" in capsys.readouterr().out
    prof.end_profile()


def test_unknown_keys_in_the_engines_block_warn(run):
    # the worker's blocks carry "unknown_key": DeepSpeed ignores it, flopsight says so
    import torch

    import flopsight.deepspeed as fd

    class Engine(torch.nn.Module):  # the attributes EngineProfiler reads of an engine
        global_steps, global_rank = 0, 0

        class _config:
            _param_dict = {"flops_profiler": {"enabled": True, "profile_stepz": 3}}

    with pytest.warns(UserWarning, match="unknown key 'profile_stepz'.*did you mean 'profile_step'"):
        fd.EngineProfiler(torch.nn.Linear(2, 2), Engine())


def test_the_zero_stages_example_runs_as_written(deepspeed_scenarios):
    # examples/zero_stages.py, with the command docs/distributed.md gives, on fewer steps
    # (tests/multirank/scenarios.py runs its main(): "--warm-up 1 --steps 3 --json stages.json")
    out = deepspeed_scenarios / "zero_stages"
    found = json.loads((out / "stages.json").read_text())
    printed = (out / "stdout.rank0.txt").read_text()
    rows, answers = found["stages"], found["answers"]
    assert [r["stage"] for r in rows] == [0, 1, 2, 3] and all(r["steps"] == 3 for r in rows)
    # the seed user's Net: conv1 3->6 5x5, conv2 6->16 5x5, fc1 400->120, fc2 120->84, fc3 84->10
    net = 3 * 6 * 25 + 6 + 6 * 16 * 25 + 16 + 400 * 120 + 120 + 120 * 84 + 84 + 84 * 10 + 10  # 62,006 params
    for r in rows:
        a = r["anatomy"]
        assert abs(sum(a.values()) - r["step_seconds"]) < 1e-6  # the anatomy adds up to the step
        assert a["framework"] >= 0 and a["profiler"] >= 0
        assert [m["activations"] > 0 for m in r["memory_per_rank"]] == [True, True]
    # hooks and Python between ops are not compute (on a loaded machine one stage's median step
    # can have its ops' host time and the profiler's estimate fill its phases: not all four)
    assert sum(r["anatomy"]["framework"] for r in rows) > 0
    # each rank holds every fp32 parameter up to ZeRO-2, half of them under ZeRO-3
    assert rows[0]["memory_per_rank"][0]["params"] == 4 * net
    assert rows[3]["memory_per_rank"][0]["params"] < 4 * net
    # Adam's two states: all of them on each rank without ZeRO, one rank's half from ZeRO-1 on
    assert rows[1]["memory_per_rank"][0]["optimizer_state"] < rows[0]["memory_per_rank"][0]["optimizer_state"]
    # gradients are all-reduced up to ZeRO-2 and reduce-scattered under ZeRO-3, whose 10
    # parameter tensors are gathered one by one
    assert "all_reduce" in rows[0]["communication"] and "reduce_scatter" in rows[3]["communication"]
    assert rows[3]["communication"]["all_gather"]["count"] == 10
    # conv2's backward is its own gradient work on every stage: ZeRO's collectives are
    # communication, never conv2's ops (ZeRO-2 and 3 copy the gradient into their bucket there)
    for r in rows:
        assert "aten.convolution_backward" in r["conv2_backward_ops"] and r["conv2_backward"] > 0
        assert not [op for op in r["conv2_backward_ops"] if op.startswith("c10d.")]
    assert "| ZeRO stage | step (median of N, spread) |" in printed
    # the three questions, answered in prose
    assert "1. Why is ZeRO-3 slower? ZeRO-3's step is" in printed and "2. How much of the step" in printed
    # one verdict for the ranking, the prose and the JSON: ZeRO-0 and ZeRO-3 in different tiers
    # only when it is significant; a part is a cause exactly when its interval leaves out zero,
    # and the modules listed under compute add up to its change with what they leave
    v, tiers = answers["verdict"], answers["tiers"]
    assert [t for t in tiers if "ZeRO-0" in t] == [t for t in tiers if "ZeRO-3" in t] or v["step"]["significant"]
    assert ("within the noise, not significant" in answers["why"]) == (not v["step"]["significant"])
    for name, part in v["parts"].items():
        assert part["significant"] == (part["low"] is not None and (part["low"] > 0 or part["high"] < 0))
        assert part["significant"] == any(c["part"] == name for c in v["causes"])
    for cause in v["causes"]:
        if cause["rest"] is not None:
            listed = sum(m["delta"] for m in cause["modules"]) + cause["rest"]
            assert listed == pytest.approx(cause["delta"], abs=1e-12)
    # how busy the device is, in words, on CPU ranks too: the compute share of each stage's step
    assert [line.split(": computing")[0] for line in answers["device_busy"]] == [f"ZeRO-{s}: CPU" for s in range(4)]
    assert "3. How busy is the device?\n   ZeRO-0: CPU: computing " in printed
    assert "DeepSpeed's bucket buffer" in " ".join(answers["memory_peaks"])