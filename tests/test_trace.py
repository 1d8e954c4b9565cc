"""The timeline in the result and the Chrome trace rendered from it.

A real training step (two micro-batches, backward, AdamW step) on the host clock: the trace
is valid Trace Event Format JSON with a lane per phase, module spans nest on their lane, and
durations are the latencies the result records. Collectives of a real 2-rank gloo run sit on
the communication lane, inside the span that issued them. The trace also loads in headless
Chromium's own trace engine (the DevTools Performance panel's: Debian's Chromium does not
serve ``chrome://tracing``).
"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
import torch
from headless_chromium import Chromium, find_chromium
from multirank.launch import rank_results
from torch import nn
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

import flopsight
import flopsight.result.timeline
from flopsight.capture.assembly.build import _timeline
from flopsight.renderers.trace_renderer import LANES, render_trace
from flopsight.result.timeline import CallSpan, CollectiveSpan, Span, Timeline

CHROMIUM = find_chromium()


class Block(nn.Module):
    """A residual MLP block: three nested calls per forward."""

    def __init__(self, width: int, checkpointed: bool = False):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width)
        self.checkpointed = checkpointed

    def mlp(self, x):
        return self.fc2(self.act(self.fc1(x)))

    def forward(self, x):
        if self.checkpointed:  # activation checkpointing: fc1, act and fc2 run again in backward
            with set_checkpoint_early_stop(False):  # all of them (else fc2's rerun stops early)
                return x + checkpoint(self.mlp, x, use_reentrant=False)
        return x + self.mlp(x)


def training_step(clock=None, checkpointed=False, device="cpu") -> flopsight.ProfileResult:
    """Two micro-batches (forward and backward each), then one AdamW step: every module is
    called twice."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), Block(16, checkpointed), Block(16), nn.Linear(16, 4)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with flopsight.Profiler(model, optimizer=opt, clock=clock) as prof:
        for _ in range(2):
            model(torch.randn(32, 8, device=device)).pow(2).mean().backward()
        opt.step()
    return prof.result


@pytest.fixture(scope="module")
def result():
    return training_step()


@pytest.fixture(scope="module")
def trace(result):
    return json.loads(render_trace(result))


# -- checks of the format -------------------------------------------------------------------
def check_chrome_trace(trace: dict) -> None:
    """The Trace Event Format's JSON object form as this renderer writes it: every event has
    name, ph, ts, pid and tid; complete events a duration >= 0; metadata events first, then
    the rest by ts; every process and lane used is named."""
    assert isinstance(trace["traceEvents"], list) and trace["displayTimeUnit"] in ("ms", "ns")
    named_pids, named_lanes, used = set(), set(), set()
    last_ts, seen_timed = float("-inf"), False
    for e in trace["traceEvents"]:
        assert {"name", "ph", "ts", "pid", "tid"} <= set(e), e
        assert isinstance(e["name"], str) and e["name"]
        assert isinstance(e["ts"], (int, float)) and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "M":
            assert not seen_timed, "metadata events come first"
            assert e["name"] in ("process_name", "process_sort_index", "thread_name", "thread_sort_index")
            if e["name"] == "process_name":
                named_pids.add(e["pid"])
            elif e["name"] == "thread_name":
                named_lanes.add((e["pid"], e["tid"]))
            continue
        assert e["ph"] == "X", e
        seen_timed = True
        assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
        assert e["ts"] >= last_ts, "events are sorted by ts"
        assert isinstance(e.get("args", {}), dict)
        last_ts = e["ts"]
        used.add((e["pid"], e["tid"]))
    assert used <= named_lanes and {pid for pid, _ in used} <= named_pids


def ns(us: float) -> int:
    return round(us * 1000)


def nesting(trace: dict) -> dict:
    """Each X event (by id) -> the event it lies within on its lane (None at the top), the
    way the viewers stack them; asserts that events on a lane nest (no partial overlap)."""
    lanes = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            lanes[e["pid"], e["tid"]].append(e)
    parent_of = {}
    for events in lanes.values():
        stack = []
        for e in sorted(events, key=lambda e: (ns(e["ts"]), -ns(e["dur"]))):
            start, end = ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])
            while stack and start >= stack[-1][1]:
                stack.pop()
            if stack:
                assert end <= stack[-1][1], f"{e['name']} overlaps {stack[-1][2]['name']} partly"
            parent_of[id(e)] = stack[-1][2] if stack else None
            stack.append((start, end, e))
    return parent_of


def lanes_of(trace: dict, pid: int = 0) -> dict[str, list[dict]]:
    """Lane name -> its X events, of process ``pid``."""
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == pid}
    out = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "X" and e["pid"] == pid:
            out[names[e["tid"]]].append(e)
    return out


# -- the timeline in the result ----------------------------------------------------------------
def test_call_durations_add_up_to_the_inclusive_latencies(result):
    check_durations(result, slack=1e-12)


def check_durations(result, slack: float) -> None:
    """Each module's two forward calls add up to its inclusive latency (to ``slack`` seconds)."""
    by_module = defaultdict(list)
    for call in result.timeline.calls:
        by_module[call.path, call.phase].append(call.duration)
    assert {phase for _, phase in by_module} == {"forward"}
    for node in result.walk():
        durations = by_module[node.name, "forward"]
        assert len(durations) == node.calls == 2
        assert sum(durations) == pytest.approx(node.forward.latency, rel=1e-9, abs=slack)


def test_top_level_spans_are_the_result_s_spans(result):
    spans = defaultdict(list)
    for span in result.timeline.spans:
        spans[span.kind].append(span.duration)
    assert {k: len(v) for k, v in spans.items()} == {"iteration": 1, "forward": 2, "backward": 2, "step": 1}
    for kind, durations in spans.items():
        assert durations == result.spans[kind]
    iteration = next(s for s in result.timeline.spans if s.kind == "iteration")
    assert iteration.start == 0.0
    for span in result.timeline.spans:  # in order, each within the iteration
        assert 0.0 <= span.start and span.end <= iteration.end + 1e-12
    kinds = [s.kind for s in result.timeline.spans if s.kind != "iteration"]
    assert kinds == ["forward", "backward", "forward", "backward", "step"]


def test_calls_nest_within_the_call_they_ran_in(result):
    check_call_nesting(result, slack=1e-12)


def check_call_nesting(result, slack: float) -> None:
    """Calls in order of start, each within the call it ran in (to ``slack`` seconds)."""
    calls = result.timeline.calls
    assert [c.start for c in calls] == sorted(c.start for c in calls)
    for call in calls:
        if call.parent < 0:
            assert call.path == ""
            continue
        parent = calls[call.parent]
        assert parent.path == result.module(call.path).parent  # no shared modules here
        assert parent.start <= call.start and call.end <= parent.end + slack


def test_recompute_calls_have_their_own_phase():
    result = training_step(checkpointed=True)
    recomputed = defaultdict(float)
    for call in result.timeline.calls:
        if call.phase == "recompute":
            recomputed[call.path] += call.duration
    assert set(recomputed) == {"1.fc1", "1.act", "1.fc2"}
    for path, seconds in recomputed.items():
        assert seconds == pytest.approx(result.module(path).recompute.latency, rel=1e-9, abs=1e-12)
    lanes = lanes_of(json.loads(render_trace(result)))
    assert sorted(e["args"]["module"] for e in lanes["recompute"]) == sorted(["1.fc1", "1.act", "1.fc2"] * 2)
    # each recomputation runs inside a backward pass
    for e in lanes["recompute"]:
        assert any(b["ts"] <= e["ts"] and e["ts"] + e["dur"] <= b["ts"] + b["dur"] for b in lanes["backward"])


def test_the_separate_timing_pass_s_spans_are_taken():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
    result = flopsight.profile(model, torch.ones(2, 4), warm_up=1, clock=flopsight.FakeClock(step=1e-3))
    assert result.metadata.timing.method == "separate"
    calls = result.timeline.calls
    # the timing pass has no counting between the stamps: one fake tick per stamp
    assert [(c.path, c.start, c.duration, c.parent) for c in calls] == [
        ("", 0.001, 0.005, -1), ("0", 0.002, 0.001, 0), ("1", 0.004, 0.001, 0)]
    assert result.module("").forward.latency == 0.005


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_event_spans_add_up_and_nest():
    result = training_step(device="cuda")
    assert result.metadata.timing.clock == "cuda_events"
    # CUDA's elapsed times are float32 milliseconds: a float32 ulp of 1,000 ms is 6e-8 s, and sums of
    # them are off by a few (4e-9 s was seen on an H200): 1 us of slack is still far below any span
    check_durations(result, slack=1e-6)
    check_call_nesting(result, slack=0.0)  # both ends placed from the start: nested exactly
    trace = json.loads(render_trace(result))
    check_chrome_trace(trace)
    nesting(trace)


def test_the_counting_pass_s_collectives_keep_their_place_in_the_timing_pass_s_forward():
    collective = CollectiveSpan("all_reduce", "1", "forward", 5.0, 0.5, 32)  # halfway through the forward
    counting = Timeline(spans=(Span("iteration", 0.0, 10.0), Span("forward", 1.0, 8.0)), collectives=(collective,))
    timing = Timeline(calls=(CallSpan("", "forward", 0.5, 2.0),), spans=(Span("iteration", 0.0, 3.0),
                                                                          Span("forward", 0.5, 2.0)))
    merged = _timeline(counting, timing)
    assert merged.calls == timing.calls and merged.spans == timing.spans
    assert merged.collectives == (collective._replace(start=1.5),)
    # forward calls that do not pair up: no place to put them
    assert _timeline(counting, Timeline(spans=timing.spans * 2)).collectives == ()


def test_calls_past_the_limit_are_dropped_and_counted(monkeypatch):
    monkeypatch.setattr(flopsight.result.timeline, "MAX_CALLS", 5)
    result = training_step(clock=flopsight.FakeClock())
    timeline = result.timeline
    assert len(timeline.calls) == 5 and timeline.calls_dropped == 2 * 11 - 5  # 11 modules, 2 calls each
    assert all(-1 <= c.parent < i for i, c in enumerate(timeline.calls))
    trace = json.loads(render_trace(result))
    assert trace["otherData"]["calls_dropped"] == 17
    # the second forward call was dropped: its top-level span is drawn instead
    forward = lanes_of(trace)["forward"]
    assert [e["name"] for e in forward if e["cat"] == "span"] == ["forward"]
    check_chrome_trace(trace)


# -- JSON -------------------------------------------------------------------------------------------
def test_save_load_save_keeps_the_timeline_byte_for_byte(result, tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    result.save(first)
    loaded = flopsight.load(first)
    loaded.save(second)
    assert first.read_bytes() == second.read_bytes()
    assert loaded.timeline == result.timeline
    columns = json.loads(first.read_text())["timeline"]["calls"]
    assert set(columns) == {"module", "phase", "start", "duration", "parent"}  # columns, paths by index
    assert all(isinstance(i, int) for i in columns["module"])


def test_files_without_a_timeline_still_load_and_render(result):
    for version in (2, 3):
        data = result.to_dict()
        data["schema_version"] = version
        del data["timeline"]
        old = flopsight.ProfileResult.from_dict(data)
        assert old.timeline is None
        trace = json.loads(render_trace(old))
        assert [e for e in trace["traceEvents"] if e["ph"] == "X"] == []
        assert "no timeline" in trace["otherData"]["note"]


def test_a_timeline_with_columns_of_different_lengths_is_rejected(result):
    data = result.to_dict()
    data["timeline"]["calls"]["start"].pop()
    with pytest.raises(ValueError, match="timeline.calls: columns of different lengths"):
        flopsight.ProfileResult.from_dict(data)


# -- the Chrome trace -------------------------------------------------------------------------------
def test_the_trace_is_valid_trace_event_json(trace):
    check_chrome_trace(trace)
    assert trace["otherData"]["ranks"] == [0] and trace["otherData"]["calls_dropped"] == 0


def test_one_process_per_rank_and_a_lane_per_phase(trace):
    names = [(e["name"], e["pid"], e["args"]) for e in trace["traceEvents"] if e["ph"] == "M"]
    assert ("process_name", 0, {"name": "rank 0"}) in names
    lanes = lanes_of(trace)
    assert set(lanes) == {"iteration", "forward", "backward", "step"}
    assert [e["name"] for e in lanes["backward"]] == ["backward"] * 2
    assert [e["name"] for e in lanes["step"]] == ["step"]
    assert {e["tid"] for e in lanes["forward"]} == {LANES["forward"]}


def test_module_spans_nest_on_their_lane_like_the_module_tree(result, trace):
    parent_of = nesting(trace)
    forward = lanes_of(trace)["forward"]
    assert len(forward) == 2 * len(result.modules)
    for e in forward:
        enclosing = parent_of[id(e)]
        expected = result.module(e["args"]["module"]).parent
        assert (enclosing["args"]["module"] if enclosing else None) == expected


def test_span_names_and_args(result, trace):
    events = {e["name"]: e for e in lanes_of(trace)["forward"]}
    assert set(events) == {"Sequential", "0 (Linear)", "1 (Block)", "1.fc1 (Linear)", "1.act (GELU)",
                           "1.fc2 (Linear)", "2 (Block)", "2.fc1 (Linear)", "2.act (GELU)", "2.fc2 (Linear)",
                           "3 (Linear)"}
    block = events["1 (Block)"]["args"]
    node = result.module("1")
    assert block == {"module": "1", "type": "Block", "phase": "forward", "calls": 2, "macs": node.forward.macs,
                     "flops": node.forward.flops}
    assert node.forward.macs == 2 * 32 * (16 * 32 + 32 * 16)  # two calls of 32 rows


def test_trace_durations_are_the_latencies(result, trace):
    total = defaultdict(int)
    for e in lanes_of(trace)["forward"]:
        total[e["args"]["module"]] += ns(e["dur"])
    for path, nanoseconds in total.items():  # each span rounded to whole ns at both ends
        assert abs(nanoseconds - result.module(path).forward.latency * 1e9) <= 2


def test_save_writes_the_trace(result, tmp_path):
    path = tmp_path / "x.trace.json"
    result.save(path)
    assert path.read_text() == render_trace(result)
    check_chrome_trace(json.loads(path.read_text()))


# -- two gloo ranks ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ranks(gloo_scenarios):
    """Both ranks' results of tests/multirank/collectives_worker.py's scenarios (the launch
    tests/test_communication.py reads too)."""
    return rank_results(gloo_scenarios / "collectives")


def test_rank_0_s_trace_has_every_rank_with_its_collectives(ranks):
    rank0 = ranks("ddp")[0]
    assert len(rank0.ranks) == 2
    trace = json.loads(render_trace(rank0))
    check_chrome_trace(trace)
    nesting(trace)
    assert trace["otherData"]["ranks"] == [0, 1]
    for pid in (0, 1):
        lanes = lanes_of(trace, pid)
        assert set(lanes) == {"iteration", "forward", "backward", "step", "communication"}
        reduces = lanes["communication"]
        assert reduces and {e["name"] for e in reduces} == {"all_reduce"}
        assert {(e["args"]["module"], e["args"]["phase"]) for e in reduces} == {("", "backward")}
        # DDP's gradient buckets: all-reduced during the backward pass, which issued them
        (backward,) = lanes["backward"]
        for e in reduces:
            assert ns(backward["ts"]) <= ns(e["ts"]) <= ns(backward["ts"]) + ns(backward["dur"])
        record = rank0.ranks[pid].collectives("backward")[0]
        assert sum(e["args"]["bytes"] for e in reduces) == record.bytes
        assert sum(e["dur"] for e in reduces) == pytest.approx(record.latency * 1e6, abs=1e-3 * len(reduces))


def test_a_collective_issued_in_a_module_lies_within_its_call(ranks):
    for result in ranks("module"):
        (call,) = [c for c in result.timeline.calls if c.path == "1"]
        (collective,) = result.timeline.collectives
        assert (collective.kind, collective.path, collective.bytes) == ("all_reduce", "1", 32)
        assert call.start <= collective.start <= call.end


# -- headless Chromium ------------------------------------------------------------------------------
_LOAD_IN_DEVTOOLS = """(async () => {
  const T = await import("./models/trace/trace.js");
  const model = T.TraceModel.Model.createWithAllHandlers();
  await model.parse(JSON.parse(%s).traceEvents, {metadata: {}, isFreshRecording: false});
  const data = model.parsedTrace(0).data;
  const depth = (node) => 1 + Math.max(0, ...[...node.children].map(depth));
  const threads = [];
  for (const [pid, process] of data.Renderer.processes)
    for (const [tid, thread] of process.threads)
      threads.push([pid, tid, thread.name, thread.entries.length, Math.max(0, ...[...thread.tree.roots].map(depth))]);
  return {generic: data.Meta.traceIsGeneric, warnings: [...data.Warnings.perWarning.keys()],
          processes: [...data.Meta.processNames.entries()].map(([pid, e]) => [pid, e.args.name]), threads};
})()"""


def devtools_view(text: str) -> dict:
    """How Chromium's DevTools trace engine (its Performance panel's) reads a trace file."""
    with Chromium() as browser:
        page = browser.new_page()
        page.navigate("devtools://devtools/bundled/trace_app.html")
        return page.evaluate(_LOAD_IN_DEVTOOLS % json.dumps(text), timeout=60)


def expected_view(trace: dict) -> list[list]:
    """[pid, tid, lane, events, nesting depth] of each lane, from the file itself."""
    parent_of = nesting(trace)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    lanes = defaultdict(lambda: [0, 0])
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            depth, p = 1, parent_of[id(e)]
            while p is not None:
                depth, p = depth + 1, parent_of[id(p)]
            lane = lanes[e["pid"], e["tid"]]
            lane[0], lane[1] = lane[0] + 1, max(lane[1], depth)
    return sorted([pid, tid, names[pid, tid], n, d] for (pid, tid), (n, d) in lanes.items())


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH (apt-get install chromium; .ci/run does)")
def test_chromium_s_trace_engine_reads_every_lane_and_its_nesting(result, ranks):
    for res in (result, ranks("ddp")[0]):
        text = render_trace(res)
        trace = json.loads(text)
        view = devtools_view(text)
        assert view["generic"] and view["warnings"] == []
        assert sorted(view["processes"]) == [[r, f"rank {r}"] for r in trace["otherData"]["ranks"]]
        assert sorted(view["threads"]) == expected_view(trace)


def test_module_spans_carry_their_kernels_when_recorded():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
    result = flopsight.profile(model, torch.ones(2, 4), kernels=True)
    spans = {e["args"]["module"]: e["args"] for e in json.loads(result.render("trace"))["traceEvents"]
             if e.get("cat") == "module"}
    assert "aten::addmm" in spans["0"]["kernels"] and spans["0"]["kernels"]["aten::addmm"]["calls"] == 1
    # the root's device time is its own kernels' and its submodules'
    assert spans[""]["kernel_time_us"] == pytest.approx(result.total.kernel_time["forward"] * 1e6, abs=1e-3)
    plain = flopsight.profile(model, torch.ones(2, 4))
    assert all("kernels" not in e.get("args", {}) for e in json.loads(plain.render("trace"))["traceEvents"])
