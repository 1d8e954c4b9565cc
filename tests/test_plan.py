"""The capture plan: which sources run is one table, and a new source is one more row."""

import torch
from toy_source import OpsPerPhase, ToySource

import flopsight
from flopsight.capture.charging.calls import ModuleCalls
from flopsight.capture.charging.counts import Counts
from flopsight.capture.model.modules import describe
from flopsight.capture.runs.plan import PLAN, CaptureOptions, Row, plan
from flopsight.capture.runs.session import CaptureSession
from flopsight.formulas import REGISTRY


def rows(**options):
    session = CaptureSession(CaptureOptions(describe(torch.nn.Linear(2, 2)), **options), registry=REGISTRY,
                             clock=flopsight.FakeClock())
    return [row.name for row in plan(session.options, session.ctx)]


def test_the_table_picks_the_sources_the_options_ask_for():
    import torch.distributed.tensor  # noqa: F401  (DTensor imported: its redistributions are listened to)

    counting = ["optimizer", "units", "autograd functions", "collectives", "functions", "pipeline",
                "redistributions", "backend", "spans"]
    assert rows() == counting
    assert rows(memory=True) == counting[:1] + ["memory"] + counting[1:]
    # a timing pass: module spans only (and no pipeline stage's shape inference among them)
    assert rows(count=False) == ["optimizer", "pipeline", "backend", "spans"]
    assert rows(count=False, memory=True) == ["optimizer", "pipeline", "backend", "spans"]


def test_a_new_source_is_one_row_and_collects_its_own_part():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    options = CaptureOptions(describe(model), optimizer=opt)
    session = CaptureSession(options, registry=REGISTRY, clock=flopsight.FakeClock(),
                             table=PLAN + (Row("toy", ToySource, needs={"ops", "calls"}),))
    session.start()
    try:
        model(torch.ones(3, 4)).sum().backward()
        opt.step()
    finally:
        raw = session.stop()
    toy, counts = raw.get(OpsPerPhase), raw.get(Counts)
    # every op the counting source charged reached the toy once, in the phase it was charged to
    for phase in ("forward", "backward", "step"):
        charged = sum(op.calls for (path, ph), ops in counts.ops.items() if ph == phase for op in ops.values())
        assert toy.ops[phase] == charged > 0
    assert toy.module_calls == sum(raw.get(ModuleCalls).calls.values()) == 4  # the model and its 3 layers


def test_the_backend_is_chosen_from_the_rows_needs_before_any_source_is_made():
    """Each source is made knowing the backend: a row needing each module call as it happens
    keeps the native recorder's C++ hooks out (Python hooks track the calls), one needing each
    op's tensors in Python keeps the recorder out; no row's need, a native session where it
    builds. An unknown need is refused."""
    import pytest

    from flopsight.capture.backends.native.recorder import RECORDER
    from flopsight.capture.runs.plan import needs_of

    seen = []

    class Sees:
        def __init__(self, ctx):
            seen.append((type(ctx.backend).__name__, ctx.backend.hears_all_threads))

        def start(self, ctx):
            pass

        def stop(self, ctx):
            pass

    def backend_seen(*needs):
        seen.clear()
        table = PLAN + (Row("sees", Sees, needs=set(needs)),)
        CaptureSession(CaptureOptions(describe(torch.nn.Linear(2, 2)), backend="auto"), registry=REGISTRY,
                       clock=flopsight.capture.runtime.timing.HostClock(), table=table)
        return seen[0]

    if RECORDER.load(quiet=True) is not None:
        assert backend_seen() == ("NativeBackend", True)
        assert backend_seen("calls") == ("NativeBackend", False)
    assert backend_seen("ops") == ("PythonBackend", False)
    assert needs_of([Row("a", Sees, needs={"ops"}), Row("b", Sees, needs={"memory"})]) == {"ops", "memory"}
    with pytest.raises(ValueError, match="needs: \\['opz'\\] are not among"):
        Row("typo", Sees, needs={"opz"})


def test_a_sessions_options_are_read_off_the_public_ones_with_the_same_defaults(monkeypatch):
    monkeypatch.delenv("FLOPSIGHT_BACKEND", raising=False)
    infos = describe(torch.nn.Linear(2, 2))
    public = flopsight.ProfileOptions()
    assert CaptureOptions(infos).backend == public.backend == "auto"
    given = flopsight.ProfileOptions(memory=True, backend="python", kernels=True)
    capture = CaptureOptions.of(given, infos, count=False, kernels=False)
    assert (capture.memory, capture.backend, capture.kernels, capture.count) == (True, "python", False, False)
    assert capture.ignore is given.ignore
