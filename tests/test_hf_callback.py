"""FlopsightCallback with a real transformers.Trainer: a tiny GPT-2 on CPU, and on 2 ranks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from helpers import Tokens, tiny_gpt2  # noqa: E402
from transformers import Trainer, TrainerCallback, TrainingArguments  # noqa: E402

import flopsight  # noqa: E402
from flopsight.integrations.hf import FlopsightCallback  # noqa: E402

BATCH, SEQ = 2, 16  # SEQ: the length of helpers.Tokens' sequences


def trainer_for(tmp_path, callbacks=(), *, model=None, ga=1, max_steps=3, optimizers=(None, None)) -> Trainer:
    args = TrainingArguments(output_dir=str(tmp_path / "out"), use_cpu=True, report_to=[], save_strategy="no",
                             per_device_train_batch_size=BATCH, gradient_accumulation_steps=ga, max_steps=max_steps,
                             logging_steps=1, seed=0, disable_tqdm=True)
    return Trainer(model=model or tiny_gpt2(), args=args, train_dataset=Tokens(), callbacks=list(callbacks),
                   optimizers=optimizers)


def flopsight_entries(trainer: Trainer) -> list[dict]:
    return [e for e in trainer.state.log_history if any(k.startswith("flopsight/") for k in e)]


def assert_nothing_left(trainer: Trainer) -> None:
    """No hooks on the model's modules, no wrapper left on the trainer or its optimizer
    (global hooks and dispatch modes: tests/conftest.py)."""
    for module in trainer.model.modules():
        assert not (module._forward_pre_hooks or module._forward_hooks or module._backward_hooks)
    assert "training_step" not in vars(trainer)
    step = vars(trainer.optimizer).get("step")
    assert step is None or "wrap_method" not in step.__qualname__


class _Logs(TrainerCallback):
    """What the Trainer hands its callbacks' on_log (reporting integrations read these)."""

    def __init__(self):
        self.seen = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.seen.append(dict(logs))


class _OptimizerSteps(TrainerCallback):
    """Whether ``callback`` was profiling at each optimizer step (on_optimizer_step)."""

    def __init__(self, callback):
        self.callback, self.profiling = callback, []

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.profiling.append(self.callback.profiling)


@pytest.mark.parametrize("ga", [1, 2])
def test_logs_measured_figures_of_the_chosen_step_and_writes_the_report(tmp_path, ga, monkeypatch):
    peak = 1e12 if ga == 1 else None  # on CPU an MFU needs a peak given: never guessed
    callback = FlopsightCallback(profile_step=1, output=["profile.json", "profile.html"], peak=peak, memory=ga == 2)
    logs, steps = _Logs(), _OptimizerSteps(callback)
    trainer = trainer_for(tmp_path, [logs, callback, steps], ga=ga)
    calls = []  # (profiling?, the model's keyword arguments) of every forward call
    spy = trainer.model.register_forward_pre_hook(
        lambda m, args, kwargs: calls.append((callback.profiling, dict(kwargs))), with_kwargs=True)
    zero_grads = []  # profiling? at each model.zero_grad(): once before training, then after each step
    zero_grad = trainer.model.zero_grad
    monkeypatch.setattr(trainer.model, "zero_grad", lambda *a, **k: zero_grads.append(callback.profiling)
                        or zero_grad(*a, **k))
    try:
        trainer.train()
    finally:
        spy.remove()
        monkeypatch.undo()

    # only step 2 ran under the profiler: its micro-batches, its optimizer step and its zero_grad
    assert [profiling for profiling, _ in calls] == [False] * ga + [True] * ga + [False] * ga
    assert steps.profiling == [False, True, False] and zero_grads == [False, False, True, False]
    [entry] = flopsight_entries(trainer)
    assert entry["step"] == 2
    m = callback.metrics
    assert {k: entry[k] for k in m} == m
    assert [log for log in logs.seen if "flopsight/fwd_flops" in log] == [{**m, "epoch": entry["epoch"]}]

    # forward FLOPs: what flopsight.profile counts for the same calls, micro-batches summed
    model = trainer.model.train()
    profiled = [kwargs for profiling, kwargs in calls if profiling]
    fwd = sum(flopsight.profile(model, kwargs=kw, warm_up=0, gather_timeout=None).total.forward.flops
              for kw in profiled)
    assert m["flopsight/fwd_flops"] == fwd > 0
    # and by hand, the MACs: per sequence, 2 layers of 12 L H^2 (QKV, projection, MLP) +
    # 2 L^2 H (QK^T, AV), then the LM head L H V; 2 sequences per micro-batch
    L, H, V = SEQ, 32, 64
    assert callback.result.iteration.forward.macs == ga * BATCH * (2 * (12 * L * H * H + 2 * L * L * H) + L * H * V)
    assert m["flopsight/bwd_flops"] > m["flopsight/fwd_flops"] and m["flopsight/step_flops"] > 0  # AdamW
    assert m["flopsight/flops"] == m["flopsight/fwd_flops"] + m["flopsight/bwd_flops"] + m["flopsight/step_flops"]
    latency = m["flopsight/iter_latency_s"]
    assert latency > 0 and m["flopsight/micro_batches"] == ga
    assert m["flopsight/flops_per_second"] == pytest.approx(m["flopsight/flops"] / latency)
    assert m["flopsight/samples_per_second"] == pytest.approx(BATCH * ga / latency)
    assert m["flopsight/tokens_per_second"] == pytest.approx(BATCH * SEQ * ga / latency)
    if peak is None:
        assert "flopsight/mfu" not in m
    else:
        assert m["flopsight/mfu"] == pytest.approx(m["flopsight/model_flops"] / latency / peak)
    assert ("flopsight/memory_peak_bytes" in m) == (ga == 2)
    if ga == 2:
        assert m["flopsight/memory_peak_bytes"] == callback.result.memory.peak > 0

    # the report, in output_dir: the same step
    out = Path(trainer.args.output_dir)
    assert callback.written == [str(out / "profile.json"), str(out / "profile.html")]
    saved = flopsight.load(out / "profile.json")
    assert saved.iteration.forward.flops == m["flopsight/fwd_flops"]
    assert saved.iteration.micro_batches == ga
    assert "<html" in (out / "profile.html").read_text()[:500].lower()
    assert_nothing_left(trainer)


def test_several_steps_are_each_measured_and_the_metrics_are_one_steps(tmp_path):
    callback = FlopsightCallback(profile_step=1, output=None, steps=2)
    trainer_for(tmp_path, [callback], max_steps=4).train()
    r = callback.result
    assert r.samples.count == 2 and not r.samples.first_step
    assert (r.iteration.forward.calls, r.iteration.step.calls) == (1, 1)
    # one step's tokens per second: BATCH * SEQ tokens over the (median) step's wall time
    expected = BATCH * SEQ / r.iteration.latency
    assert abs(callback.metrics["flopsight/tokens_per_second"] - expected) < 1e-6 * expected


def test_training_is_unchanged_by_profiling(tmp_path):
    plain = trainer_for(tmp_path / "plain")
    plain.train()
    profiled = trainer_for(tmp_path / "profiled", [FlopsightCallback(profile_step=1, output=None)])
    profiled.train()

    def losses(trainer):
        return [(e["step"], e["loss"], e["grad_norm"]) for e in trainer.state.log_history if "loss" in e]

    assert losses(profiled) == losses(plain) and len(losses(plain)) == 3
    for (name, a), b in zip(plain.model.state_dict().items(), profiled.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert not (tmp_path / "profiled" / "out").exists() or not any((tmp_path / "profiled" / "out").iterdir())
    assert_nothing_left(profiled)


class _Boom(torch.autograd.Function):
    """Identity whose backward raises."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("boom in backward")


class _FailingSGD(torch.optim.SGD):
    def __init__(self, params, armed: list):
        super().__init__(params, lr=0.1)
        self.armed = armed

    def step(self, closure=None):
        if self.armed:
            raise RuntimeError("boom in step")
        return super().step(closure)


class _Arm(TrainerCallback):
    """Arms the failure once step 2 (profile_step 1), the profiled one, began: ``armed`` gets whether the
    callback is profiling then (it runs before this one)."""

    def __init__(self, armed: list, callback: FlopsightCallback):
        self.armed, self.callback = armed, callback

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == 1:
            self.armed.append(self.callback.profiling)


@pytest.mark.parametrize("where", ["forward", "backward", "optimizer step"])
def test_a_step_that_raises_leaves_nothing_running(tmp_path, where):
    armed: list = []
    model = tiny_gpt2()
    optimizer = _FailingSGD(model.parameters(), armed if where == "optimizer step" else [])

    def fail(module, args, output):
        if armed and where == "forward":
            raise RuntimeError("boom in forward")
        if armed and where == "backward":
            return (_Boom.apply(output[0]), *output[1:]) if isinstance(output, tuple) else _Boom.apply(output)
        return output

    callback = FlopsightCallback(profile_step=1, output="profile.json")
    trainer = trainer_for(tmp_path, [callback, _Arm(armed, callback)], model=model, optimizers=(optimizer, None))
    hook = model.transformer.h[0].register_forward_hook(fail)
    try:
        with pytest.raises(RuntimeError, match=f"boom in {where.split()[-1]}"):
            trainer.train()
    finally:
        hook.remove()
    assert armed == [True] and not callback.profiling and callback.result is None
    assert flopsight_entries(trainer) == []
    assert not (Path(trainer.args.output_dir) / "profile.json").exists()
    assert_nothing_left(trainer)


def test_without_a_trainer_above_the_figures_still_reach_log_history(tmp_path):
    """Driven by hand (a loop of one's own): no Trainer on the stack to log through."""
    from transformers import TrainerControl, TrainerState

    model = torch.nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    state, control = TrainerState(), TrainerControl()
    callback = FlopsightCallback(profile_step=0, output="profile.json")
    callback.on_train_begin(args, state, control, model=model)
    callback.on_step_begin(args, state, control, model=model)
    model(torch.ones(2, 8)).sum().backward()
    opt.step()
    state.global_step = 1
    callback.on_step_end(args, state, control, model=model)
    callback.on_train_end(args, state, control, model=model)
    assert state.log_history == [{**callback.metrics, "epoch": state.epoch, "step": 1}]
    assert callback.metrics["flopsight/fwd_flops"] == 2 * (2 * 8 * 4) + 2 * 4  # 2 rows: MACs x 2 + bias
    assert callback.written == [str(tmp_path / "profile.json")] and not model._forward_pre_hooks


def test_mixed_precision_reads_the_peak_of_its_dtype():
    from types import SimpleNamespace

    from flopsight.integrations.hf import _mixed_precision_dtype, step_metrics

    assert [_mixed_precision_dtype(SimpleNamespace(bf16=b, fp16=f)) for b, f in [(1, 0), (0, 1), (0, 0)]] == \
        ["bf16", "fp16", None]
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with flopsight.Profiler(model, optimizer=opt, clock=flopsight.FakeClock()) as prof:
        model(torch.ones(2, 8)).sum().backward()
        opt.step()
    a100 = "NVIDIA A100 80GB PCIe"  # 19.5 TFLOP/s fp32, 312 bf16
    fp32, bf16 = (step_metrics(prof.result, peak=a100, dtype=d)["flopsight/mfu"] for d in (None, "bf16"))
    assert fp32 / bf16 == pytest.approx(312 / 19.5)


def test_the_example_runs(tmp_path, capsys):
    import runpy

    main = runpy.run_path(str(Path(__file__).parent.parent / "examples" / "hf_trainer.py"), run_name="example")["main"]
    callback = main(["--out", str(tmp_path), "--accumulate", "2", "--seq-len", "16", "--batch-size", "2",
                     "--peak", "1e12"])
    out = capsys.readouterr().out
    assert callback.written == [str(tmp_path / "flopsight_profile.html")] and "flopsight/mfu" in out
    assert callback.metrics["flopsight/micro_batches"] == 2


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"profile_step": -1}, ValueError, "profile_step: expected an int >= 0"),
        ({"profile_step": True}, ValueError, "profile_step"),
        ({"profile_step": "2"}, ValueError, "profile_step"),
        ({"output": "profile.pdf"}, ValueError, "output: 'profile.pdf' has no report ending"),
        ({"output": []}, ValueError, "output: expected a file name"),
        ({"output": ["a.json", 3]}, TypeError, "output: expected a file name"),
        ({"peak": "NVIDIA H10"}, ValueError, "peak: no device named 'NVIDIA H10'"),
        ({"peak": -1.0}, ValueError, "peak: expected a positive number"),
        ({"peak": [1e12]}, TypeError, "peak: expected None"),
        ({"memory": "yes"}, TypeError, "memory: expected a bool"),
        ({"dtype": "bf17"}, ValueError, "dtype: expected one of"),
        ({"gather_timeout": 0}, ValueError, "gather_timeout"),
        ({"attention": "sparse"}, ValueError, "attention"),
        ({"batch_size": 0}, ValueError, "batch_size"),
    ],
)
def test_arguments_are_checked_when_built(kwargs, error, match):
    with pytest.raises(error, match=match):
        FlopsightCallback(**kwargs)


def test_a_step_never_reached_warns_and_writes_nothing(tmp_path):
    callback = FlopsightCallback(profile_step=5, output="profile.html")
    trainer = trainer_for(tmp_path, [callback], max_steps=2)
    with pytest.warns(UserWarning, match="profile_step=5 was never reached: training ended at global step 2"):
        trainer.train()
    assert callback.result is None and callback.written == [] and flopsight_entries(trainer) == []
    assert not (Path(trainer.args.output_dir) / "profile.html").exists()


def test_flopsight_alone_does_not_import_transformers():
    code = "import sys, flopsight, flopsight.integrations; print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_two_ranks_both_profile_rank_0_gathers_and_writes(gloo_scenarios):
    tmp_path = gloo_scenarios / "hf"  # tests/multirank/hf_worker.py's files
    rank0, rank1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert (rank0["ranks"], rank0["gathered"], rank0["world_size"]) == (2, [0, 1], 2)
    assert rank0["files"] == ["profile.html", "profile.json"]
    assert (rank1["ranks"], rank1["written"], rank1["files"]) == (0, [], [])
    for report in (rank0, rank1):  # every rank profiled step 2 and logged its own figures
        [entry] = report["logged"]
        assert entry["step"] == 2 and entry["flopsight/fwd_flops"] > 0 and entry["flopsight/micro_batches"] == 1
    saved = flopsight.load(tmp_path / "rank0" / "profile.json")
    assert [r.metadata.rank for r in saved.ranks] == [0, 1]
    # the same model and batch shapes on both ranks: the same forward
    assert saved.ranks[1].iteration.forward.flops == saved.iteration.forward.flops
