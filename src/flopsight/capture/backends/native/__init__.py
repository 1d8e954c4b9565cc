"""The native backend: ops through the recorder's ``RecordFunction`` callback (:mod:`.ops`),
module calls through its C++ hooks (:mod:`.calls`), both in ``recorder.cpp``, built from source
(:mod:`.build`) and checked against the Python backend once per build (:mod:`.self_check`);
:mod:`.recorder` owns the loaded extension.

The ops a source claims (the collectives under torch.distributed) go to Python as they
return, one by one: they are few, and the source watches each one's ``Work`` for its completion.
It steps aside (for the Python backend, with a note saying why) where a source needs every op
in Python while it runs, where memory cannot come from the allocators' reports (the meta
device, torch.profiler holding them), inside another running native session, where the
recorder cannot be built, and where it does not count the check's model as the Python backend
does. On a device clock (CUDA events) it stamps each op on the host, never with an event: the
device clock stamps the module calls and phases.
Its module calls go through Python hooks where the stamps are not the host's (except in a
counting session on a device's clock: there the top-level calls alone are stamped on the
device, the inner ones on the host), where a source
listens to each call as it happens (module rules, kernels), and for ``torch.compile``d modules.
"""

from __future__ import annotations

from ...._torch_private import kineto_running
from ...model.modules import compiled_paths
from ...runtime.timing import FakeClock, HostClock, on_device
from .backend import NativeBackend
from .ops import NativeCountingSource
from .recorder import RECORDER
from .self_check import verdict

__all__ = ["NativeBackend", "native_backend", "times_ops"]


def times_ops(options, clock, infos) -> bool:
    """Whether a timing session of ``infos`` on ``clock`` with ``options`` (a front-end's:
    ``backend``) can time the operators too (:mod:`.stamps`): on the host's clock, with the
    recorder's C++ hooks (nothing compiled), the recorder built (this builds it, as the
    counting pass would) and choosing the ops as the Python path does (its self-check)."""
    if options.backend == "python" or not isinstance(clock, HostClock) or compiled_paths(infos):
        return False
    recorder = RECORDER.load(quiet=False)
    return recorder is not None and verdict(recorder) is None


def _no_native_memory(recorder, options, params) -> str | None:
    """Why the allocators' reports cannot be read in this session (None: they can): they go to
    the one profiler state of the thread, which torch.profiler takes while it runs; the meta
    device has no allocator."""
    if params is not None and any(t.is_meta for t in params.tensors):
        return "memory on the meta device is read from the tensors (no allocator reports it)"
    if options.kernels:
        return "memory is tracked in Python while torch.profiler records kernels (kernels=True)"
    if recorder.profiler_state() or kineto_running():
        return "memory is tracked in Python while torch.profiler runs"
    return None


def native_backend(ctx, needs: frozenset = frozenset()) -> tuple[NativeBackend | None, str | None]:
    """(the native backend for the session of ``ctx`` whose sources need ``needs``, or None;
    why not, when it was asked for)."""
    options = ctx.options
    if options.backend == "python":
        return None, None
    # the C++ hooks track the module calls where no source hears each as it happens, nothing is
    # compiled, and they stamp on the session's clock (the host's); on a device's clock a
    # counting session's inner calls too: its phases' boundaries (the top-level calls, the
    # span timer's) are then the device's only stamps, none per module call
    native_calls = "calls" not in needs and not compiled_paths(options.infos) and (
        isinstance(ctx.clock, HostClock) or (options.count and on_device(ctx.clock)))
    if not options.count:  # a timing session: the C++ hooks when the recorder is built and free
        if not native_calls or RECORDER.busy:
            return None, None
        recorder = RECORDER.loaded  # a timing pass never builds it (the counting pass before it did)
        if recorder is None:
            return None, None
        stamps = options.op_times and isinstance(ctx.clock, HostClock)
        return NativeBackend(ctx, recorder, None, True, stamps=stamps), None
    if "ops" in needs:
        return None, "a source reads each op's tensors in Python while it runs"
    recorder, note = _counting_recorder(options.backend, ctx)
    if recorder is None:
        return None, note
    if "memory" in needs:
        why = _no_native_memory(recorder, options, ctx.params)
        if why is not None:
            return None, why
    ops = NativeCountingSource(ctx, recorder, memory="memory" in needs)
    return NativeBackend(ctx, recorder, ops, native_calls), None


def _counting_recorder(backend: str, ctx) -> tuple[object | None, str | None]:
    """(the loaded recorder, or None for the Python path; why not native, or None) for a
    session asked for ``backend`` (not ``"python"``) with context ``ctx``."""
    if backend == "auto" and isinstance(ctx.clock, FakeClock):
        return None, f"ops are timed on the {ctx.clock.name} clock"
    if RECORDER.busy:
        return None, "a native session is already running (profiles nested in it count in Python)"
    recorder = RECORDER.load(quiet=False)
    if recorder is None:
        if backend == "native":
            raise RuntimeError(f"backend: 'native' was asked for, but the native recorder cannot be built here "
                               f"({RECORDER.failure}); use backend='auto' or 'python'")
        return None, "the native recorder cannot be built here"
    differs = verdict(recorder)
    if differs is not None:
        return None, f"the native recorder disagrees with the Python path on this torch ({differs})"
    return recorder, None
