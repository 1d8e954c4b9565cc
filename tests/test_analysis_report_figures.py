"""The report's figures (analysis.report_figures) on hand-made results: every number the
text report prints is computed here, the renderer only formats them."""

import pytest

from flopsight.analysis.report_figures import (
    ParallelInfo,
    generation_figures,
    is_training,
    module_figures,
    parallel_of,
    rate,
    share,
    summary_figures,
    training_figures,
)
from flopsight.result import ModelCall, ModuleStats, ProfileResult
from flopsight.result.metadata import Metadata
from flopsight.result.stats import Stats


def module(name, parent, children, params, **phases):
    return ModuleStats(
        name=name, type_name="M", depth=0 if name == "" else 1, parent=parent, children=tuple(children),
        params=params, params_trainable=params, phases=phases,
    )


def call(macs, flops, latency, batch_size):
    """One call of the model itself."""
    return ModelCall("", Stats(macs, flops, latency, 1), batch_size)


def forward_only(world_size=1):
    """Root (2 params, 4 MACs of its own) with one child fc (6 params, 12 MACs); one call of 0.5 s
    of which the child took 0.125 s."""
    modules = {
        "": module("", None, ["fc"], 8, forward=Stats(4, 10, 0.375, 1)),
        "fc": module("fc", "", [], 6, forward=Stats(12, 30, 0.125, 1)),
    }
    meta = Metadata(world_size=world_size, mode="forward")
    return ProfileResult(modules, metadata=meta, spans={"forward": [0.5], "iteration": [0.5]},
                         calls=[call(16, 40, 0.5, 4)])


def training(recompute=False):
    """fwd 20 FLOPs in 0.5 s, bwd 40 in 1 s, step 6 in 0.25 s, the whole span 2 s, 4 samples;
    with ``recompute``, fc re-ran its forward (10 FLOPs, 0.25 s) during the backward."""
    fc = {"forward": Stats(8, 16, 0.25, 1), "backward": Stats(16, 32, 0.5, 0)}
    if recompute:
        fc["recompute"] = Stats(5, 10, 0.25, 1)
    modules = {
        "": module("", None, ["fc"], 8, forward=Stats(2, 4, 0.25, 1), backward=Stats(4, 8, 0.5, 0),
                   step=Stats(0, 6, 0.25, 1)),
        "fc": module("fc", "", [], 6, **fc),
    }
    spans = {"forward": [0.5], "backward": [1.0], "step": [0.25], "iteration": [2.0]}
    return ProfileResult(modules, metadata=Metadata(world_size=1, mode="custom"), spans=spans,
                         calls=[call(10, 20, 0.5, 4)])


def test_rate_and_share_never_divide_by_zero():
    assert (rate(6, 2), rate(6, 0), rate(0, 0)) == (3, 0, 0)
    assert (share(1, 8), share(1, 0)) == (12.5, 0)


def test_forward_only_summary():
    f = summary_figures(forward_only())
    assert not f.training_report and f.training is None and f.generation is None
    assert f.parallel is None and f.batch_size is None  # no header without an engine
    assert (f.params, f.params_of_model) == (8, 8)
    assert (f.fwd.macs, f.fwd.flops, f.fwd.latency) == (16, 40, 0.5)
    assert f.fwd_flops_per_second == 40 / 0.5 == 80
    assert f.micro_batches is None and f.unsupported_ops == [] and f.error is None


def test_an_engine_scales_params_and_flops_by_the_model_parallel_size():
    f = summary_figures(forward_only(), ParallelInfo(world_size=8, dp_size=4, mp_size=2, batch_size=16))
    assert (f.params_of_model, f.fwd_flops_of_model) == (8 * 2, 40 * 2)
    assert (f.batch_size, f.batch_size_measured) == (16, False)


def test_unsupported_ops_are_sorted_and_an_error_is_passed_on():
    base = forward_only()
    result = ProfileResult(base.modules, {"aten.b": 2, "aten.a": 1},
                           Metadata(mode="forward", error="RuntimeError raised in module 'fc'"), calls=base.calls)
    f = summary_figures(result)
    assert f.unsupported_ops == [("aten.a", 1), ("aten.b", 2)]
    assert f.error == "RuntimeError raised in module 'fc'"


def test_module_figures_are_shares_of_the_model():
    result = forward_only()
    m = module_figures(result.module("fc"), result.total)
    assert (m.params, m.params_share) == (6, 75.0)  # 6 of 8
    assert (m.macs, m.macs_share) == (12, 75.0)  # 12 of 16
    assert (m.latency, m.latency_share) == (0.125, 25.0)  # 0.125 of 0.5
    assert m.flops_per_second == 30 / 0.125 == 240
    assert (m.bwd_macs, m.bwd_macs_share, m.bwd_flops_per_second) == (0, 0, 0)  # no backward measured


def test_is_training_and_parallel_of():
    assert not is_training(forward_only()) and is_training(training())
    assert parallel_of(forward_only(world_size=4), None) == ParallelInfo(world_size=4, dp_size=4, mp_size=1)
    given = ParallelInfo(world_size=8, dp_size=4, mp_size=2)
    assert parallel_of(forward_only(), given) is given


def test_training_figures():
    t = training_figures(training(), ParallelInfo(world_size=2, dp_size=2))
    # backward: root 8 + fc 32 FLOPs in the 1 s span; fwd: root 4 + fc 16 in 0.5 s
    assert (t.backward.flops, t.backward.latency, t.step.flops) == (40, 1.0, 6)
    assert t.recompute is None and t.model_flops_per_second is None
    assert t.bwd_flops_per_second == 40 / 1.0
    assert t.fwd_bwd_flops_per_second == (20 + 40) / (0.5 + 1.0)
    assert t.iter_flops == 20 + 40 + 6
    assert (t.iter_latency, t.iter_flops_per_second) == (2.0, 66 / 2.0)
    assert t.samples_per_second == 4 * 2 / 2.0  # 4 samples on each of 2 data-parallel ranks


def test_training_figures_with_recompute():
    t = training_figures(training(recompute=True), ParallelInfo())
    assert (t.recompute.flops, t.recompute.latency) == (10, 0.25)
    assert t.bwd_flops_per_second == (40 + 10) / 1.0
    assert t.fwd_bwd_flops_per_second == pytest.approx((20 + 40 + 10) / 1.5)
    assert t.iter_flops == 20 + 40 + 10 + 6
    assert t.model_flops_per_second == (76 - 10) / 2.0


def test_training_summary_has_the_header_and_the_measured_batch():
    f = summary_figures(training())
    assert f.training_report and f.training is not None
    assert f.parallel == ParallelInfo(world_size=1, dp_size=1, mp_size=1)
    assert (f.batch_size, f.batch_size_measured) == (4.0, True)  # 4 samples in 1 micro-batch
    assert (f.micro_batches, f.optimizer_steps) == (1, 1)


def test_generation_figures():
    # three calls of the model: 12, 4 and 4 FLOPs (0.5 s, 0.25 s, 0.25 s), batch 2; the
    # whole generate() call took 1.25 s
    modules = {"": module("", None, [], 0, forward=Stats(10, 20, 1.0, 3))}
    calls = [call(6, 12, 0.5, 2), call(2, 4, 0.25, 2), call(2, 4, 0.25, 2)]
    result = ProfileResult(modules, metadata=Metadata(mode="generate"), calls=calls,
                           spans={"forward": [0.5, 0.25, 0.25], "iteration": [1.25]})
    g = generation_figures(result)
    assert g.encoder is None
    assert g.prefill_flops_per_second == 12 / 0.5
    assert g.decode_flops_per_second == 8 / 0.5
    assert g.decode_tokens_per_second == 2 * 2 / 0.5  # batch 2 * 2 decode steps
    assert g.flops_per_second == 20 / 1.25
    assert g.tokens_per_second == 2 * 3 / 1.25
    assert g.stats.other.latency == pytest.approx(0.25)  # between the calls
    assert generation_figures(forward_only()) is None
