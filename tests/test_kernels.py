"""Kernels per module (``kernels=True``): the attribution of a trace's kernels to module
calls, spans and backward nodes, on synthetic traces that stand for CUDA ones (kernels tied to
ops by correlation id, a backward pass on a thread of its own), and on real CPU runs."""

import dataclasses

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import flopsight
from flopsight.capture.sources.kernels import BACKWARD_NODE, TraceEvent, attribute
from flopsight.result.kernels import Kernel, KernelSummary

CALLS = {0: ("enc", "forward"), 1: ("enc.fc", "forward"), 2: ("enc.fc", "recompute")}


def call_of(i):
    return CALLS[i]


def kernels_by_place(times):
    out = {}
    for (path, phase, name, _), (calls, seconds) in times.kernels.items():
        acc = out.setdefault((path, phase, name), [0, 0.0])
        acc[0] += calls
        acc[1] += seconds
    return {k: tuple(v) for k, v in out.items()}


def test_cuda_kernels_follow_the_launching_op_into_its_module_call():
    # thread 1 runs the forward: enc (call 0) calls enc.fc (call 1), whose aten::mm (corr 5)
    # launches "gemm" (2000 ns on the GPU); enc's own aten::add (corr 6) launches "add".
    events = [
        TraceEvent("flopsight/call/0", 1, 0, 100),
        TraceEvent("flopsight/call/1", 1, 10, 50),
        TraceEvent("aten::linear", 1, 12, 40, corr=4),
        TraceEvent("aten::mm", 1, 14, 30, seq=7, corr=5),
        TraceEvent("aten::add", 1, 60, 70, corr=6),
        TraceEvent("gemm", 0, 200, 2200, linked=5, on_device=True),
        TraceEvent("add_kernel", 0, 2300, 2400, linked=6, on_device=True),
    ]
    times = attribute(events, call_of, outside_to_root=False, device=True)
    assert kernels_by_place(times) == {("enc.fc", "forward", "gemm"): (1, 2e-6),
                                       ("enc", "forward", "add_kernel"): (1, 1e-7)}
    # the ops above the kernel, innermost first: what the operator table looks up
    assert ("enc.fc", "forward", "gemm", ("aten.mm", "aten.linear")) in times.kernels
    assert times.unassigned == {} and times.source == "cuda"


def test_a_kernel_launched_by_compiled_code_with_no_op_around_it_is_its_calls():
    # a compiled region launches its Triton kernels itself: the innermost range is our call's
    events = [TraceEvent("flopsight/call/1", 1, 10, 50, corr=3),
              TraceEvent("triton_poi_fused_relu_0", 0, 60, 70, linked=3, on_device=True)]
    times = attribute(events, call_of, outside_to_root=False, device=True)
    assert kernels_by_place(times) == {("enc.fc", "forward", "triton_poi_fused_relu_0"): (1, 1e-8)}
    assert ("enc.fc", "forward", "triton_poi_fused_relu_0", ()) in times.kernels  # no op above it


def test_backward_on_its_own_thread_goes_to_the_module_whose_forward_made_the_node():
    # The forward ran on thread 1, where aten::mm took sequence number 7. CUDA's backward runs
    # on thread 2, whose own counter also reached 7 for an op the backward made there: the
    # node (seq 7, forward thread 1) must find thread 1's op, not thread 2's.
    events = [
        TraceEvent("flopsight/call/1", 1, 10, 50),
        TraceEvent("aten::mm", 1, 14, 30, seq=7),
        TraceEvent(BACKWARD_NODE + "MmBackward0", 2, 1000, 1100, seq=7, fwd_thread=1),
        TraceEvent("aten::mm", 2, 1010, 1050, seq=7, corr=11),  # thread 2's own counter, a backward op
        TraceEvent(BACKWARD_NODE + "torch::autograd::AccumulateGrad", 2, 1200, 1300),
        TraceEvent("aten::add_", 2, 1210, 1290, corr=12),
        TraceEvent("mm_kernel", 0, 3000, 3500, linked=11, on_device=True),
        TraceEvent("add_kernel", 0, 3600, 3700, linked=12, on_device=True),
    ]
    times = attribute(events, call_of, outside_to_root=False, device=True)
    # the parameter's gradient accumulation is the root's backward
    assert kernels_by_place(times) == {("enc.fc", "backward", "mm_kernel"): (1, 5e-7),
                                       ("", "backward", "add_kernel"): (1, 1e-7)}


def test_recomputed_forward_is_its_call_and_its_nodes_backward_is_that_module():
    # activation checkpointing: during backward (node seq 3), enc.fc is called again (call 2,
    # phase recompute); the op it runs makes node 9, whose backward is enc.fc's
    events = [
        TraceEvent("flopsight/call/0", 1, 0, 100),
        TraceEvent("aten::mm", 1, 10, 20, seq=3),
        TraceEvent(BACKWARD_NODE + "CheckpointFunctionBackward", 1, 200, 400, seq=3, fwd_thread=1),
        TraceEvent("flopsight/call/2", 1, 210, 250),
        TraceEvent("aten::mm", 1, 215, 240, seq=9, corr=21),
        TraceEvent(BACKWARD_NODE + "MmBackward0", 1, 300, 380, seq=9, fwd_thread=1),
        TraceEvent("aten::mm", 1, 310, 370, corr=22),
        TraceEvent("k_recompute", 0, 500, 600, linked=21, on_device=True),
        TraceEvent("k_backward", 0, 700, 900, linked=22, on_device=True),
    ]
    times = attribute(events, call_of, outside_to_root=False, device=True)
    assert kernels_by_place(times) == {("enc.fc", "recompute", "k_recompute"): (1, 1e-7),
                                       ("enc.fc", "backward", "k_backward"): (1, 2e-7)}


def test_what_runs_outside_the_model_is_unassigned_or_the_roots():
    events = [
        TraceEvent("aten::randn", 1, 0, 10, corr=1),  # user code before the model
        TraceEvent("flopsight/phase/step", 1, 20, 60),
        TraceEvent("aten::add_", 1, 25, 40, corr=2),
        TraceEvent(BACKWARD_NODE + "SumBackward0", 1, 70, 90, seq=4, fwd_thread=1),  # a loss made outside
        TraceEvent("aten::fill_", 1, 75, 85, corr=3),
        TraceEvent("k1", 0, 100, 110, linked=1, on_device=True),
        TraceEvent("k2", 0, 120, 150, linked=2, on_device=True),
        TraceEvent("k3", 0, 160, 170, linked=3, on_device=True),
        TraceEvent("orphan", 0, 180, 190, linked=99, on_device=True),  # no CPU op in the trace
    ]
    span = attribute(events, call_of, outside_to_root=False, device=True)
    assert kernels_by_place(span) == {("", "step", "k2"): (1, 3e-8)}
    assert {k: tuple(v) for k, v in span.unassigned.items()} == {"k1": (1, 1e-8), "k3": (1, 1e-8),
                                                                  "orphan": (1, 1e-8)}
    # the profiled call is the model's own method: what runs outside its calls is the root's
    own = attribute(events, call_of, outside_to_root=True, device=True)
    assert set(kernels_by_place(own)) == {("", "forward", "k1"), ("", "step", "k2")}
    assert pytest.approx(span.seconds) == own.seconds == pytest.approx(6e-8)


def test_cpu_kernels_are_the_ops_self_times():
    # aten::linear (0..40) calls aten::t (2..6) and aten::addmm (8..38), which calls aten::copy_ (10..14)
    events = [
        TraceEvent("flopsight/call/1", 1, 0, 50),
        TraceEvent("aten::linear", 1, 0, 40),
        TraceEvent("aten::t", 1, 2, 6),
        TraceEvent("aten::addmm", 1, 8, 38),
        TraceEvent("aten::copy_", 1, 10, 14),
    ]
    times = attribute(events, call_of, outside_to_root=False, device=False)
    # self times: linear 40 - 4 - 30 = 6, t 4, addmm 30 - 4 = 26, copy_ 4 (ns)
    assert kernels_by_place(times) == {("enc.fc", "forward", "aten::linear"): (1, 6e-9),
                                       ("enc.fc", "forward", "aten::t"): (1, 4e-9),
                                       ("enc.fc", "forward", "aten::addmm"): (1, 26e-9),
                                       ("enc.fc", "forward", "aten::copy_"): (1, 4e-9)}
    assert times.source == "cpu"


# -- real runs on the CPU -------------------------------------------------------------------
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def test_profile_records_each_modules_kernels_and_the_op_tables_kernel_time():
    model = Net()
    result = flopsight.profile(model, torch.randn(4, 16), kernels=True)
    assert result.kernels.source == "cpu" and result.kernels.unassigned == {}
    fc1 = result.module("fc1").record
    assert "aten::addmm" in fc1.kernels["forward"] and fc1.kernels["forward"]["aten::addmm"].calls == 1
    # the matmul's time is the counted op's: aten.addmm, a row of the operator table
    assert set(fc1.op_kernel_time["forward"]) >= {"aten.addmm"}
    assert fc1.op_kernel_time["forward"]["aten.addmm"] >= fc1.kernels["forward"]["aten::addmm"].seconds
    assert "aten::relu" in result.module("act").record.kernels["forward"]
    # inclusive device time: the root's is every module's, which is every kernel's
    assert result.total.kernel_time["forward"] == pytest.approx(result.kernels.seconds)
    assert result.total.kernel_time["forward"] == pytest.approx(
        sum(result.module(p).kernel_time["forward"] for p in ("fc1", "act", "fc2")), rel=0.5)
    assert flopsight.ProfileResult.from_dict(result.to_dict()) == result
    # off by default: nothing recorded, nothing in the file
    plain = flopsight.profile(model, torch.randn(4, 16))
    assert plain.kernels is None and plain.total.kernel_time == {} and plain.to_dict()["kernels"] is None


def test_a_training_step_charges_backward_and_step_kernels():
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 16)
    with flopsight.Profiler(model, optimizer=opt, kernels=True) as prof:
        model(x).sum().backward()
        opt.step()
    result = prof.result
    fc2 = result.module("fc2").record.kernels
    assert "aten::mm" in fc2["backward"]  # AddmmBackward0's gradient matmuls
    assert "aten::threshold_backward" in result.module("act").record.kernels["backward"]
    assert result.total.kernel_time["step"] > 0  # SGD's updates, at the root
    # the loss (sum) and its backward node were made outside the model: nobody's
    assert "aten::sum" in result.kernels.unassigned


def test_checkpointed_module_has_recompute_kernels():
    class Checkpointed(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Net()

        def forward(self, x):
            return checkpoint(self.inner, x, use_reentrant=False)

    model = Checkpointed()
    with flopsight.Profiler(model, kernels=True) as prof:
        model(torch.randn(4, 16, requires_grad=True)).sum().backward()
    fc1 = prof.result.module("inner.fc1").record.kernels
    assert {"forward", "recompute", "backward"} <= set(fc1)
    assert "aten::addmm" in fc1["recompute"]


def test_ignored_modules_kernels_are_their_parents():
    result = flopsight.profile(Net(), torch.randn(4, 16), kernels=True, ignore_modules=[nn.ReLU])
    assert "aten::relu" in result.module("").record.kernels["forward"]


def test_kernels_refuses_a_running_torch_profiler_before_the_model_runs():
    calls = []
    model = Net()
    model.register_forward_hook(lambda *a: calls.append(1))
    with torch.profiler.profile():
        with pytest.raises(RuntimeError, match="kernels: torch.profiler is already running"):
            flopsight.profile(model, torch.randn(4, 16), kernels=True)
    assert calls == []
    with pytest.raises(TypeError, match="kernels: expected a bool"):
        flopsight.Profiler(model, kernels="yes")


def test_kernel_summary_round_trips():
    s = KernelSummary("cuda", 0.5, {"memset": Kernel(2, 0.01)})
    assert KernelSummary.from_dict(s.to_dict()) == s
    assert s.unassigned_share == pytest.approx(0.02)


def test_text_report_has_the_device_column_and_the_kernels_per_module():
    result = flopsight.profile(Net(), torch.randn(4, 16), kernels=True)
    text = result.render("text", ops=3)
    assert "Kernels per GPU" in text and "CPU operators, each by its self time" in text
    section = text[text.index("Kernels per GPU"):]
    assert "fc1 (Linear), fwd:" in section and "aten::addmm" in section
    header = next(line for line in text.splitlines() if line.strip().startswith("operator "))
    assert header.split()[-1] == "device"
    # not asked for: neither appears (DeepSpeed's report unchanged)
    plain = flopsight.profile(Net(), torch.randn(4, 16)).render("text", ops=3)
    assert "Kernels per" not in plain and "device" not in plain.split("Operator Profile")[1].splitlines()[5]


def test_operators_that_make_the_host_wait_are_named_on_cuda():
    from flopsight.analysis.syncs import host_syncs

    class Router(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = nn.Linear(16, 4)

        def forward(self, x):
            scores = self.gate(x)
            picked = (scores > 0).nonzero()
            return scores.sum() * picked.shape[0] / max(float(scores.max()), 1.0)

    result = flopsight.profile(Router(), torch.randn(4, 16))
    assert [(s.path, s.op, s.calls) for s in host_syncs(result)] == [("", "aten._local_scalar_dense", 1),
                                                                       ("", "aten.nonzero", 1)]
    # the summary names them for a CUDA run; on the CPU nothing waits
    assert "host syncs" not in result.render("text")
    on_gpu = result.updated(metadata=dataclasses.replace(result.metadata, device_type="cuda", device="cuda:0"))
    line = next(line for line in on_gpu.render("text").splitlines() if line.startswith("host syncs"))
    assert "2 calls: aten._local_scalar_dense x1 in '<root>' (fwd), aten.nonzero x1 in '<root>' (fwd)" in line


def test_one_name_kernels_and_the_old_ones_still_read():
    """``kernels=True`` turns kernels per module on; ``device_time=True`` (its old name) still
    does, with a DeprecationWarning; a file with ``op_device_time`` loads into ``op_kernel_time``."""
    from flopsight.result.records import ModuleStats

    with pytest.warns(DeprecationWarning, match="device_time= is now kernels="):
        result = flopsight.profile(Net(), torch.randn(4, 16), device_time=True)
    assert result.kernels is not None and result.total.kernel_time["forward"] > 0
    old = result.module("fc1").record.to_dict()
    old["op_device_time"] = old.pop("op_kernel_time")
    assert ModuleStats.from_dict(old).op_kernel_time == result.module("fc1").record.op_kernel_time
