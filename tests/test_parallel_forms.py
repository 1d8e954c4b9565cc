"""Tensor, sequence, pipeline and expert parallelism (DTensor's ``parallelize_module``,
``torch.distributed.pipelining``, a mixture of experts over ``all_to_all_single``), counted per
rank, on real gloo ranks (tests/multirank/parallel_worker.py, 2 ranks; parallel4_worker.py, 4)."""

from __future__ import annotations

import json

import pytest
from helpers import PIPELINING_ON_GLOO
from multirank.launch import rank_results

import flopsight
from flopsight.analysis.added_work import AddedWork, added_work
from flopsight.analysis.experts import expert_figures
from flopsight.analysis.job import job_figures
from flopsight.analysis.pipeline import pipeline_figures
from flopsight.analysis.report_figures import summary_figures

pipelining = pytest.mark.skipif(not PIPELINING_ON_GLOO, reason="torch 2.9's pipelining fails on gloo, unprofiled")


@pytest.fixture(scope="module")
def ranks(gloo_scenarios):
    return rank_results(gloo_scenarios / "parallel")


def _macs(result) -> dict:
    return {n.name: (n.forward.macs, n.backward.macs) for n in result.walk()}


# Linear(64, 256) -> ReLU -> Linear(256, 64) on 8 rows, the first split by columns, the
# second by rows, over 2 ranks. Each rank holds 128 of the first layer's 256 outputs:
#   0: addmm (8 x 64) @ (64 x 128)     = 8 * 64 * 128  = 65,536 MACs forward
#      backward: its weight's gradient (64 x 8) @ (8 x 128) = 65,536 (the input needs none)
#   2: addmm (8 x 128) @ (128 x 64)    = 8 * 128 * 64  = 65,536 MACs forward
#      backward: the input's gradient (8 x 64) @ (64 x 128) and the weight's (64 x 8) @ (8 x 128):
#      2 * 65,536 = 131,072
# the rank's forward 131,072 MACs (half of one process's 262,144), its backward 196,608
TP_MACS = {"": (131_072, 196_608), "0": (65_536, 65_536), "1": (0, 0), "2": (65_536, 131_072)}


@pytest.mark.parametrize("name", ["tp_python", "tp_native", "tp_unnamed"])
def test_tensor_parallel_counts_each_rank_s_own_work(ranks, name):
    for result in ranks(name):
        assert _macs(result) == TP_MACS
        # ReLU on the rank's (8 x 128): 1,024 FLOPs; layer 2's bias is divided by the group
        # size before the partial sums are all-reduced (64 FLOPs): the work parallelism adds
        assert result.module("1").forward.flops == 8 * 128
        assert result.ops("forward")["redistribute:aten.div"].flops == 64


def test_tensor_parallel_params_are_each_rank_s_shard_and_the_model_s_are_one_process_s(ranks):
    # per rank: 0: 128 x 64 + 128 = 8,320; 2: 64 x 128 + 64 (its bias, replicated) = 8,256
    # the model: 256 x 64 + 256 + 64 x 256 + 64 = 33,088, what one process holds
    for name in ("tp_native", "tp_unnamed"):
        for result in ranks(name):
            assert (result.module("0").params, result.module("2").params, result.total.params) == (8320, 8256, 16576)
            assert result.metadata.params_of_model == 33_088
            assert result.metadata.params_replicated == 64


def test_tensor_parallel_sizes_come_from_the_mesh_named_or_not(ranks):
    for name in ("tp_native", "tp_unnamed"):
        result = ranks(name)[0]
        assert dict(result.metadata.parallel) == {"world": 2, "tp": 2, "dp": 1}
        figures = summary_figures(result)
        assert (figures.parallel.world_size, figures.parallel.dp_size, figures.parallel.mp_size) == (2, 1, 2)
        assert figures.params == 16_576 and figures.params_of_model == 33_088
        # the tensor-parallel group's forward: each rank's 264,768 FLOPs, twice
        assert figures.fwd_flops_of_model == 2 * 264_768


def test_tensor_parallel_report_lines(ranks):
    text = ranks("tp_native")[0].render("text")
    assert "data parallel size:" in text and "model parallel size:" in text
    lines = {label.strip(): value.split()[0] for label, _, value in
             (line.partition(": ") for line in text.splitlines()) if value.strip()}
    assert lines["data parallel size"] == "1" and lines["model parallel size"] == "2"
    assert lines["params per GPU"] == "16.58" and lines["params of model = params per GPU * mp_size"] == "33.09"
    assert lines["params replicated on every model-parallel GPU"] == "64"


def test_a_forward_only_report_of_a_model_parallel_run_gives_its_sizes(gloo_scenarios):
    # DeepSpeed prints the sizes in a forward-only report only for its engine; a model-parallel
    # run's "of model" lines scale by them, so they are given (tp_failed: rank 0's forward)
    text = flopsight.load(gloo_scenarios / "parallel" / "tp_failed.rank0.json").render("text")
    assert "bwd MACs per GPU" not in text
    sizes = [line.split()[-1] for line in text.splitlines()
             if line.startswith(("data parallel size:", "model parallel size:"))]
    assert sizes == ["1", "2"]


def test_the_row_layer_s_all_reduce_is_charged_to_it_forward(ranks):
    for name in ("tp_python", "tp_native"):
        for result in ranks(name):
            # its output (8 x 64 float32 = 2,048 bytes) summed over the group, in its own hook
            assert [(c.kind, c.module, c.phase, c.count, c.bytes, c.group_size) for c in result.collectives()] == [
                ("all_reduce", "2", "forward", 1, 2048, 2)]


def test_a_wait_inside_the_op_that_first_uses_an_all_reduce_is_communication(ranks):
    # rank 1 came 0.3 s late to the row layer's all-reduce; rank 0 waited for it inside the
    # ReLU's op, which first used the result (an AsyncCollectiveTensor): that wait is the
    # all-reduce's, exposed, and not the ReLU op's compute (the module's call, wall time,
    # still holds it). Before: the all-reduce never completed, 0 s exposed, and the ReLU op
    # took the 0.3 s. The margins are half the delay either way.
    for name in ("tp_late_python", "tp_late_native"):
        result = ranks(name)[0]
        [reduce] = result.collectives("forward")
        assert (reduce.kind, reduce.module) == ("all_reduce", "2")
        assert reduce.exposed > 0.15
        assert result.ops("forward")["aten.relu"].latency < 0.15 < result.module("3").forward.latency


def test_the_work_tensor_parallelism_adds_is_named_per_rank_and_for_the_job(ranks):
    # the row layer's replicated bias becomes partial sums inside DTensor's redistribution:
    # its 64 entries divided by the group size, 64 FLOPs a rank, forward
    for name in ("tp_python", "tp_native"):
        for result in ranks(name):
            assert result.ops("forward")["redistribute:aten.div"].flops == 64
            assert "aten.div" not in result.ops("forward")
            assert added_work(result) == AddedWork(redistributions=64, replicated=0)
            assert result.metadata.replicated_modules == ()
        assert job_figures(ranks(name)[0]).added == 2 * 64
    # a LayerNorm(64) left whole on 8 rows, on both ranks: forward 5 x 512 = 2,560 FLOPs,
    # backward (a first layer: its weight's and bias's gradients) 4 x 512 = 2,048: 4,608 a
    # rank. The job: both redistributions (2 x 64) and one of the norm's two copies (4,608)
    for result in ranks("tp_norm"):
        assert result.metadata.replicated_modules == ("0",)
        assert added_work(result) == AddedWork(redistributions=64, replicated=4_608)
    assert job_figures(ranks("tp_norm")[0]).added == 128 + 4_608
    text = ranks("tp_norm")[0].render("text")
    assert "FLOPs added per GPU, redistributions / modules left whole (every phase):" in text
    assert "job: FLOPs the parallel plan adds" in text
    # sequence parallelism's norm is not left whole: its inputs are split (a Replicate DTensor)
    assert ranks("sp_native")[0].metadata.replicated_modules == ()


def test_prepared_inputs_and_loss_parallel_are_counted_per_rank(ranks):
    # per rank: layer 0 on the 8 rows all-gathered from both ranks' 4, whole: 8 x 64 x 64 =
    # 32,768 MACs; layer 2 split by columns, 16 of its 32 outputs: 8 x 64 x 16 = 8,192
    for name in ("loss_python", "loss_native"):
        for result in ranks(name):
            assert result.total.forward.macs == 32_768 + 8_192
            assert result.metadata.replicated_modules == ("model.0",)
            # the input's all-gather (4 rows x 64 float32 = 1,024 bytes) in layer 0's forward;
            # the loss on the sharded logits: three all-reduces of one float32 per row (8 x 4
            # bytes: the rows' maxima, their sums of exponentials, the targets' logits) in
            # the loss's forward (the wrapper's own code); layer 2's input gradient (8 x 64 x 4 =
            # 2,048 bytes) summed over the group in its backward
            assert [(c.kind, c.module, c.phase, c.count, c.bytes) for c in result.collectives()] == [
                ("all_reduce", "", "forward", 3, 96), ("all_gather", "model.0", "forward", 1, 1024),
                ("all_reduce", "model.2", "backward", 1, 2048)]
    for python, native in zip(ranks("loss_python"), ranks("loss_native")):
        for phase in ("forward", "backward"):
            assert ({k: (v.calls, v.flops) for k, v in python.ops(phase).items() if v.flops}
                    == {k: (v.calls, v.flops) for k, v in native.ops(phase).items() if v.flops})


def test_a_tensor_parallel_rank_that_raises_is_named_on_rank_0(gloo_scenarios):
    # rank 1's last layer raised after the row layer's all-reduce; rank 0's span completed
    result = flopsight.load(gloo_scenarios / "parallel" / "tp_failed.rank0.json")
    assert result.rank_notes[1] == "failed: RuntimeError raised in module '3' (Raises)"
    assert result.ranks[0] is not None and result.ranks[0].total.forward.macs == 131_072


def test_both_backends_count_tensor_parallelism_alike(ranks):
    for python, native in zip(ranks("tp_python"), ranks("tp_native")):
        assert _macs(python) == _macs(native)
        for phase in ("forward", "backward"):  # the ops that cost (the free ones' views may differ)
            assert ({k: (v.calls, v.flops) for k, v in python.ops(phase).items() if v.flops}
                    == {k: (v.calls, v.flops) for k, v in native.ops(phase).items() if v.flops})


def test_one_process_runs_the_same_model_as_the_group_together(gloo_scenarios, ranks):
    single = flopsight.load(gloo_scenarios / "parallel" / "single.rank0.json")
    tp = ranks("tp_native")
    # the same layers in one process: 262,144 forward MACs, 393,216 backward, 33,088 params
    assert (single.total.forward.macs, single.total.backward.macs, single.total.params) == (262_144, 393_216, 33_088)
    assert sum(r.total.forward.macs for r in tp) == single.total.forward.macs
    assert sum(r.total.backward.macs for r in tp) == single.total.backward.macs
    # FLOPs: the group adds layer 2's bias division (64 per rank) and its bias added on both
    # ranks (8 x 64 = 512 once more): 528,896 + 2 * 64 + 512 = 529,536
    assert single.total.forward.flops == 528_896
    assert sum(r.total.forward.flops for r in tp) == 529_536


# LayerNorm(64) in sequence parallel on this rank's 2 x 4 of 2 x 8 positions, then the two
# layers: the first all-gathers the sequence (2 x 8 x 64), the second reduce-scatters its output
#   0: layer norm, 5 FLOPs per element: 5 * 2 * 4 * 64 = 2,560
#   1: (16 x 64) @ (64 x 128) = 131,072 MACs; backward: the input's and the weight's, 262,144
#   3: (16 x 128) @ (128 x 64) = 131,072 MACs; backward 262,144
SP_MACS = {"": (262_144, 524_288), "0": (0, 0), "1": (131_072, 262_144), "2": (0, 0), "3": (131_072, 262_144)}


def test_sequence_parallel_counts_each_rank_s_own_work_and_its_collectives(ranks):
    for result in ranks("sp_native"):
        assert _macs(result) == SP_MACS
        assert result.module("0").forward.flops == 2_560
        # the norm's output gathered (this rank gives 2 x 4 x 64 float32 = 2,048 bytes) in layer
        # 1's input hook, layer 3's output reduce-scattered (keeps 2,048) in its output hook; the
        # backward runs the reverse of each, charged to the same layers
        assert sorted((c.kind, c.module, c.phase, c.bytes) for c in result.collectives()) == [
            ("all_gather", "1", "forward", 2048), ("all_gather", "3", "backward", 2048),
            ("reduce_scatter", "1", "backward", 2048), ("reduce_scatter", "3", "forward", 2048)]
        # the norm's 2 x 64 parameters are replicated: in each rank's 16,704 and once in the model's
        assert (result.total.params, result.metadata.params_of_model, result.metadata.params_replicated) == (
            16_704, 33_216, 64 + 128)


# Two pipeline stages of Linear(64, 64) -> Linear(64, 64), 4 micro-batches of 2 rows each:
#   forward, per micro-batch and layer: 2 * 64 * 64 = 8,192 MACs; per stage and step:
#   4 * 2 * 8,192 = 65,536 (the first step's shape inference on meta tensors is not counted)
#   backward per micro-batch: stage 0, layer 0's weight gradient only (its input needs none)
#   and layer 1's input and weight gradients: 3 * 8,192 = 24,576; stage 1, both layers' input
#   and weight gradients: 4 * 8,192 = 32,768; per step, 4 times that
PP_MACS = {0: {"": (65_536, 98_304), "0": (32_768, 32_768), "1": (32_768, 65_536)},
           1: {"": (65_536, 131_072), "0": (32_768, 65_536), "1": (32_768, 65_536)}}
PIPELINES = ["pp_gpipe_native", "pp_1f1b_native", "pp_1f1b_python"]


@pipelining
@pytest.mark.parametrize("name", PIPELINES)
@pytest.mark.parametrize("step", ["step1", "step2"])
def test_a_pipeline_stage_counts_its_micro_batches_only(ranks, name, step):
    schedule = "ScheduleGPipe" if "gpipe" in name else "Schedule1F1B"
    for rank, result in enumerate(ranks(f"{name}_{step}")):
        assert _macs(result) == PP_MACS[rank]
        assert result.module("").forward.calls == 4  # one call per micro-batch, none for the shapes
        assert result.metadata.pipeline == {"schedule": schedule, "micro_batches": 4, "stages": [rank],
                                            "num_stages": 2, "steps": 1}
        assert dict(result.metadata.parallel) == {"world": 2, "pp": 2, "dp": 1}


@pipelining
@pytest.mark.parametrize("name", PIPELINES)
def test_the_pipeline_view_has_every_stage_its_traffic_and_the_ideal_bubble(ranks, name):
    view = pipeline_figures(ranks(f"{name}_step2")[0])  # rank 0's: every stage
    # ideal bubble (p - 1) / (m + p - 1) = 1 / 5; batch: 2 rows x 4 micro-batches x dp 1
    assert (view.ranks, view.micro_batches, view.micro_batch_size, view.global_batch, view.ideal) == (2, 4, 2, 8, 0.2)
    assert [(s.rank, s.stages, s.fwd_macs, s.bwd_macs) for s in view.stages] == [
        (0, (0,), 16_384, 24_576), (1, (1,), 16_384, 32_768)], view
    for s in view.stages:
        # each stage sends and receives one 2 x 64 float32 tensor (512 bytes) per micro-batch
        # with the other: activations forward, their gradients backward
        (b,) = s.boundaries
        assert (b.peer, b.sent, b.sends, b.received, b.receives) == (1 - s.rank, 2048, 4, 2048, 4), s
        assert 0 <= s.bubble <= b.seconds and s.bubble <= s.step, s
    text = ranks(f"{name}_step2")[0].render("text")
    assert "pipeline stage 1 (rank 1), per micro-batch fwd / bwd:" in text
    assert "the schedule's ideal: 20%" in text
    data = json.loads(ranks(f"{name}_step2")[0].render("json"))
    assert [s["stages"] for s in data["pipeline_figures"]["stages"]] == [[0], [1]]


@pipelining
def test_both_backends_count_a_pipeline_stage_alike(ranks):
    for step in ("step1", "step2"):
        for python, native in zip(ranks(f"pp_1f1b_python_{step}"), ranks(f"pp_1f1b_native_{step}")):
            assert _macs(python) == _macs(native)
            assert sorted(c[:2] + c[3:5] + (c.peer,) for c in python.collectives()) == sorted(
                c[:2] + c[3:5] + (c.peer,) for c in native.collectives())


# A mixture of 2 experts (Linear(64, 128) -> ReLU -> Linear(128, 64)), one per rank, top-1;
# each rank sends 6 of its 8 tokens to rank 0's expert and 2 to rank 1's:
#   rank 0's expert takes 6 + 6 = 12 tokens: 12 * (64 * 128 + 128 * 64) = 196,608 MACs;
#   rank 1's takes 2 + 2 = 4: 65,536; imbalance 12 / mean(12, 4) = 1.5
#   the all-to-alls forward, bytes this rank gives: the token counts (2 int64: 16), the
#   dispatch (its 8 tokens of 64 float32: 2,048), the combine (the tokens its expert took:
#   rank 0 12 x 256 = 3,072, rank 1 1,024); backward, the combine's and the dispatch's
#   gradients: 2,048 + 3,072 (rank 0), 2,048 + 1,024 (rank 1)
MOE = {0: (196_608, 5136, 5120), 1: (65_536, 3088, 3072)}


@pytest.mark.parametrize("name", ["moe_python", "moe_native"])
def test_expert_parallel_counts_each_rank_s_tokens_and_charges_the_all_to_alls_to_the_layer(ranks, name):
    results = ranks(name)
    for rank, result in enumerate(results):
        expert_macs, forward_bytes, backward_bytes = MOE[rank]
        assert result.module("1.experts.0").forward.macs == expert_macs
        assert [(c.kind, c.module, c.phase, c.count, c.bytes) for c in result.collectives()] == [
            ("all_to_all", "1", "forward", 3, forward_bytes), ("all_to_all", "1", "backward", 2, backward_bytes)]
    (layer,) = expert_figures(results[0])  # rank 0's: every rank's tokens
    # top-1: the experts took 16 tokens of the 16 the router took; a token uses the router
    # (64 x 2 = 128) and one expert (64 x 128 + 128 + 128 x 64 + 64 = 16,576): 16,704 of the
    # 128 + 2 x 16,576 = 33,280 the layer holds over the ranks
    assert (layer.path, layer.experts, layer.tokens, layer.imbalance, layer.top_k) == (
        "1", ("1.experts.0",), (12, 4), 1.5, 1.0)
    assert (layer.params_per_expert, layer.params_active, layer.params_total) == (16_576, 16_704, 33_280)
    text = results[0].render("text")
    assert "experts of '1', tokens per rank (imbalance: max / mean):" in text and "12, 4 (1.50)" in text
    assert json.loads(results[0].render("json"))["expert_figures"][0]["tokens"] == [12, 4]


def test_the_parallel_plans_example_runs_as_written(gloo_scenarios):
    # examples/parallel_plans.py on 2 ranks, with the command docs/distributed.md gives, on
    # fewer steps (tests/multirank/scenarios.py: "--warm-up 0 --steps 2 --json plans.json")
    out = gloo_scenarios / "parallel_plans"
    found = json.loads((out / "plans.json").read_text())
    rows = {r["plan"]: r for r in found["plans"]}
    pipeline = ["pipeline"] if PIPELINING_ON_GLOO else []
    assert list(rows) == ["data", "tensor", *pipeline, "expert"] and found["world"] == 2
    # the dense model's step, per token and block: q, k, v and out 4 * 64 * 64 = 16,384, the
    # MLP 2 * 64 * 256 = 32,768, attention's two products 4 heads * 2 * 16 * 16 / 16 = 2,048
    # (dense): 51,200 MACs; 8 * 16 tokens, 4 blocks: 26,214,400 forward, twice that backward
    # (every product's input and weight gradients): 78,643,200 per step, split over the ranks
    for plan in ("data", "tensor", *pipeline):
        assert rows[plan]["macs_per_rank"] == [78_643_200 // 2] * 2
    # the experts take every token once (each the MLP's size), plus the routers: 64 x 2 per
    # token and block forward, thrice that with the backward: 3 * 128 * 4 * 128 = 196,608
    assert sum(rows["expert"]["macs_per_rank"]) == 78_643_200 + 196_608
    for r in rows.values():
        assert abs(sum(r["anatomy"].values()) - r["step_seconds"]) < 1e-6  # the anatomy adds up to the step
        # the bubble is part of the communication waited for, both of the median step
        assert r["anatomy"]["communication_exposed"] >= 0 and r["anatomy"]["bubble"] >= 0
    assert rows["data"]["anatomy"]["bubble"] == 0
    if pipeline:
        assert rows["pipeline"]["anatomy"]["bubble"] > 0
    assert set(rows["tensor"]["communication"]) == {"all_reduce"}
    assert set(rows["expert"]["communication"]) == {"all_to_all", "all_reduce"}
    assert found["verdicts"]["fastest"] in rows
    assert "| plan | MACs per rank (fwd + bwd) |" in (out / "stdout.rank0.txt").read_text()


# -- four ranks (tests/multirank/parallel4_worker.py) -----------------------------------------
@pytest.fixture(scope="module")
def ranks4(gloo4_scenarios):
    return rank_results(gloo4_scenarios / "parallel4", ranks=4)


def test_fsdp2_with_tensor_parallelism_counts_each_rank_s_shard_of_the_work(ranks4):
    # a 2 x 2 mesh ("dp", "tp"): each tensor-parallel pair computes what the 2-rank tensor-
    # parallel run does (its own 8 rows), so the same per-rank MACs: 131,072 forward, 196,608
    # backward; FSDP2's sharding over "dp" counts at full size (as ZeRO-3's), tensor
    # parallelism's over "tp" by the shard: 16,576 params per GPU, 33,088 in the model
    for result in ranks4("fsdp_tp"):
        assert _macs(result) == TP_MACS
        assert dict(result.metadata.parallel) == {"world": 4, "dp": 2, "tp": 2}
        assert (result.module("0").params, result.module("2").params, result.total.params) == (8320, 8256, 16_576)
        assert (result.metadata.params_of_model, result.metadata.params_replicated) == (33_088, 64)
        kinds = {(c.kind, c.module, c.phase, c.group_size): c.bytes for c in result.collectives()}
        # tensor parallelism's all-reduce of layer 2's output (8 x 64 float32) in its pair;
        # FSDP2 gathers the parameters over "dp" before the forward and reduce-scatters their
        # gradients after the backward: this rank's shard of each, 16,576 / 2 float32 = 33,152 bytes
        assert kinds == {("all_reduce", "2", "forward", 2): 2048, ("all_gather", "", "forward", 2): 33_152,
                         ("reduce_scatter", "", "backward", 2): 33_152}
    figures = summary_figures(ranks4("fsdp_tp")[0])
    assert (figures.parallel.world_size, figures.parallel.dp_size, figures.parallel.mp_size) == (4, 2, 2)


@pipelining
def test_four_pipeline_stages_each_count_their_own_and_their_two_neighbours(ranks4):
    # 8 micro-batches of 2 rows: forward 8 * 2 * 8,192 = 131,072 per stage; backward 8 * 24,576
    # = 196,608 on stage 0, 8 * 32,768 = 262,144 on the others (see PP_MACS)
    results = ranks4("pp4_step2")
    for rank, result in enumerate(results):
        assert (result.total.forward.macs, result.total.backward.macs) == (131_072, 196_608 if rank == 0 else 262_144)
    view = pipeline_figures(results[0])
    # ideal bubble (4 - 1) / (8 + 4 - 1) = 3 / 11; global batch 2 x 8 x dp 1 = 16
    assert (view.ranks, view.micro_batches, view.global_batch, view.ideal) == (4, 8, 16, 3 / 11)
    # 512 bytes each way per micro-batch with each neighbour: 8 x 512 = 4,096
    assert [[(b.peer, b.sent, b.received) for b in s.boundaries] for s in view.stages] == [
        [(1, 4096, 4096)], [(0, 4096, 4096), (2, 4096, 4096)], [(1, 4096, 4096), (3, 4096, 4096)],
        [(2, 4096, 4096)]]


@pipelining
def test_an_interleaved_schedule_s_rank_counts_both_its_stages(ranks4):
    # rank r runs stages r and r + 4 of 8: forward 2 * 131,072; backward: rank 0, stage 0's
    # 196,608 and stage 4's 262,144; the others, twice 262,144
    for rank, result in enumerate(ranks4("interleaved_step2")):
        assert (result.total.forward.macs, result.total.backward.macs) == (
            262_144, 458_752 if rank == 0 else 524_288)
        assert result.metadata.pipeline["stages"] == [rank, rank + 4]
        assert dict(result.metadata.parallel) == {"world": 4, "pp": 4, "dp": 1}
    # ideal bubble with 2 stages per rank: (4 - 1) / (2 * 8 + 4 - 1) = 3 / 19
    view = pipeline_figures(ranks4("interleaved_step2")[0])
    assert view.ideal == 3 / 19
    # 8 micro-batches, each through both of the rank's stages: 16 forward calls
    for result in ranks4("interleaved_step2"):
        assert (result.iteration.forward.calls, result.iteration.micro_batches) == (16, 8)
    assert view.micro_batches == 8


def test_rank_0_s_job_view_places_each_rank_on_the_mesh_and_sums_their_work(ranks4):
    result = ranks4("fsdp_tp")[0]
    job = job_figures(result, peak=1e9)  # a device of 1 GFLOP/s: the job's peak is 4 GFLOP/s
    assert [(row.rank, row.coordinates) for row in job.ranks] == [
        (0, {"dp": 0, "tp": 0}), (1, {"dp": 0, "tp": 1}), (2, {"dp": 1, "tp": 0}), (3, {"dp": 1, "tp": 1})]
    # each rank: 131,072 + 196,608 MACs (TP_MACS); FLOPs forward: layer 0 2 * 65,536 + its
    # bias 8 * 128 = 132,096, ReLU 8 * 128 = 1,024, layer 2 2 * 65,536 + the bias division 64 +
    # its bias 8 * 64 = 131,648: 264,768; backward: layer 0's weight 131,072 + bias sum 1,024,
    # ReLU's 2 * 1,024 = 2,048, layer 2's input and weight 262,144 + bias sum 512: 396,800
    assert [(row.macs, row.flops, row.params) for row in job.ranks] == [(327_680, 661_568, 16_576)] * 4
    assert job.flops == 4 * 661_568 and job.step == max(row.step for row in job.ranks)
    model_flops = sum(r.iteration.model_flops for r in result.ranks)
    assert job.mfu == pytest.approx(model_flops / job.step / 4e9)
    assert "rank 3 (dp 1, tp 1), MACs / FLOPs / step / params:" in result.render("text")
    (line,) = [line for line in result.render("text", peak=1e9).splitlines() if line.startswith("job: FLOPs per")]
    assert line.endswith("%") and "n/a" not in line  # the MFU against the peak given
    # added: each rank's bias division (64); FSDP2 splits no module's work over "tp"
    assert job.added == 4 * 64
    assert json.loads(result.render("json"))["job_figures"]["flops"] == 4 * 661_568
    assert json.loads(result.render("json"))["job_figures"]["added"] == 4 * 64
