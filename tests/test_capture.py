"""The capture layer's parts on their own: records, overhead, attribution, the tree, build."""

import pytest
import torch

from flopsight._torch_private import tag_nodes
from flopsight.capture.assembly.build import build_result
from flopsight.capture.assembly.raw import RawCapture
from flopsight.capture.charging.attribution import Attribution
from flopsight.capture.charging.calls import CallRecord, ModuleCalls
from flopsight.capture.charging.counts import Counts
from flopsight.capture.model.modules import describe
from flopsight.capture.runtime.context import CaptureContext, Overhead
from flopsight.capture.runtime.tally import Tally
from flopsight.capture.runtime.timing import FakeClock
from flopsight.formulas import Cost, Registry
from flopsight.result.metadata import Metadata
from flopsight.result.stats import Stats
from flopsight.result.tree import Phases


class Entry:
    """A resolved-op stand-in: a name and a formula."""

    def __init__(self, name, cost=None, error=None):
        self.name, self._cost, self._error = name, cost, error
        self.formula = None if cost is None and error is None else object()

    def cost(self, *payload):
        if self._error:
            raise self._error
        return self._cost


def call(path, phase="forward", top_id=-1):
    rec = CallRecord(0, path, phase, None, -1, None)
    rec.top_id = top_id
    return rec


def context(**kwargs):
    return CaptureContext.create(FakeClock(), Registry(), **kwargs)


def test_stats_add_and_scale_field_by_field():
    a, b = Stats(1, 2, 0.5, 1), Stats(3, 4, 0.25, 2)
    assert a + b == Stats(4, 6, 0.75, 3)
    assert a * 3 == 3 * a == Stats(3, 6, 1.5, 3)
    assert Stats.of_product(10, extra_flops=5) == Stats(10, 25)
    with pytest.raises(TypeError):
        a + (1, 2)


def test_tally_sums_costs_time_and_calls_per_module_phase_and_op():
    tally = Tally(linear=True)
    tally.add("fc", "forward", "aten.mm", Cost(4, 8), 1.0, 3.0)
    tally.add("fc", "forward", "aten.mm", Cost(4, 8), 5.0, 6.0)
    tally.add("fc", "backward", "aten.mm", Cost(8, 16), 0.0, 1.0)
    ops = tally.resolve(lambda a, b: b - a, scale=0.5)  # one stamp unit = 0.5 s
    assert ops[("fc", "forward")] == {"aten.mm": Stats(8, 16, 1.5, 2)}  # (2 + 1) units
    assert ops[("fc", "backward")] == {"aten.mm": Stats(8, 16, 0.5, 1)}


def test_tally_keeps_stamp_pairs_for_a_clock_that_resolves_at_the_end():
    tally = Tally(linear=False)
    tally.add("", "forward", "aten.add", Cost(0, 3), "e0", "e1")
    tally.add("", "forward", "aten.add", Cost(0, 3), "e2", "e3")
    events = {"e0": 0.0, "e1": 0.25, "e2": 1.0, "e3": 2.0}
    ops = tally.resolve(lambda a, b: events[b] - events[a], scale=None)
    assert ops[("", "forward")]["aten.add"] == Stats(0, 6, 1.25, 2)


def test_overhead_is_one_object_summing_host_time():
    ticks = iter([0.0, 0.25, 1.0, 1.5])
    overhead = Overhead(lambda: next(ticks))
    overhead.end(overhead.begin())
    overhead.end(overhead.begin())
    assert overhead.seconds == 0.75


def test_attribution_charges_the_innermost_call_and_its_top_level_call():
    ctx = context()
    attribution = Attribution(ctx, owner_of=lambda seq: None, param_owner={})
    ctx.stack.extend([call("", top_id=0), call("encoder")])
    assert attribution.charge(Entry("aten.mm", Cost(5, 10)), 0, 2) == "encoder"
    ctx.stack.pop()
    attribution.charge(Entry("aten.add"), 2, 3, cost=Cost(0, 1))
    ops = ctx.tally.resolve(lambda a, b: b - a, scale=1.0)
    assert ops[("encoder", "forward")]["aten.mm"] == Stats(5, 10, 2.0, 1)
    assert ops[("", "forward")]["aten.add"] == Stats(0, 1, 1.0, 1)
    assert ctx.tally.tops == [[5, 11]]  # both ran inside the top-level call 0


def test_attribution_outside_every_module_depends_on_what_is_profiled():
    span = context(outside_to_root=False)  # a span of user code around the model
    assert Attribution(span, lambda s: None, {}).charge(Entry("aten.mm", Cost(1, 2)), 0, 1) is None
    assert span.tally.ops == {}
    call_of_model = context(outside_to_root=True)  # a call of the model's own method (generate)
    assert Attribution(call_of_model, lambda s: None, {}).charge(Entry("aten.mm", Cost(1, 2)), 0, 1) == ""
    stepping = context()
    stepping.phase = "step"  # optimizer.step() is always counted
    Attribution(stepping, lambda s: None, {}).charge(Entry("aten.add", Cost(0, 7)), 0, 1)
    assert stepping.tally.resolve(lambda a, b: b - a, scale=1.0)[("", "step")]["aten.add"].flops == 7


def test_a_missing_or_failing_formula_is_listed_and_costs_nothing():
    ctx = context()
    attribution = Attribution(ctx, lambda s: None, {})
    ctx.stack.append(call("fc"))
    with pytest.warns(UserWarning, match="no formula for operator 'aten.weird'"):
        attribution.charge(Entry("aten.weird"), 0, 1)
    with pytest.warns(UserWarning, match="the formula for 'aten.bad' failed"):
        attribution.charge(Entry("aten.bad", error=ValueError("boom")), 0, 1)
    assert dict(ctx.tally.unsupported) == {"aten.weird": 1, "aten.bad": 1}
    ops = ctx.tally.resolve(lambda a, b: b - a, scale=1.0)
    assert ops[("fc", "forward")]["aten.weird"] == Stats(0, 0, 1, 1)  # seen: calls and time


def test_phases_raise_on_a_name_that_is_not_a_phase():
    phases = Phases({"forward": Stats(3, 6)})
    assert phases.backward == Stats() and phases["step"] == Stats()
    with pytest.raises(AttributeError, match="did you mean 'forward'"):
        phases.fowrard  # noqa: B018 (the attribute read is what is tested)
    with pytest.raises(KeyError):
        phases["forwards"]


def test_build_result_from_hand_made_captures_derives_inclusive_values():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    raw = RawCapture(
        Counts(ops={("", "forward"): {"aten.add": Stats(0, 1, 0.5, 1)},
                    ("0", "forward"): {"aten.addmm": Stats(4, 10, 1, 1)},
                    ("1", "forward"): {"aten.relu": Stats(0, 2, 0.5, 1)}},
               tops=[[4, 13]]),
        ModuleCalls(latency={("", "forward"): 1.0, ("0", "forward"): 2.0, ("1", "forward"): 0.5},
                    calls={("", "forward"): 1, ("0", "forward"): 1, ("1", "forward"): 1},
                    top_calls=[("", 3.5, 3)]),
    )
    result = build_result(describe(model), raw, metadata=Metadata(model="Sequential"))
    # self values are stored; the root's forward adds both children: 4 MACs, 1 + 10 + 2 FLOPs
    assert result.total.self.forward == Stats(0, 1, 1.0, 1)
    assert result.total.forward == Stats(4, 13, 3.5, 1)
    assert result.module("0").forward == Stats(4, 10, 2.0, 1)
    assert result.root_calls[0].batch_size == 3
    assert result.coverage.calls == 3 and result.coverage.ops_with_formula == 3


def test_an_alias_under_the_same_parent_is_one_module():
    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(10, 1)
            self.b = self.a

    infos = describe(Twice())
    assert list(infos) == ["", "a"] and infos["a"].aliases == ["b"]
    assert infos[""].params == 11  # counted once


def test_backward_nodes_of_a_forward_rerun_on_another_thread_find_that_threads_call():
    # CUDA runs the backward on a thread of its own, whose autograd counter numbers the nodes a
    # checkpointed forward re-run there makes: 100..104, numbers the profiling thread's forward
    # also used (layer0: 100..110, layer1: 110..120). The re-run call is logged with its thread,
    # and its nodes are tagged with it; the other nodes are the profiling thread's.
    ctx = context()
    log = ctx.calls
    for path, phase, start, end, thread in [("layer0", "forward", 100, 110, 0), ("layer1", "forward", 110, 120, 0),
                                             ("layer1", "recompute", 100, 105, 7)]:
        rec = CallRecord(len(log), path, phase, None, -1, None)
        rec.seq_start, rec.seq_end, rec.thread = start, end, thread
        log.append(rec)
    attribution = Attribution(ctx, param_owner={})
    x = torch.ones(2, requires_grad=True)
    forward_out, rerun_out = x * 2, x * 3
    made_in_forward, made_in_rerun = forward_out.grad_fn, rerun_out.grad_fn
    made_in_forward._set_sequence_nr(102)
    made_in_rerun._set_sequence_nr(102)
    assert tag_nodes([rerun_out], 100, 105, thread=7) == 1  # what the tracker does when the re-run ends
    assert attribution._backward_owner(made_in_forward) == "layer0"
    assert attribution._backward_owner(made_in_rerun) == "layer1"
