"""Profiling leaves the model and torch exactly as it found them, also after an error."""

import pytest
import torch
from models import LeNet
from torch import nn

import flopsight


def bn_model():
    return nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Dropout(0.5), nn.Linear(6, 2))


def snapshot(model):
    """Everything about a model profiling could change."""
    return {
        "training": [m.training for m in model.modules()],
        "state": {k: v.clone() for k, v in model.state_dict().items()},
        "attrs": [sorted(vars(m)) for m in model.modules()],
        "hooks": [
            (len(m._forward_hooks), len(m._forward_pre_hooks), len(m._backward_hooks), len(m._backward_pre_hooks))
            for m in model.modules()
        ],
    }


def assert_same(before, after):
    assert before["training"] == after["training"]
    assert before["attrs"] == after["attrs"]
    assert before["hooks"] == after["hooks"]
    assert before["state"].keys() == after["state"].keys()
    for k in before["state"]:
        assert torch.equal(before["state"][k], after["state"][k]), k


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("timing", ["separate", "subtract"])
def test_profile_leaves_model_rng_and_batchnorm_stats_untouched(train, timing):
    model = bn_model().train(train)
    x = torch.randn(8, 4)
    before, rng = snapshot(model), torch.get_rng_state()
    flopsight.profile(model, x, warm_up=3, timing=timing)
    assert_same(before, snapshot(model))
    assert torch.equal(rng, torch.get_rng_state())


def test_get_model_profile_restores_training_flags_and_prints_only_when_asked(capsys):
    model = bn_model().train()
    model[1].eval()  # mixed flags must come back as they were
    before = snapshot(model)
    flopsight.get_model_profile(model, input_shape=(8, 4), print_profile=False)
    assert_same(before, snapshot(model))
    assert capsys.readouterr().out == ""


def test_every_pass_sees_the_same_random_numbers():
    # dropout in training draws from the RNG: counting and timing passes must agree
    model = nn.Sequential(nn.Dropout(0.5), nn.Linear(4, 4)).train()
    a = flopsight.profile(model, torch.ones(2, 4), warm_up=2)
    b = flopsight.profile(model, torch.ones(2, 4), warm_up=0)
    assert a.total.forward.flops == b.total.forward.flops


class Boom(nn.Module):
    def forward(self, x):
        raise RuntimeError("boom")


class Faulty(nn.Module):
    def __init__(self):
        super().__init__()
        self.ok = nn.Linear(4, 4)
        self.inner = nn.Sequential(nn.Linear(4, 4), Boom())

    def forward(self, x):
        return self.inner(self.ok(x))


@pytest.mark.parametrize("warm_up", [0, 1])
def test_error_in_forward_propagates_naming_the_module_and_leaves_nothing_behind(warm_up):
    model = Faulty()
    before = snapshot(model)
    with pytest.raises(RuntimeError, match="boom") as info:
        flopsight.profile(model, torch.ones(2, 4), warm_up=warm_up)
    notes = getattr(info.value, "__notes__", [])
    assert notes == ["flopsight: raised in module 'inner.1' (Boom)"]
    assert_same(before, snapshot(model))
    # and the profiler works normally afterwards
    assert flopsight.profile(model.ok, torch.ones(2, 4)).total.forward.macs == 2 * 4 * 4


def test_flops_profiler_keeps_counting_after_the_model_raises_and_cleans_up_on_end():
    from flopsight._torch_private import active_dispatch_modes, active_function_modes

    model = Faulty()
    prof = flopsight.FlopsProfiler(model)
    prof.start_profile()
    with pytest.raises(RuntimeError):
        model(torch.ones(2, 4))
    # the caller may catch the error and go on: the profile is still running, and counts
    assert prof.started
    model.ok(torch.ones(2, 4))
    assert prof.get_total_macs() >= 2 * 4 * 4
    prof.end_profile()
    prof.end_profile()
    assert active_dispatch_modes() == [] and active_function_modes() == []
    assert all(len(m._forward_hooks) == 0 for m in model.modules())


def test_caught_exception_inside_the_model_does_not_confuse_the_stack():
    class Tolerant(nn.Module):
        def __init__(self):
            super().__init__()
            self.boom = Boom()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            try:
                self.boom(x)
            except RuntimeError:
                pass
            return self.lin(x)

    result = flopsight.profile(Tolerant(), torch.ones(2, 4))
    assert result.module("lin").forward.macs == 32
    assert result.total.forward.macs == 32
    assert result.module("boom").calls == 1


def test_lifecycle_calls_in_any_order_are_harmless():
    model = LeNet()
    prof = flopsight.FlopsProfiler(model)
    prof.stop_profile()
    prof.end_profile()
    prof.start_profile()
    prof.start_profile()  # restarts
    model(torch.ones(1, 3, 32, 32))
    prof.stop_profile()
    prof.stop_profile()
    assert prof.get_total_macs() == LeNet.expected_macs(1)[""]
    prof.end_profile()
    prof.end_profile()
    assert all(len(m._forward_hooks) == len(m._forward_pre_hooks) == 0 for m in model.modules())
    assert prof.get_total_macs() == LeNet.expected_macs(1)[""]  # still readable after end


def test_native_profiler_start_twice_and_stop_without_start():
    model = nn.Linear(3, 3)
    prof = flopsight.Profiler(model)
    assert prof.stop() is None
    prof.start()
    prof.start()
    model(torch.ones(1, 3))
    result = prof.stop()
    assert result.total.forward.macs == 9 and prof.stop() is result
    with pytest.raises(RuntimeError, match="nothing profiled"):
        _ = flopsight.Profiler(model).result


def test_compiled_model_is_counted_eagerly_and_stays_compiled():
    compiles, graph_calls = [], []

    def backend(gm, example_inputs):  # a backend that records compiles and graph runs
        compiles.append(gm)

        def run(*args):
            graph_calls.append(1)
            return gm.forward(*args)

        return run

    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    compiled = torch.compile(model, backend=backend)
    x = torch.ones(4, 8)
    compiled(x)
    result = flopsight.profile(compiled, x, warm_up=1)
    assert result.module("0").forward.macs == 4 * 8 * 8 and result.total.forward.macs == 4 * 8 * 8 + 4 * 8 * 2
    assert result.total.forward.latency > 0  # timed as a whole through the compiled wrapper
    before = len(graph_calls)
    compiled(x)
    assert len(graph_calls) == before + 1  # still runs the compiled graph afterwards
    assert len(compiles) == 1  # and was never recompiled


def test_a_compiled_models_timed_call_is_never_its_first():
    compiles, graph_calls = [], []

    def backend(gm, example_inputs):
        compiles.append(gm)

        def run(*args):
            graph_calls.append(len(compiles))  # which compile's graph ran
            return gm.forward(*args)

        return run

    compiled = torch.compile(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), backend=backend)
    x = torch.ones(4, 8)
    # warm_up=1: the counting pass ran the eager module, so the compiled one is warmed up on its
    # own, twice (reduce-overhead records its CUDA graph on the second call), before the timed call
    flopsight.profile(compiled, x, warm_up=1)
    assert len(compiles) == 1 and len(graph_calls) == 3
    graph_calls.clear()
    flopsight.profile(compiled, x, warm_up=0)  # asked for: the first call timed, nothing before it
    assert len(graph_calls) == 1


def test_profiler_refuses_a_compiled_model_instead_of_deoptimizing_it():
    compiled = torch.compile(nn.Linear(2, 2), backend="eager")
    with pytest.raises(ValueError, match="model: a torch.compile'd module cannot be profiled around your own calls"):
        flopsight.Profiler(compiled)
    with pytest.raises(ValueError, match="profile model._orig_mod here"):
        flopsight.FlopsProfiler(compiled).start_profile()


SHOWN_ONCE = r'''
import sys, warnings
import torch, torch._dynamo  # torch's own first import of dynamo makes Python forget what it showed: done first
# and so does its first compile (torch.overrides builds its tables under catch_warnings): done first too,
# since profiling a compiled model warms it up with calls of its own, after the compile
torch.compile(torch.nn.Linear(1, 1), backend="eager")(torch.ones(1))
import flopsight
from torch import nn


class Old(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, x):
        warnings.warn("Old.forward is deprecated", FutureWarning)
        return self.fc(x)


model, x = Old(), torch.ones(1, 2)
model(x)
flopsight.profile(model, x, warm_up=2)
with flopsight.Profiler(model):
    model(x)
flopsight.get_model_profile(model, args=[x], print_profile=False)
flopsight.profile(torch.compile(model, backend="eager"), x)
'''


def test_a_warning_the_model_issues_every_call_is_still_shown_once():
    """Python shows a warning once per place by default; profiling must not make it forget
    (entering warnings.catch_warnings, or a subprocess, does), or every pass prints it again."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", SHOWN_ONCE], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("FutureWarning: Old.forward is deprecated") == 1, proc.stderr[-3000:]


def _native_built() -> bool:
    from flopsight.capture.backends.native.recorder import RECORDER

    return RECORDER.load(quiet=True) is not None


@pytest.mark.parametrize("backend", ["python", pytest.param("native", marks=pytest.mark.skipif(
    "not _native_built()", reason="the native backend cannot be built here"))])
def test_a_compiled_submodule_runs_the_hooks_without_dynamo_tracing_them(backend):
    """Inside a compiled region dynamo traces the global module hooks: flopsight's must not
    make it warn about (and break its graph at) the clock and autograd reads in them."""
    import warnings

    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    model[0] = torch.compile(model[0], backend="eager")
    x = torch.ones(1, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = flopsight.profile(model, x, backend=backend)
        with flopsight.Profiler(model, backend=backend) as prof:
            model(x)
    traced = [str(w.message) for w in caught if "Dynamo does not know how to trace" in str(w.message)]
    assert traced == []
    assert result.total.forward.macs == prof.result.total.forward.macs == 2 * 3  # Linear(2, 3), one row


@pytest.mark.parametrize("setting,expected", [("tf32", "high"), ("ieee", "highest")])
def test_torchs_new_fp32_precision_api_is_read_and_mixing_it_with_the_legacy_one_does_not_crash(setting, expected):
    # torch.get_float32_matmul_precision() raises once the new per-backend API was used after
    # the legacy one: a profile must still finish, and record the precision the new API set
    before = torch.backends.cuda.matmul.fp32_precision
    torch.set_float32_matmul_precision("high")  # the legacy API first
    try:
        torch.backends.cuda.matmul.fp32_precision = setting
        result = flopsight.profile(torch.nn.Linear(4, 2), torch.ones(1, 4))
        assert result.metadata.float32_matmul_precision == expected
    finally:
        torch.backends.cuda.matmul.fp32_precision = before
        torch.set_float32_matmul_precision("highest")


def test_a_compiled_submodule_is_warmed_up_named_and_timed_as_one_region():
    compiles = []

    def backend(gm, example_inputs):
        compiles.append(1)
        return gm.forward

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 8)
            self.b = torch.compile(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), backend=backend)

        def forward(self, x):
            return self.b(self.a(x))

    model = Net()
    result = flopsight.profile(model, torch.ones(2, 8), kernels=True)
    # compiled before the timed pass: its kernels (here the CPU's ops) hold no compilation
    assert len(compiles) == 1
    assert not any("dynamo" in name for name in result.module("b").record.kernels.get("forward", {}))
    assert result.metadata.compiled == ("b",)
    assert result.module("b._orig_mod.0").forward.macs == 2 * 8 * 8  # counted on the eager module
    line = next(line for line in result.render("text").splitlines() if line.startswith("ran compiled"))
    assert line.split(":", 1)[1].strip() == "'b'"
    assert flopsight.ProfileResult.from_dict(result.to_dict()).metadata.compiled == ("b",)


def test_no_mark_of_a_global_hook_is_left_behind():
    # torch keeps a mark for a global forward hook with keyword arguments that removing the
    # hook leaves; while it is there torch believes a global hook is installed, and every call
    # of a compiled module warns. Sources that read each call's arguments (memory) install one.
    from torch.nn.modules import module as torch_module

    model = nn.Sequential(nn.Linear(2, 2))
    flopsight.profile(model, torch.ones(1, 2), memory=True, kernels=True)
    assert not torch_module._has_any_global_hook()


def _nested(depth: int) -> nn.Module:
    model = nn.Linear(2, 2)
    for _ in range(depth):
        model = nn.Sequential(model)
    return model


def test_a_model_as_deep_as_plain_torch_runs_is_profiled_and_the_limit_put_back():
    import sys

    limit = sys.getrecursionlimit()
    frame, used = sys._getframe(), 0
    while frame is not None:  # pytest's own frames
        frame, used = frame.f_back, used + 1
    depth = (limit - used) // 4 - 10  # a plain call takes about 4 frames per level: it runs
    while True:  # Python 3.12 also bounds the C stack, which each module call uses: less deep there
        model = _nested(depth)
        try:
            model(torch.ones(1, 2))
            break
        except RecursionError:
            depth -= 10
    assert flopsight.profile(model, torch.ones(1, 2)).total.forward.macs == 4  # 1 x 2 x 2
    with flopsight.Profiler(model) as prof:
        model(torch.ones(1, 2))
    assert prof.result.module("0" + ".0" * (depth - 1)).forward.macs == 4
    assert sys.getrecursionlimit() == limit
