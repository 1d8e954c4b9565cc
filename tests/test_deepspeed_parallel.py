"""DeepSpeed's own pipeline and expert parallelism, profiled with ``Profiler(engine.module)`` on
2 CPU ranks (tests/multirank/ds_parallel_worker.py): no engine handed to flopsight, the sizes
read off the run."""

from __future__ import annotations

import pytest
from multirank.launch import rank_results

from flopsight.analysis.experts import expert_figures
from flopsight.analysis.pipeline import pipeline_figures
from flopsight.analysis.ranks import rank_figures

pytest.importorskip("deepspeed")


@pytest.fixture(scope="module")
def ranks(deepspeed_scenarios):
    return rank_results(deepspeed_scenarios / "ds_parallel")


def test_a_pipeline_engine_s_stages_count_their_own_micro_batches(ranks):
    # each stage: 2 x Linear(64, 64) on 4 micro-batches of 2 rows: 4 x 2 x (2 x 64 x 64) =
    # 65,536 forward MACs. Backward: stage 0's first layer needs no input gradient, 4 x (8,192
    # + 16,384) = 98,304; stage 1, 4 x 2 x 16,384 = 131,072
    pipe = ranks("pipe")
    assert [(r.total.forward.macs, r.total.backward.macs) for r in pipe] == [(65_536, 98_304), (65_536, 131_072)]
    for stage, result in enumerate(pipe):
        assert dict(result.metadata.parallel) == {"world": 2, "pp": 2, "dp": 1}
        assert result.metadata.pipeline == {"schedule": "PipelineEngine", "micro_batches": 4, "stages": [stage],
                                            "num_stages": 2, "steps": 1}
        # the last stage calls its loss module besides: 8 forward calls, 4 micro-batches
        assert result.iteration.micro_batches == 4
    assert pipe[1].iteration.forward.calls == 8


def test_a_pipeline_engine_s_stage_view_and_report_lines(ranks):
    # each micro-batch's activation (2 x 64 float32: 512 B) sent forward, its gradient back
    view = pipeline_figures(ranks("pipe")[0])
    assert (view.schedule, view.micro_batches, view.micro_batch_size, view.global_batch) == ("PipelineEngine", 4, 2, 8)
    assert view.ideal == 1 / 5  # (2 - 1) / (4 + 2 - 1)
    assert [(s.fwd_macs, s.bwd_macs) for s in view.stages] == [(16_384, 24_576), (16_384, 32_768)]
    assert [[(b.peer, b.sent, b.sends, b.received, b.receives) for b in s.boundaries] for s in view.stages] == [
        [(1, 2048, 4, 2048, 4)], [(0, 2048, 4, 2048, 4)]]
    lines = {label.strip(): value.strip() for label, _, value in
             (line.partition(": ") for line in ranks("pipe")[1].render("text").splitlines())}
    assert lines["data parallel size"] == "1" and lines["batch size per GPU"] == "2"
    assert lines["fwd MACs per GPU"] == "16.38 KMACs"  # one micro-batch's
    # the latency table over ranks lists each stage's own modules (rank 1's are "2" and "3")
    stages = rank_figures(ranks("pipe")[0]).modules
    assert {(m.path, m.latency.slowest) for m in stages if m.path in {"0", "1", "2", "3"}} == {
        ("0", 0), ("1", 0), ("2", 1), ("3", 1)}


def test_deepspeed_moe_layers_give_the_expert_parallel_size_and_their_all_to_alls(ranks):
    # per rank, 4 rows: inp 4 x 64 x 64 = 16,384 MACs, the gate 4 x 64 x 2 = 512, the rank's
    # expert on its capacity from both ranks (4 tokens x 2) = 8 x (64 x 128 + 128 x 64) =
    # 131,072, out 16,384: 164,352. The dispatch and the combine each exchange [2 ranks, 1
    # expert, 4 tokens, 64] float32 = 2,048 bytes, forward and backward
    for result in ranks("moe"):
        assert dict(result.metadata.parallel) == {"world": 2, "ep": 2}
        assert result.total.forward.macs == 164_352
        assert [(c.kind, c.module, c.phase, c.count, c.bytes) for c in result.collectives()
                if c.kind == "all_to_all"] == [("all_to_all", "moe.deepspeed_moe", "forward", 2, 4096),
                                               ("all_to_all", "moe.deepspeed_moe", "backward", 2, 4096)]
    # the rows each expert multiplied: its capacity, padded (DeepSpeed dispatches fixed buffers)
    [layer] = expert_figures(ranks("moe")[0])
    assert (layer.path, layer.tokens, layer.imbalance) == ("moe.deepspeed_moe.experts", (8, 8), 1.0)
