"""The timed pass's module calls on torch's fast call path (issue 28): a native timing session
wraps each hook-free module's ``forward`` for the session instead of installing global module
hooks (which send every call down torch's slow path), and gives the modules with hooks of
their own the C++ hooks as their first hooks. It must see the calls the global hooks see,
and leave every module as it found it.

Each comparison runs the same code under a timing session of each backend: the Python one
(global hooks) is the reference.
"""

from __future__ import annotations

import functools
import gc
import inspect
import threading
import weakref

import pytest
import torch
from torch import nn

import flopsight
from flopsight._torch_private import node_sequence_nr
from flopsight.capture.backends.native.recorder import RECORDER
from flopsight.capture.charging.calls import ModuleCalls
from flopsight.capture.model.modules import describe
from flopsight.capture.runtime.timing import HostClock
from flopsight.profiler import open_session

EXTENSION = RECORDER.load(quiet=True)
pytestmark = pytest.mark.skipif(EXTENSION is None, reason="the native backend cannot be built here")


def timed(model: nn.Module, run, backend: str = "native") -> ModuleCalls:
    """The module calls a timing session (profile()'s timed pass: nothing counted, the host
    clock) of ``model`` records while ``run()`` runs."""
    options = flopsight.ProfileOptions(backend=backend)
    session = open_session(describe(model), options, options.formulas, HostClock(), count=False)
    try:
        run()
    finally:
        raw = session.stop()
    return raw.get(ModuleCalls)


def calls_of(part: ModuleCalls) -> list[tuple]:
    """Each call as (path, phase, its caller's path, whether it ended), in call order."""
    log = part.log
    return [(r.path, r.phase, log[r.parent].path if r.parent >= 0 else None, r.end is not None) for r in log]


def both(model: nn.Module, run) -> tuple[list, list]:
    """(calls under global Python hooks, calls under the native session's wrappers)."""
    return calls_of(timed(model, run, "python")), calls_of(timed(model, run, "native"))


def wrapped(module: nn.Module) -> bool:
    return type(module.__dict__.get("forward")).__name__ == "ForwardWrapper"


def forwards(model: nn.Module) -> dict:
    """Each module's own ``forward`` attribute (a scripted module has one), by path."""
    return {name: m.__dict__.get("forward") for name, m in model.named_modules()}


def left_as_found(model: nn.Module, before: dict | None = None) -> None:
    """No module keeps a forward attribute (but those it had, ``before``) or a hook of ours."""
    assert forwards(model) == (before or {name: None for name, _ in model.named_modules()})
    for name, m in model.named_modules():
        assert EXTENSION.module_pre not in m._forward_pre_hooks.values(), name
        assert EXTENSION.module_post not in m._forward_hooks.values(), name


class Stop(BaseException):
    """Raised past torch's ``except Exception``: no always-called hook runs for it."""


class Halts(nn.Module):
    def forward(self, x):
        raise Stop


class Tricky(nn.Module):
    """Calls the global hooks see in their own way: one norm at two paths, a child whose
    exception the parent catches (it never ends), one that raises a BaseException (no hook
    runs for it), a call on another thread, forwards called directly (no call), a module
    given a hook while it runs, keyword arguments, recursion."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)
        self.b.norm = self.a.norm = nn.LayerNorm(8)
        self.fails = nn.Linear(3, 3)
        self.stops = nn.Sequential(Halts())
        self.stops.register_forward_pre_hook(lambda m, args: None)  # hooks of its own: the C++ hooks as its own
        self.act = nn.Softmax(dim=-1)

    def forward(self, x, depth=1):
        x = self.a.norm(self.a(x))
        try:
            self.fails(x)  # 8 features into a 3-feature layer: raises
        except RuntimeError:
            pass
        try:
            self.stops(x)
        except Stop:
            pass
        out = []
        hook = self.b.register_forward_hook(lambda m, args, output: None)  # torch's slow path from now on
        worker = threading.Thread(target=lambda: out.append(self.b(x)))
        worker.start()
        worker.join()
        hook.remove()
        x = self.act.forward(self.b.norm(input=out[0]))  # act: called directly
        x = self.a.forward(x)  # a: called directly, once more
        return self(x, depth - 1) if depth else x


def test_the_wrapped_calls_are_the_calls_the_global_hooks_see():
    torch.manual_seed(0)
    model, x = Tricky(), torch.randn(2, 8)
    seen = []

    def run():
        seen.append((wrapped(model.a), wrapped(model.a.norm), wrapped(model.stops), wrapped(model)))
        with torch.no_grad():
            model(x)
            model(x)

    python, native = both(model, run)
    assert seen == [(False,) * 4, (True, True, False, False)]  # the root and `stops` have hooks
    assert native == python
    # two forwards of two levels each: the shared norm goes to its first path (a.norm) from
    # the root, twice per level; the failing layer never ends, nor do `stops` and its child
    # (Stop: no hook ran; abandoned, unwound when the root ends); `a` is called once per level
    # through __call__, Softmax never
    paths = [path for path, *_ in native]
    assert [paths.count(p) for p in ("", "a", "a.norm", "b", "stops", "stops.0", "act")] == [4, 4, 8, 4, 4, 4, 0]
    assert {("fails", "forward", "", False), ("stops", "forward", "", False), ("stops.0", "forward", "stops", False),
            ("b", "forward", "stops.0", True)} <= set(native)  # under the abandoned call, as for the hooks
    left_as_found(model)


def test_a_recursive_call_nests_under_itself():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.step = nn.Linear(2, 2)

        def forward(self, x, n=3):
            return self.step(x if n == 0 else self(x, n - 1))

    model = Model()
    python, native = both(model, lambda: model(torch.ones(1, 2)))
    assert native == python
    # the root, 3 calls of itself, each inside the one before, and `step` once in each
    assert native == [("", "forward", None, True), ("", "forward", "", True), ("", "forward", "", True),
                      ("", "forward", "", True), ("step", "forward", "", True), ("step", "forward", "", True),
                      ("step", "forward", "", True), ("step", "forward", "", True)]


def test_a_module_with_hooks_of_its_own_is_timed_with_them_as_a_counting_session_times_it():
    """ZeRO-3 fetches a module's parameters in its pre-hook and releases them in its forward
    hook; tensor parallelism redistributes a module's output in its forward hook: its time
    includes both, as a counting session's (its call begins at the global pre-hook, before a
    module's own, and ends at a hook of the module's own, after the others). Told by the
    autograd node each hook makes: a call's nodes are numbered from its start's sequence
    counter to its end's."""
    made = {}

    class Fetched(nn.Linear):
        pass

    model = nn.Sequential(nn.Linear(4, 4), Fetched(4, 4))
    fetched = model[1]

    def fetch(module, args):
        made["pre"] = node_sequence_nr((module.weight * 1).grad_fn)

    def release(module, args, output):
        made["post"] = node_sequence_nr((module.weight * 1).grad_fn)

    fetched.register_forward_pre_hook(fetch)
    fetched.register_forward_hook(release)
    seen = []

    def run():
        seen.append((wrapped(model[0]), wrapped(fetched), list(fetched._forward_pre_hooks.values())[0]))
        model(torch.ones(2, 4))

    calls = timed(model, run)
    assert seen == [(True, False, EXTENSION.module_pre)]  # ours first among its pre-hooks
    call = next(r for r in calls.log if r.path == "1")
    assert call.seq_start <= made["pre"] < made["post"] < call.seq_end
    assert list(fetched._forward_pre_hooks.values()) == [fetch]  # its own, as they were
    assert list(fetched._forward_hooks.values()) == [release]
    left_as_found(model)


def test_a_forward_that_raises_ends_as_the_global_always_called_hook_ended_it():
    class Fails(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(4, 4)
            self.bad = nn.Linear(3, 3)

        def forward(self, x):
            return self.bad(self.head(x))

    model = Fails()
    for backend in ("python", "native"):
        with pytest.raises(RuntimeError) as raised:
            timed(model, lambda: model(torch.ones(2, 4)), backend)
        # the innermost module that raised is named on the exception, once, as by the global hook
        assert [n for n in raised.value.__notes__ if n.startswith("flopsight")] == [
            "flopsight: raised in module 'bad' (Linear)"]
        left_as_found(model)


def test_a_base_exception_out_of_the_model_leaves_it_as_found():
    model = nn.Sequential(nn.Linear(8, 8), nn.Sequential(Halts()))
    for backend in ("python", "native"):
        with pytest.raises(Stop):
            timed(model, lambda: model(torch.ones(2, 8)), backend)
        left_as_found(model)
    assert torch.equal(model[0](torch.zeros(1, 8)), model[0].bias.detach()[None])  # the forward itself again


def test_the_error_of_a_profiled_call_is_reported_and_the_model_left_as_found():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(3, 3))
    python, native = (timed(model, lambda: _swallow(model), b) for b in ("python", "native"))
    assert native.error == python.error == "RuntimeError raised in module '1' (Linear)"
    assert calls_of(native) == calls_of(python)
    left_as_found(model)


def _swallow(model):
    try:
        model(torch.ones(2, 4))
    except RuntimeError:
        pass


def test_a_forward_set_on_the_module_is_wrapped_and_put_back():
    """accelerate's hooks set ``module.forward`` (a partial of their own) on the instance."""
    hooks = pytest.importorskip("accelerate.hooks")
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    hooks.add_hook_to_module(model[0], hooks.ModelHook())
    theirs = model[0].__dict__["forward"]
    seen = []

    def run():
        seen.append(wrapped(model[0]) and model[0].forward.__wrapped__ is theirs)
        model(torch.ones(2, 4))

    before = forwards(model)
    python, native = both(model, run)
    assert seen == [False, True] and native == python
    assert model[0].__dict__["forward"] is theirs  # the same object back
    left_as_found(model, before)


def test_a_forward_replaced_during_the_session_is_left_to_whoever_replaced_it():
    """Whoever wraps the wrapper (accelerate's add_hook_to_module, while profiling) keeps
    theirs; ours, which they call, then passes every call through."""
    hooks = pytest.importorskip("accelerate.hooks")
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    x = torch.ones(2, 4)
    expected = model(x)

    def run():
        hooks.add_hook_to_module(model[0], hooks.ModelHook())
        model(x)

    timed(model, run)
    theirs = model[0].__dict__["forward"]
    assert isinstance(theirs, functools.partial)  # not clobbered
    assert torch.equal(model(x), expected)  # their forward calls ours, which passes through
    # a later session wraps theirs, and the calls through it are calls of the module again
    again = timed(model, lambda: model(x))
    assert [r.path for r in again.log] == ["", "0", "1"]
    assert model[0].__dict__["forward"] is theirs
    hooks.remove_hook_from_module(model[0])  # puts back what it found: our (spent) wrapper
    assert torch.equal(model(x), expected)


def test_the_wrapped_forward_looks_like_the_original():
    class Block(nn.Module):
        def forward(self, hidden, mask=None, *, scale: float = 1.0):
            """The block's forward."""
            return hidden * scale

    model = nn.Sequential(Block())
    block = model[0]
    original = inspect.signature(block.forward)
    seen = {}

    def run():
        forward = block.forward
        seen.update(signature=inspect.signature(forward), name=forward.__name__, doc=forward.__doc__,
                    owner=forward.__self__, func=forward.__func__, text=repr(forward), wrapped=wrapped(block),
                    state=list(model.state_dict()), out=block(torch.ones(2), scale=3.0))

    timed(model, run)
    assert seen["wrapped"]
    assert seen["signature"] == original and str(original) == "(hidden, mask=None, *, scale: 'float' = 1.0)"
    assert (seen["name"], seen["doc"], seen["owner"], seen["func"]) == ("forward", "The block's forward.", block,
                                                                       Block.forward)
    assert seen["text"] == repr(block.forward)
    assert seen["state"] == list(model.state_dict())  # state_dict() unaffected
    assert torch.equal(seen["out"], torch.full((2,), 3.0))  # keyword arguments through
    left_as_found(model)


def test_a_nested_profile_leaves_the_wrapped_calls_to_the_outer_one_too():
    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
            self.b = nn.Linear(8, 8)

        def forward(self, x):
            inner = flopsight.profile(self.a, x, warm_up=1)
            assert inner.total.forward.macs == 2 * 8 * 8  # the inner profile saw its calls
            return self.b(self.a(x))

    model = Outer()
    python, native = both(model, lambda: model(torch.ones(2, 8)))
    assert native == python
    # the inner profile of a (its counting pass, then one timed) runs inside the outer span: the
    # outer one records those calls too, as any calls of its modules
    assert [p for p, *_ in native] == ["", "a", "a.0", "a.1", "a", "a.0", "a.1", "a", "a.0", "a.1", "b"]
    left_as_found(model)


@pytest.mark.filterwarnings("ignore:Using `torch.compile")
def test_scripted_compiled_and_data_parallel_modules_keep_the_global_hooks():
    """A DataParallel's replicas copy each module's attributes: a wrapper would run the original."""
    from torch.nn.modules import module as torch_module

    for model in (nn.Sequential(nn.Linear(2, 2), torch.jit.script(nn.Linear(2, 2))),
                  nn.Sequential(nn.Linear(2, 2), torch.compile(nn.ReLU(), backend="eager")),
                  nn.Sequential(nn.Linear(2, 2), nn.DataParallel(nn.ReLU()))):
        seen, before = [], forwards(model)

        def run():
            seen.append((wrapped(model[0]), len(torch_module._global_forward_pre_hooks)))
            model(torch.ones(1, 2))

        python, native = both(model, run)
        assert seen == [(False, 1), (False, 1)] and native == python
        assert [path for path, *_ in native][:3] == ["", "0", "1"]
        left_as_found(model, before)


def test_the_model_is_freed_after_a_session():
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    timed(model, functools.partial(model, torch.ones(1, 2)))
    gone = weakref.ref(model)
    del model
    gc.collect()
    assert gone() is None


def test_profile_times_every_module_through_the_wrappers():
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), nn.Linear(4, 2)))
    result = flopsight.profile(model, torch.ones(3, 4), warm_up=1)
    assert result.metadata.timing.method == "separate"
    for path in ("", "0", "1", "1.0", "1.1"):
        forward = result.module(path).forward
        assert forward.calls == 1 and forward.latency > 0, path
    left_as_found(model)


def t5():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_decoder_layers=1,
                                num_heads=4, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    torch.manual_seed(0)
    return transformers.T5ForConditionalGeneration(cfg).eval()


def test_generate_reads_the_forward_signatures_and_sees_the_same_calls():
    """generate() reads ``inspect.signature`` of the encoder's forward (wrapped) and calls the
    encoder directly, then the model once per token."""
    model = t5()
    ids = torch.randint(2, 100, (2, 5))
    encoder = model.get_encoder()
    signature = inspect.signature(encoder.forward)
    outputs, seen = [], []

    def run():
        seen.append((wrapped(encoder), inspect.signature(encoder.forward) == signature))
        with torch.no_grad():
            outputs.append(model.generate(ids, max_new_tokens=3, min_new_tokens=3, do_sample=False))

    python, native = both(model, run)
    assert seen == [(False, True), (True, True)] and native == python
    assert torch.equal(outputs[0], outputs[1])
    tops = [p for p, _, caller, _ in native if caller is None]
    assert tops == ["encoder", "", "", ""]  # the encoder, called by generate() itself, then 3 tokens
    left_as_found(model)
    result = flopsight.profile(model, (ids,), dict(max_new_tokens=3, min_new_tokens=3, do_sample=False),
                               mode="generate", warm_up=1)
    assert result.module("encoder").forward.latency > 0 and result.total.forward.calls == 3
    left_as_found(model)
