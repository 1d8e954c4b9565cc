"""A forward timed as a device's (``timing.method == "device"``, docs/conventions/timing.md):
module times from their kernels' device time, the forward's from uninstrumented calls, the
device's busy time and idle share. Run on the CPU through ``FakeDeviceClock``, whose simulated
kernels are CUPTI-shaped (tied to their launching op by correlation id), and on recorded
traces of two overlapping streams."""

import json
import math

import torch
from helpers import tiny_gpt2
from torch import nn

import flopsight
from flopsight.analysis.kernel_profile import device_busy
from flopsight.capture.runtime.timing import FakeDeviceClock
from flopsight.capture.sources.kernels import TraceEvent, attribute, simulated_kernels
from flopsight.result import ProfileResult


class Probe(nn.Module):
    """Notes, at each forward, whether anything observes it: torch's global module hooks
    (a profiler's call tracking) and torch.profiler."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.seen: list[tuple[bool, bool]] = []

    def forward(self, x):
        hooks = bool(nn.modules.module._global_forward_pre_hooks or nn.modules.module._global_forward_hooks)
        self.seen.append((hooks, torch.autograd.profiler._is_profiler_enabled))
        return self.fc(x).relu()


def net():
    return nn.Sequential(nn.Linear(32, 16), nn.GELU(), Probe(), nn.Sequential(nn.Linear(16, 8), nn.Tanh()))


def _forward(model, x, **kw):
    # kernels a tenth of their op's host time: the busy time stays well inside the forward's
    with torch.no_grad():
        return flopsight.profile(model, x, clock=FakeDeviceClock(kernel_share=0.1), **kw)


def test_module_times_are_their_kernels_and_the_forward_an_uninstrumented_calls():
    model, x = net(), torch.randn(4, 32)
    r = _forward(model, x, warm_up=2, repeat=3)
    assert r.metadata.timing.method == "device" and r.metadata.timing.clock == "fake_device"
    # counting pass (hooks), one warm-up (plain), the kernel pass (hooks and torch.profiler),
    # then the 3 timed calls: nothing observes them
    assert model[2].seen == [(True, False), (False, False), (True, True)] + [(False, False)] * 3
    kernels = r.kernels
    assert kernels.source == "cuda" and kernels.busy > 0
    for node in r.walk():
        if node.name == "":
            continue
        own = node.record.kernel_time.get("forward", 0.0)
        # a module's time is its own kernels' device time (its submodules' summed in)
        assert math.isclose(node.self["forward"].latency, own, rel_tol=1e-9, abs_tol=1e-15)
    top = sum(r.module(c).inclusive["forward"].latency for c in ("0", "1", "2", "3"))
    root_own = r.module("").record.kernel_time.get("forward", 0.0)
    # one simulated stream: the kernels never overlap, so the busy time is their sum
    assert math.isclose(top + root_own, kernels.busy, rel_tol=1e-9)
    assert math.isclose(kernels.seconds, kernels.busy, rel_tol=1e-9)
    # the forward's latency is the median of the 3 uninstrumented calls; the rest of it is idle
    assert r.samples.count == 3
    assert r.total.forward.latency >= top
    busy = device_busy(r)
    assert math.isclose(busy.idle_share, 1 - kernels.busy / r.total.forward.latency, rel_tol=1e-9)


def test_counts_are_the_same_as_on_the_host_clock():
    model, x = net(), torch.randn(4, 32)
    device, host = _forward(model, x, warm_up=1), flopsight.profile(model, x, warm_up=1)
    for a, b in zip(device.walk(), host.walk()):
        assert (a.name, a.inclusive["forward"].macs, a.inclusive["forward"].flops) == \
               (b.name, b.inclusive["forward"].macs, b.inclusive["forward"].flops)


def test_the_reports_say_busy_and_idle_and_json_keeps_them(tmp_path):
    model = tiny_gpt2()
    r = _forward(model, torch.randint(0, 64, (2, 8)), warm_up=1)
    text = r.render("text")
    line = next(ln for ln in text.splitlines() if ln.startswith("fwd GPU busy"))
    assert line.rstrip().endswith("idle)")
    busy = device_busy(r)
    assert f"{round(100 * busy.idle_share, 2):g}% idle" in line
    back = ProfileResult.from_dict(json.loads(r.render("json")))
    assert back.kernels.busy == r.kernels.busy and back.metadata.timing.method == "device"
    assert device_busy(back) == busy


def test_one_pass_timing_keeps_events_at_module_calls():
    r = _forward(net(), torch.randn(4, 32), warm_up=1, timing="subtract")
    assert r.metadata.timing.method == "single" and device_busy(r) is None


def test_generate_is_not_timed_as_one_forward():
    model = tiny_gpt2().eval()
    r = _forward(model, torch.randint(0, 64, (1, 4)), warm_up=1, mode="generate",
                 kwargs={"max_new_tokens": 2, "do_sample": False})
    assert r.metadata.timing.method == "separate" and device_busy(r) is None


def test_while_another_torch_profiler_runs_modules_keep_their_events():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        r = _forward(net(), torch.randn(4, 32), warm_up=1)
    assert r.metadata.timing.method == "separate" and device_busy(r) is None


def test_simulated_kernels_are_launched_by_leaf_operators():
    # aten::linear calls aten::addmm: only the leaf launches; our ranges and the autograd
    # engine's launch nothing; each kernel starts at its launch and lasts half its op's time
    ops = [TraceEvent("flopsight/call/0", 1, 0, 400), TraceEvent("aten::mm", 1, 0, 100, corr=1),
           TraceEvent("aten::linear", 1, 200, 300, corr=3), TraceEvent("aten::addmm", 1, 210, 290, corr=4),
           TraceEvent("autograd::engine::evaluate_function: MmBackward0", 2, 0, 50, corr=5)]
    kernels = simulated_kernels(ops, 0.5)
    assert [(k.name, k.start, k.end, k.linked, k.on_device) for k in kernels] == [
        ("sim::mm", 0, 50, 1, True), ("sim::addmm", 210, 250, 4, True)]


def test_busy_time_counts_overlapping_streams_once():
    # a recorded trace's shape: call 0 launches a gemm on stream 7 (0-100 ns) and an all-reduce
    # on stream 9 (50-250 ns) that overlaps it; busy = union = 250 ns, kernel time = 300 ns
    events = [TraceEvent("flopsight/call/0", 1, 0, 40),
              TraceEvent("aten::mm", 1, 1, 10, corr=1), TraceEvent("c10d::allreduce_", 1, 11, 20, corr=2),
              TraceEvent("gemm", 7, 0, 100, linked=1, on_device=True),
              TraceEvent("ncclAllReduce", 9, 50, 250, linked=2, on_device=True)]
    times = attribute(events, lambda i: ("enc", "forward"), outside_to_root=False, device=True)
    assert math.isclose(times.seconds, 300e-9) and math.isclose(times.busy, 250e-9)


class CountingClock(FakeDeviceClock):
    """A fake device clock that counts the device stamps taken on it."""

    def __init__(self):
        super().__init__()
        self.taken = 0

    def stamp(self):
        self.taken += 1
        return super().stamp()


def _step(depth: int, clock):
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(depth)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with flopsight.Profiler(model, optimizer=opt, clock=clock) as prof:
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    return prof.result


def test_a_training_step_on_a_device_is_stamped_at_its_phase_boundaries_only():
    shallow, deep = CountingClock(), CountingClock()
    r, r_deep = _step(1, shallow), _step(20, deep)
    assert r.metadata.timing.method == "phases"
    # 61 module calls against 4: the same device stamps, the forward's, the backward's, the
    # step's and the iteration's boundaries; none per module call and none per op
    assert shallow.taken == deep.taken <= 8
    assert r_deep.metadata.timing.method == "phases" and r_deep.metadata.backend == "native"
    host = _step(20, None)

    def counts(r):
        return [(n.name, n.inclusive["forward"].macs, n.inclusive["backward"].macs) for n in r.walk()]

    assert counts(r_deep) == counts(host) and len(counts(host)) == 61
    it = r_deep.iteration
    assert it.forward.latency > 0 and it.backward.latency > 0 and it.step.latency > 0
    # the modules inside the forward were timed on the host, and placed on the timeline inside it
    assert r_deep.module("0").inclusive["forward"].latency > 0
    forward = next(s for s in r_deep.timeline.spans if s.kind == "forward")
    assert all(c.start >= forward.start - 1e-3 for c in r_deep.timeline.calls)


def test_with_kernels_the_anatomy_computes_on_the_gpus_time():
    # kernels=True on a device: each phase's compute is its kernels' device time (what the GPU
    # computed), not its ops' host time (their launches); the simulated kernels last half
    # their op's host time, so the two differ
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with flopsight.Profiler(model, optimizer=opt, clock=FakeDeviceClock(), kernels=True) as prof:
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    r = prof.result
    a = r.iteration.anatomy
    for phase, part in (("forward", a.forward), ("backward", a.backward), ("step", a.step)):
        kernels = sum(t for m in r.modules.values() for t in m.op_kernel_time.get(phase, {}).values())
        host = sum(s.latency for m in r.modules.values() for s in m.ops.get(phase, {}).values())
        wall = math.fsum(r.spans[phase])
        assert kernels > 0 and not math.isclose(kernels, host)
        assert math.isclose(part, min(kernels, wall), rel_tol=1e-9)
