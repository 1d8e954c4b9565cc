"""The native counting backend against the Python one: the same numbers, the same messages.

Every test here runs once per backend (``backend`` fixture, see conftest.py); the comparisons
also profile with the other backend explicitly.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import warnings

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import flopsight
from flopsight.capture.backends.native.build import cache_folder
from flopsight.capture.backends.native.recorder import RECORDER

NATIVE = RECORDER.load(quiet=True) is not None
needs_native = pytest.mark.skipif(not NATIVE, reason="the native backend cannot be built here")


def counts(result) -> dict:
    """(path, phase) -> (MACs, FLOPs), and (path, phase, op) -> (calls, MACs, FLOPs, bytes
    moved) of the ops that cost. Free ops are left out: a dispatch mode makes torch run some
    of its own (it detaches the outputs autograd saves; its tensor-subclass branches reshape
    and copy differently), which a plain run, what the native recorder sees, does not. For
    the same reason the autograd engine adds two gradients of a tensor out of place under a
    mode (``aten.add``) and in place in a plain run (``aten.add_``): one name here."""
    out = {}
    for path, m in result.modules.items():
        for phase, stats in m.phases.items():
            out[(path, phase)] = (stats.macs, stats.flops)
        for phase, ops in m.ops.items():
            for op, stats in ops.items():
                if stats.macs or stats.flops:
                    values = (stats.calls, stats.macs, stats.flops, m.bytes_moved.get(phase, {}).get(op, 0))
                    key = (path, phase, "aten.add" if phase == "backward" and op == "aten.add_" else op)
                    out[key] = tuple(a + b for a, b in zip(out.get(key, (0, 0, 0, 0)), values))
    return out


def both(run) -> tuple[dict, dict]:
    """``run(backend)`` -> result, on each backend: (python counts, native counts)."""
    python, native = run("python"), run("native")
    assert python.metadata.backend == "python" and native.metadata.backend == "native"
    return counts(python), counts(native)


class Cells(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm, self.gru = nn.LSTMCell(8, 8), nn.GRUCell(8, 8)

    def forward(self, x):
        h = c = g = torch.zeros_like(x)
        for _ in range(4):
            h, c = self.lstm(x, (h, c))
            g = self.gru(h, g)
        return g


class Checkpointed(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(8, 16)
        self.block = nn.Sequential(nn.Linear(16, 16), nn.GELU(), nn.Linear(16, 16))
        self.tail = nn.Linear(16, 2)

    def forward(self, x):
        return self.tail(checkpoint(self.block, self.head(x), use_reentrant=False))


def lenet():
    return nn.Sequential(nn.Conv2d(1, 6, 5), nn.Tanh(), nn.AvgPool2d(2), nn.Conv2d(6, 16, 5), nn.Tanh(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(256, 10))


def bert():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64)
    return transformers.BertForSequenceClassification(config)


TRAINING = [
    pytest.param(lenet, lambda: torch.randn(2, 1, 28, 28), id="lenet"),
    pytest.param(Cells, lambda: torch.randn(3, 8), id="lstm-gru-cells"),
    pytest.param(Checkpointed, lambda: torch.randn(4, 8), id="checkpointed"),
    pytest.param(bert, lambda: torch.randint(0, 100, (2, 12)), id="bert"),
]


@needs_native
@pytest.mark.parametrize("make, inputs", TRAINING)
def test_a_training_step_counts_the_same_on_both_backends(make, inputs):
    """Forward, backward (charged to the forward's modules through sequence numbers), the
    recompute of activation checkpointing and the optimizer step: equal per module, phase and op."""

    def run(backend):
        torch.manual_seed(0)
        model, x = make(), inputs()
        opt = torch.optim.AdamW(model.parameters())
        with flopsight.Profiler(model, optimizer=opt, backend=backend) as prof:
            out = model(x)
            (out.logits if hasattr(out, "logits") else out).float().sum().backward()
            opt.step()
        return prof.result

    python, native = both(run)
    assert native == python


@needs_native
@pytest.mark.parametrize("make, inputs", TRAINING[:2] + TRAINING[3:])
def test_a_forward_on_meta_counts_the_same_on_both_backends(make, inputs):
    """Meta kernels written in Python run aten ops inside the op: counted once, not twice."""

    def run(backend):
        torch.manual_seed(0)
        model = make().to("meta")
        x = inputs().to("meta")
        return flopsight.profile(model, x, warm_up=0, backend=backend)

    python, native = both(run)
    assert native == python and any(v[0] for v in native.values())


class Tricky(nn.Module):
    """Module calls the native hooks must replay as Python's hooks see them: one norm at two
    paths, a child whose exception the parent catches (the child never ends), a call made on
    another thread and a recursive call."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)
        self.b.norm = self.a.norm = nn.LayerNorm(8)
        self.fails = nn.Linear(3, 3)

    def forward(self, x, depth=1):
        x = self.a.norm(self.a(x))
        try:
            self.fails(x)  # 8 features into a 3-feature layer: raises
        except RuntimeError:
            pass
        out = []
        worker = threading.Thread(target=lambda: out.append(self.b(x)))
        worker.start()
        worker.join()
        x = self.b.norm(out[0])
        return self(x, depth - 1) if depth else x


@needs_native
def test_the_native_module_hooks_see_the_calls_python_sees():
    """The C++ module hooks replay the same calls (shared paths, abandoned children, threads,
    recursion, a profile nested inside, which pauses the outer one) with the same counts, and
    the Python hooks are not what is installed."""
    from torch.nn.modules import module as torch_module

    recorder = RECORDER.load(quiet=True)

    def run(backend):
        torch.manual_seed(0)
        model = Tricky()
        with flopsight.Profiler(model, backend=backend) as prof:
            model(torch.randn(2, 8))
            hooks = list(torch_module._global_forward_pre_hooks.values())
            inner = flopsight.get_model_profile(model.a, args=[torch.randn(2, 8)], print_profile=False, as_string=False)
            model(torch.randn(2, 8))
        assert (recorder.module_pre in hooks) == (backend == "native")
        assert inner[1] == 64 * 2  # the nested profile's MACs: 8x8 per row, 2 rows; the outer one saw none of them
        return prof.result

    python, native = run("python"), run("native")
    assert native.metadata.backend == "native"
    calls = {path: {phase: s.calls for phase, s in m.phases.items()} for path, m in python.modules.items()}
    assert {path: {phase: s.calls for phase, s in m.phases.items()} for path, m in native.modules.items()} == calls
    # the shared norm, called from the root twice per level (2 levels, 2 profiled forwards),
    # goes to its first path; the layer called on another thread once per level
    assert (calls["a.norm"]["forward"], calls["b"]["forward"], calls["fails"]["forward"]) == (8, 4, 4)
    assert counts(native) == counts(python)


@needs_native
@pytest.mark.parametrize("name", ["python", "native"])
def test_a_timing_pass_after_a_native_count_tracks_modules_in_cpp(name):
    """profile(warm_up=1) counts in one pass and times the next: after a native count the
    timing pass tracks the calls in C++ too, without a global hook (torch's fast call path):
    the root gets the C++ hooks as its own, the other modules a wrapped forward; every module
    is timed, and left as it was."""
    from torch.nn.modules import module as torch_module

    seen = []

    class Probe(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

        def forward(self, x):
            seen.append((list(torch_module._global_forward_pre_hooks.values()),
                         list(self._forward_pre_hooks.values()), type(self.inner.__dict__.get("forward")).__name__))
            return self.inner(x)

    probe = Probe()
    result = flopsight.profile(probe, torch.randn(2, 4), warm_up=1, backend=name)
    (counting, _, _), (timing, root_hooks, inner_forward) = seen
    recorder = RECORDER.load(quiet=True)
    native = name == "native"
    assert (recorder.module_pre in counting, recorder.module_pre in timing) == (native, False)
    assert (recorder.module_pre in root_hooks, inner_forward) == ((True, "ForwardWrapper") if native else
                                                                 (False, "NoneType"))
    assert result.metadata.timing.method == "separate"
    for path in ("", "inner", "inner.0", "inner.1"):
        forward = result.modules[path].phases["forward"]
        assert forward.calls == 1 and forward.latency > 0, path
    assert "forward" not in probe.inner.__dict__ and not probe._forward_pre_hooks


@needs_native
def test_a_wrapper_tensor_subclass_is_counted_once():
    """A TwoTensor's op runs the op on each of its two tensors: the recorder sees all three."""
    from torch.testing._internal.two_tensor import TwoTensor

    def run(backend):
        model = nn.Linear(4, 3)
        with torch.no_grad(), flopsight.Profiler(model, backend=backend) as prof:
            model(TwoTensor(torch.randn(2, 4), torch.randn(2, 4)))
        return prof.result

    python, native = both(run)
    assert native == python
    # 2x4 @ 4x3 and the bias; reads 3 + 8 + 12 and writes 6 floats
    assert native[("", "forward", "aten.addmm")] == (1, 2 * 4 * 3, 2 * 4 * 3 * 2 + 2 * 3, (3 + 8 + 12 + 6) * 4)


@needs_native
def test_a_compiled_model_is_counted_on_its_eager_twin():
    """Timed through the compiled wrapper with Python module hooks, which dynamo traces (it
    would break its graph at the C ones, and warn)."""

    def run(backend):
        torch.manual_seed(0)
        model = torch.compile(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), backend="eager")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            # torch's own notice about the interpreter (Python 3.13.0's guards), not about profiling
            warnings.filterwarnings("ignore", message="Guards may run slower on Python 3.13.0")
            return flopsight.profile(model, torch.randn(3, 4), backend=backend)

    python, native = both(run)
    assert native == python and native[("0", "forward")][0] + native[("2", "forward")][0] == 3 * (4 * 8 + 8 * 2)


@pytest.mark.parametrize("backend", ["python", pytest.param("native", marks=needs_native)])
def test_a_backward_pass_on_another_thread_is_named(backend):
    """Counting follows the thread that started profiling (and the autograd threads it
    starts), on both backends: a backward() started on another thread is not counted, and
    the profile says so."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    with pytest.warns(UserWarning, match="backward pass ran on another thread"):
        with flopsight.Profiler(model, backend=backend) as prof:
            loss = model(torch.randn(3, 4)).sum()
            worker = threading.Thread(target=loss.backward)
            worker.start()
            worker.join()
    assert prof.result.total.forward.macs == 3 * (4 * 8 + 8 * 2)
    assert "backward" not in prof.result.module("0").phases


# -- what a plain run computes, where a dispatch mode changes it ---------------------------------
@needs_native
def test_the_native_backend_counts_the_branch_a_plain_run_takes():
    """Under a dispatch mode torch takes its tensor-subclass branches: svdvals computes the
    singular vectors too (7,776 FLOPs for 12x6, see test_formulas_linalg.py). A plain run
    computes the values alone, Golub-Reinsch without vectors: 4*m*n^2 - 4/3*n^3 =
    4*12*36 - 4/3*216 = 1728 - 288 = 1440 FLOPs, which the native backend counts."""
    a = torch.randn(12, 6, dtype=torch.float64)

    def svd_flops(backend):
        with flopsight.Profiler(backend=backend) as prof:
            torch.linalg.svdvals(a)
        return prof.result.module("").ops["forward"]["aten._linalg_svd"].flops

    assert svd_flops("python") == 7776
    assert svd_flops("native") == 1440


# -- choosing a backend -------------------------------------------------------------------------
def test_a_bad_backend_is_named_before_the_model_runs(monkeypatch):
    model = nn.Linear(2, 2)
    calls = []
    model.register_forward_hook(lambda *a: calls.append(1))
    with pytest.raises(ValueError, match="backend: expected one of 'auto', 'native', 'python', got 'c'"):
        flopsight.profile(model, torch.ones(1, 2), backend="c")
    with pytest.raises(ValueError, match="backend"):
        flopsight.Profiler(model, backend="fast")
    with pytest.raises(ValueError, match="backend"):
        flopsight.get_model_profile(model, (1, 2), backend=1, print_profile=False)
    monkeypatch.setenv("FLOPSIGHT_BACKEND", "turbo")
    with pytest.raises(ValueError, match="FLOPSIGHT_BACKEND: expected one of 'auto', 'native', 'python', got 'turbo'"):
        flopsight.profile(model, torch.ones(1, 2))
    assert calls == []


def test_a_bad_flopsight_backend_only_fails_the_profiles_that_read_it():
    """In a fresh process with $FLOPSIGHT_BACKEND set wrong: importing flopsight, installing the
    DeepSpeed drop-in and a profile that names its backend all work; one that leaves it to the
    variable says what is wrong with it."""
    script = (
        "import torch, flopsight, flopsight.integrations.deepspeed.engine as engine\n"
        "engine.install(steps=2); engine.uninstall()\n"
        "print(flopsight.profile(torch.nn.Linear(2, 2), torch.ones(1, 2), backend='python').metadata.backend)\n"
        "try:\n"
        "    flopsight.profile(torch.nn.Linear(2, 2), torch.ones(1, 2))\n"
        "except ValueError as e:\n"
        "    print(e)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "FLOPSIGHT_BACKEND": "turbo"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-2:] == [  # (DeepSpeed prints a line of its own first)
        "python", "FLOPSIGHT_BACKEND: expected one of 'auto', 'native', 'python', got 'turbo'"]


@needs_native
def test_auto_counts_natively_where_it_can_and_says_why_not(monkeypatch):
    monkeypatch.delenv("FLOPSIGHT_BACKEND", raising=False)
    model, x = nn.Linear(2, 2), torch.ones(1, 2)
    meta = flopsight.profile(model, x).metadata
    assert (meta.backend, meta.backend_note) == ("native", None)
    meta = flopsight.profile(model, x, memory=True).metadata  # from the allocators' reports
    assert (meta.backend, meta.backend_note) == ("native", None)
    meta = flopsight.profile(nn.Linear(2, 2, device="meta"), x.to("meta"), memory=True).metadata
    assert meta.backend == "python" and "meta device" in meta.backend_note
    meta = flopsight.profile(model, x, clock=flopsight.FakeClock()).metadata
    assert meta.backend == "python" and "fake clock" in meta.backend_note
    assert flopsight.profile(model, x, backend="python").metadata.backend_note is None
    monkeypatch.setenv("FLOPSIGHT_BACKEND", "python")
    assert flopsight.profile(model, x).metadata.backend == "python"
    # a profile nested in a running native one counts in Python (one recorder per process); the
    # outer one counts its pass too (the inner one's, warm_up=0: one counted call), and its own
    with flopsight.Profiler(model, backend="native") as outer:
        inner = flopsight.profile(model, x, backend="native", warm_up=0)
        model(x)
    assert outer.result.metadata.backend == "native" and outer.result.total.forward.calls == 2
    assert inner.metadata.backend == "python" and "already running" in inner.metadata.backend_note
    assert inner.total.forward.macs == 4


def test_without_a_compiler_one_line_says_so_and_python_counts(tmp_path):
    """A fresh cache and no working compiler: the build fails, one line on stderr, the
    Python path counts; asking for native explicitly is an error naming why."""
    script = (
        "import torch, flopsight\n"
        "r = flopsight.profile(torch.nn.Linear(2, 2), torch.ones(1, 2))\n"
        "print(r.metadata.backend, r.total.forward.macs)\n"
        "try:\n"
        "    flopsight.profile(torch.nn.Linear(2, 2), torch.ones(1, 2), backend='native')\n"
        "except RuntimeError as e:\n"
        "    print('error:', e)\n"
    )
    env = {**os.environ, "FLOPSIGHT_CACHE": str(tmp_path), "CXX": "/nonexistent/c++", "FLOPSIGHT_BACKEND": "auto"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert out[0] == "python 4"
    assert out[1].startswith("error: backend: 'native' was asked for, but the native recorder cannot be built here")
    lines = [line for line in done.stderr.splitlines() if line.startswith("flopsight:")]
    assert len(lines) == 1 and "the native backend is not available" in lines[0], done.stderr


def test_the_build_is_cached_per_torch_python_and_platform():
    folder = cache_folder().name
    assert torch.__version__.replace("+", "_") in folder and sys.implementation.cache_tag in folder


def test_a_failed_build_is_not_tried_again_until_the_source_torch_or_compiler_changes(tmp_path, monkeypatch, capsys):
    """Every new process tried a failed build again (18 s each on torch 2.6): the failure is
    kept, with its reason, in the build's folder, whose name carries torch, Python, the
    source's hash and the compiler's identity."""
    import shutil

    from torch.utils import cpp_extension

    from flopsight.capture.backends.native import build
    from flopsight.capture.backends.native.recorder import Recorder

    if shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.skip("no C++ compiler here")
    source = tmp_path / "recorder.cpp"
    source.write_text("this is not C++;\n")  # fails at once, before any torch header
    monkeypatch.setenv("FLOPSIGHT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "SOURCE", source)
    real, tries = cpp_extension.load, []
    monkeypatch.setattr(cpp_extension, "load", lambda **kw: tries.append(1) or real(**kw))

    recorder = None

    def fresh_process_load():
        nonlocal recorder
        recorder = Recorder()
        return recorder.load()

    assert fresh_process_load() is None and len(tries) == 1
    assert "error:" in recorder.failure and (build.cache_folder() / "build-failed.txt").exists()
    assert fresh_process_load() is None and len(tries) == 1  # not tried again
    assert "a build failed here before" in recorder.failure and "build-failed.txt to retry" in recorder.failure
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("flopsight:")]
    assert len(lines) == 3  # building, its failure, the kept failure: one line each
    monkeypatch.setattr(build, "_compiler_identity", lambda compiler: "another compiler")
    assert fresh_process_load() is None and len(tries) == 2  # a new compiler tries again


class _ModesSeen(nn.Module):
    """Records how many function modes are active each time it runs."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner, self.seen = inner, []

    def forward(self, *args):
        from flopsight._torch_private import active_function_modes

        self.seen.append(len(active_function_modes()))
        return self.inner(*args)


@needs_native
def test_a_native_session_installs_a_function_mode_only_where_a_python_unit_may_run():
    """No unit written in Python can run in an MLP with dropout (F.dropout reaches the builtin
    dropout, which the recorder counts whole): no function mode, on either pass. An
    nn.MultiheadAttention runs F.multi_head_attention_forward, a Python unit: the mode is there."""
    mlp = _ModesSeen(nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.1), nn.ReLU(), nn.Linear(8, 2)))
    x = torch.randn(4, 8)
    with flopsight.Profiler(mlp, backend="native") as prof:
        mlp(x).sum().backward()
    assert mlp.seen == [0] and prof.result.metadata.backend == "native"
    with flopsight.Profiler(mlp, backend="python"):
        mlp(x)
    assert mlp.seen[-1] == 1

    attention = _ModesSeen(nn.MultiheadAttention(8, 2, batch_first=True))
    q = torch.randn(2, 3, 8)
    with flopsight.Profiler(attention, backend="native") as native:
        attention(q, q, q)
    assert attention.seen == [1]
    with flopsight.Profiler(attention, backend="python") as python:
        attention(q, q, q)
    assert counts(native.result) == counts(python.result)
    assert "multi_head_attention" in native.result.module("inner").record.ops["forward"]


@needs_native
def test_units_that_reach_a_builtin_count_the_same_without_the_function_mode():
    """F.dropout, F.alpha_dropout, F.mish and F.rms_norm run the builtin unit the recorder
    counts whole: the same counts as the Python backend's, which sees the functional."""
    F = torch.nn.functional

    class Functionals(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            x = F.dropout(self.fc(x), 0.2, training=True)
            x = F.feature_alpha_dropout(F.alpha_dropout(x, 0.2, training=True), 0.2, training=True)
            x = F.mish(x)
            return F.rms_norm(x, (8,), eps=1e-6)

    model = Functionals()
    x = torch.randn(4, 8, requires_grad=True)
    results = {}
    for backend in ("python", "native"):
        torch.manual_seed(0)
        model.zero_grad(set_to_none=True)
        x.grad = None
        with flopsight.Profiler(model, backend=backend) as prof:
            model(x).sum().backward()
        results[backend] = prof.result
    python, native = counts(results["python"]), counts(results["native"])
    assert python == native
    ops = results["native"].module("").record.ops
    assert {"dropout", "alpha_dropout", "feature_alpha_dropout", "mish", "rms_norm"} <= set(ops["forward"])


@needs_native
def test_without_a_function_mode_a_subclass_that_takes_a_unit_over_is_still_counted_whole():
    """A jagged nested tensor runs its own attention in Python (its ``__torch_function__``): with
    no function mode, the session routes it to the unit through the subclass, counted as the
    Python backend counts it, and puts the subclass back as it was."""
    from torch.nested._internal.nested_tensor import NestedTensor

    original = NestedTensor.__dict__["__torch_function__"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the nested tensors' prototype notice
        leaf = torch.nested.nested_tensor([torch.randn(n, 2 * 8) for n in (3, 5, 2)], layout=torch.jagged)
    q = leaf.unflatten(-1, (2, 8)).transpose(1, 2)  # (B, H=2, j, E=8)
    results = {}
    for backend in ("python", "native"):
        with flopsight.Profiler(backend=backend) as prof:
            torch.nn.functional.scaled_dot_product_attention(q, q, q)
        results[backend] = prof.result
    # scores H * (3*3 + 5*5 + 2*2) = 2 * 38 = 76 (padded to 5: 150); MACs 76 * E=8 * 2 products = 1216
    for result in results.values():
        sdpa = result.ops("forward")["scaled_dot_product_attention"]
        assert (sdpa.calls, sdpa.macs) == (1, 1216)
    assert results["native"].metadata.backend == "native"
    assert NestedTensor.__dict__["__torch_function__"] is original


def _count_positive(t):
    from flopsight.formulas.attention.entries import read_values

    return read_values(lambda v: int((v > 0).sum()), t)


@needs_native
def test_an_op_whose_user_formula_reads_values_is_costed_on_them_and_the_metadata_says_so():
    """A formula that reads values (one that calls read_values, or one registered with
    reads_values=True) has its op's values kept by the recorder and costed on them in Python:
    the same count as the Python backend's, named in result.metadata.on_values."""
    from flopsight.formulas.attention.entries import read_values

    direct = flopsight.REGISTRY.copy()

    @flopsight.register_formula("aten::relu", registry=direct)
    def relu(out, self, **_):  # one FLOP per positive input (calls read_values: known as reading)
        return flopsight.Cost.of_flops(read_values(lambda v: int((v > 0).sum()), self))

    declared = flopsight.REGISTRY.copy()
    flopsight.register_formula("aten::relu", registry=declared, reads_values=True)(
        lambda out, self, **_: flopsight.Cost.of_flops(_count_positive(self)))

    x = torch.tensor([[-1.0, 2.0, 3.0, -4.0], [5.0, -6.0, 7.0, 8.0]])  # 5 positive
    for registry in (direct, declared):
        for backend in ("python", "native"):
            with flopsight.Profiler(nn.ReLU(), registry=registry, backend=backend) as prof:
                prof.model(x)
            result = prof.result
            assert result.total.forward.flops == 5, backend
            assert result.metadata.on_values == (("aten.relu",) if backend == "native" else ())


class _TwoAttentions(nn.Module):
    def forward(self, q, mask):
        y = nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask)
        return nn.functional.scaled_dot_product_attention(y, y, y, attn_mask=mask)


@needs_native
def test_attention_whose_formula_reads_no_values_keeps_none_after_its_first_call():
    """Attention's formulas may read a mask's values, so the recorder keeps an attention op's
    values; a call whose formula read none (dense counting) makes its signature one that keeps
    none from then on, in this registry only: effective counting still reads every mask.

    q, k, v of (1, 1, 4, 2): 16 scores. Dense: MACs 16 * (2 + 2) = 64, FLOPs 2 * 64 + 16
    (scale) + 16 (softmax) + 16 (the mask's add) = 176 per call. Effective, with a lower-
    triangular bool mask (10 of 16 entries kept): MACs 10 * 4 = 40, FLOPs 80 + 3 * 10 = 110;
    with a mask that keeps all 16, the dense figures."""
    q = torch.randn(1, 1, 4, 2)
    causal, full = torch.ones(4, 4, dtype=torch.bool).tril(), torch.ones(4, 4, dtype=torch.bool)
    model = _TwoAttentions()

    def run(backend, attention, mask):
        with torch.no_grad(), flopsight.Profiler(model, backend=backend, attention=attention) as prof:
            model(q, mask)
        forward = prof.result.total.forward
        return forward.macs, forward.flops, prof.result.metadata.on_values

    for _ in range(2):  # the first profile learns that the dense formula reads nothing
        assert run("native", "dense", causal) == (128, 352, ())
    for mask, (macs, flops) in ((causal, (80, 220)), (full, (128, 352)), (causal, (80, 220))):
        macs_n, flops_n, on_values = run("native", "effective", mask)
        assert (macs_n, flops_n) == run("python", "effective", mask)[:2] == (macs, flops)
        assert "aten.scaled_dot_product_attention" in on_values


@needs_native
def test_flex_attention_is_routed_to_its_unit_without_a_function_mode():
    """flex attention is a higher-order operator the dispatcher never sees: a native session
    routes its calls through the operator's class while it runs (no function mode), counting it
    as the Python backend does, and puts the class back as it was."""
    from torch._higher_order_ops.flex_attention import FlexAttentionHOP
    from torch.nn.attention.flex_attention import flex_attention

    from flopsight._torch_private import active_function_modes

    class Flex(nn.Module):
        def forward(self, q):
            self.modes = len(active_function_modes())
            return flex_attention(q, q, q)

    original = FlexAttentionHOP.__dict__.get("__call__")
    model, q = Flex(), torch.randn(2, 2, 64, 16)
    found = {}
    for backend in ("python", "native"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # flex_attention's notice that it runs unfused without compile
            with flopsight.Profiler(model, backend=backend) as prof:
                model(q)
        ops = prof.result.ops("forward")
        found[backend] = (ops["flex_attention"].calls, ops["flex_attention"].macs, model.modes)
    # B*H*L*S = 2*2*64*64 = 16384 scores; MACs 16384 * E=16 * 2 products = 524288
    assert found == {"python": (1, 524288, 1), "native": (1, 524288, 0)}
    assert FlexAttentionHOP.__dict__.get("__call__") is original


class DeviceClock:
    """A clock that is not the host's and resolves only at the end, as CUDA events do (stamps
    are objects, ``scale`` None); it counts the stamps taken on it."""

    name = "device"
    subtracts_overhead = False
    scale = None

    def __init__(self):
        self.taken = 0
        self.now = time.perf_counter

    def stamp(self):
        self.taken += 1
        return [time.perf_counter()]

    def finish(self):
        pass

    @staticmethod
    def seconds(start, end):
        return end[0] - start[0] if start is not None and end is not None else 0.0


@needs_native
@pytest.mark.parametrize("make, inputs", TRAINING)
def test_on_a_device_clock_ops_count_natively_and_only_calls_and_phases_are_stamped_on_it(make, inputs):
    """CUDA's clock (events) stamps module calls and phases; the native recorder stamps each op
    on the host: no device event and no Python per op. The counts are the Python backend's."""

    def run(backend, clock=None):
        torch.manual_seed(0)
        model, x = make(), inputs()
        with warnings.catch_warnings():  # the device clock cannot take the profiler's own time out
            warnings.simplefilter("ignore")
            with flopsight.Profiler(model, clock=clock, backend=backend) as prof:
                out = model(x)
                (out.logits if hasattr(out, "logits") else out).sum().backward()
        return prof.result

    clock, python_clock = DeviceClock(), DeviceClock()
    native, python = run("auto", clock), run("python", python_clock)
    assert (native.metadata.backend, native.metadata.timing.clock) == ("native", "device")
    assert counts(native) == counts(python)
    ops = sum(s.calls for phase in ("forward", "backward") for s in python.ops(phase).values())
    # the dispatch mode stamps every op twice on the clock; the recorder none
    assert ops > 0 and python_clock.taken - clock.taken >= 2 * ops
    assert native.total.forward.latency > 0 and native.ops("forward")
    assert all(s.latency > 0 for s in native.ops("forward").values())
