"""flopsight.integrations.lightning.FlopsightCallback in a real lightning.Trainer on the CPU."""

import csv
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks
from torch.utils.data import DataLoader

L = pytest.importorskip("lightning")
from lightning.pytorch.callbacks import ThroughputMonitor  # noqa: E402
from lightning.pytorch.loggers import CSVLogger  # noqa: E402

import flopsight  # noqa: E402
from flopsight.integrations.lightning import DEPRECATED_METRICS, METRICS, PREFIX, FlopsightCallback  # noqa: E402
from flopsight.integrations.lightning import DEPRECATED_PREFIX as OLD

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    # Lightning's own advice on a toy run, not ours to fix
    pytest.mark.filterwarnings("ignore:.*does not have many workers"),
    pytest.mark.filterwarnings("ignore:.*smaller than the logging interval"),
    pytest.mark.filterwarnings("ignore:.*isinstance\\(treespec, LeafSpec\\)"),
    pytest.mark.filterwarnings("ignore:.*flops_per_batch"),
]

IN, HIDDEN, OUT = 8, 16, 4


class MLP(L.LightningModule):
    """Records the loss of every training step; ``fail_at`` raises in that global step."""

    def __init__(self, fail_at=None, manual=False):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT))
        self.losses = []
        self.fail_at = fail_at
        self.automatic_optimization = not manual

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        if self.trainer.global_step == self.fail_at:
            raise RuntimeError("boom in training_step")
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        self.losses.append(loss.item())
        if not self.automatic_optimization:
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.01)


def batches(n=8):
    """Batch k has k + 1 rows, so a result's sample count tells which batches it saw."""
    gen = torch.Generator().manual_seed(1)
    return [(torch.randn(k + 1, IN, generator=gen), torch.randn(k + 1, OUT, generator=gen)) for k in range(n)]


def fit(root, callbacks=(), module=None, *, max_steps=3, logger=False, **trainer_args):
    torch.manual_seed(0)
    module = module or MLP()
    trainer = L.Trainer(default_root_dir=root, max_steps=max_steps, callbacks=list(callbacks), logger=logger,
                        accelerator="cpu", devices=1, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, **trainer_args)
    trainer.fit(module, DataLoader(batches(), batch_size=None))
    return trainer, module


def plain_step(rows_per_micro_batch):
    """The same model, data and Adam step in a plain loop, profiled: what the callback must
    count (Lightning's loss scaling and the loss itself run outside the model)."""
    torch.manual_seed(0)
    model = MLP().net
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    data = {x.shape[0]: (x, y) for x, y in batches()}
    with flopsight.Profiler(model, optimizer=opt, gather_timeout=None) as prof:
        for rows in rows_per_micro_batch:
            x, y = data[rows]
            nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    return prof.result.iteration


@pytest.fixture(autouse=True)
def optimizer_hooks_left_clean():
    before = (dict(_global_optimizer_pre_hooks), dict(_global_optimizer_post_hooks))
    yield
    assert (dict(_global_optimizer_pre_hooks), dict(_global_optimizer_post_hooks)) == before


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# -- the step, its figures and where they go ---------------------------------------------
def test_logs_measured_figures_beside_throughput_monitor_and_writes_the_report(tmp_path):
    callback = FlopsightCallback(profile_step=1, output="profile.html", peak=1e12)
    monitor = ThroughputMonitor(batch_size_fn=lambda batch: batch[0].shape[0], window_size=2)
    trainer, _ = fit(tmp_path, [callback, monitor], logger=CSVLogger(tmp_path), log_every_n_steps=1)

    # step 1 is batch 1 (2 rows); its FLOPs are what flopsight counts for the same step by hand
    it = callback.result.iteration
    b = 2
    assert (it.samples, it.forward.calls, it.backward.calls, it.step.calls) == (b, 1, 1, 1)
    assert it.forward.macs == b * (IN * HIDDEN + HIDDEN * OUT)
    # weight gradients of both layers, and the input gradient of the second (not of x)
    assert it.backward.macs == b * (IN * HIDDEN + 2 * HIDDEN * OUT)
    expected = plain_step([b])
    assert (it.forward.flops, it.backward.flops, it.step.flops) == (
        expected.forward.flops, expected.backward.flops, expected.step.flops)
    assert it.step.flops > 0  # Adam's arithmetic, measured

    new = {name[len(PREFIX):]: v for name, v in callback.metrics.items() if not name.startswith(OLD)}
    assert set(new) == {"iter_latency_s", "fwd_latency_s", "bwd_latency_s", "step_latency_s", "fwd_flops",
                        "bwd_flops", "step_flops", "flops", "model_flops", "flops_per_second", "micro_batches",
                        "samples_per_second", "mfu"}
    assert set(new) <= set(METRICS)  # every name logged is documented
    assert (new["model_flops"], new["fwd_flops"], new["iter_latency_s"]) == (it.model_flops, it.forward.flops,
                                                                             it.latency)
    assert new["mfu"] == pytest.approx(it.model_flops / it.latency / 1e12)
    assert new["samples_per_second"] == b / it.latency  # one rank: the job's samples are this rank's
    # the names of 0.1.0, logged this release too
    m = {name[len(OLD):]: value for name, value in callback.metrics.items() if name.startswith(OLD)}
    assert set(m) == {"device/flops", "device/forward_flops", "device/backward_flops", "device/optimizer_flops",
                      "device/step_time", "device/batches", "device/samples", "device/batches_per_sec",
                      "device/samples_per_sec", "device/flops_per_sec", "device/mfu"}
    assert set(m) <= set(DEPRECATED_METRICS)
    assert m["device/flops"] == it.model_flops == expected.model_flops
    assert (m["device/batches"], m["device/samples"], m["device/step_time"]) == (1, b, it.latency)
    assert m["device/samples_per_sec"] == b / it.latency
    assert m["device/flops_per_sec"] == it.model_flops / it.latency
    assert m["device/mfu"] == pytest.approx(m["device/flops_per_sec"] / 1e12)

    # callback_metrics (Lightning's float32 tensors), logged_metrics and metrics.csv, at step 1
    for name, value in callback.metrics.items():
        assert trainer.callback_metrics[name].item() == pytest.approx(value, rel=1e-6)
        assert trainer.logged_metrics[name] == value
    rows = [r for r in read_csv(Path(trainer.logger.log_dir) / "metrics.csv") if r[PREFIX + "model_flops"]]
    assert len(rows) == 1 and rows[0]["step"] == "1"
    assert int(rows[0][PREFIX + "model_flops"]) == int(rows[0][OLD + "device/flops"]) == it.model_flops
    # ThroughputMonitor's own names are there too, untouched
    monitor = {name for name in trainer.logged_metrics if name.startswith("train/")}
    assert "train/device/samples_per_sec" in monitor and not monitor & set(callback.metrics)
    assert all(name.startswith("flopsight/") for name in callback.metrics)

    # the report, in the logger's directory, with the same step
    assert callback.path == os.path.join(trainer.logger.log_dir, "profile.html")
    assert "<html" in Path(callback.path).read_text()[:200].lower()


def test_only_the_chosen_step_is_profiled(tmp_path):
    callback = FlopsightCallback(profile_step=3, output=None)
    fit(tmp_path, [callback], max_steps=5)
    it = callback.result.iteration
    assert (callback.step, it.samples, it.forward.calls, it.step.calls) == (3, 4, 1, 1)  # batch 3 has 4 rows
    assert callback.path is None and not list(tmp_path.rglob("*.html"))


def test_several_steps_each_measured_with_one_steps_counts(tmp_path):
    callback = FlopsightCallback(profile_step=2, output=None, steps=3)
    fit(tmp_path, [callback], max_steps=6)
    r = callback.result
    # steps 2, 3 and 4 (batches with 3, 4 and 5 rows): one of them is the result, every one a sample
    assert r.samples.count == 3 and r.samples.unit == "step" and not r.samples.first_step
    assert (r.iteration.forward.calls, r.iteration.step.calls) == (1, 1) and r.iteration.samples in (3, 4, 5)
    assert callback.metrics[PREFIX + "micro_batches"] == 1


def test_profiling_the_first_step_says_so(tmp_path):
    callback = FlopsightCallback(profile_step=0, output=None)
    fit(tmp_path, [callback], max_steps=2)
    assert callback.result.samples.first_step
    assert "the first profiled step was the first the process ran" in callback.result.render()


def test_accumulated_step_covers_every_micro_batch(tmp_path):
    callback = FlopsightCallback(profile_step=1, output="profile.json")
    trainer, _ = fit(tmp_path, [callback], accumulate_grad_batches=2)
    it = callback.result.iteration
    # step 1 is batches 2 and 3 (3 and 4 rows): two forwards and backwards, one optimizer step
    assert (it.forward.calls, it.backward.calls, it.step.calls, it.samples) == (2, 2, 1, 7)
    assert callback.metrics[PREFIX + "micro_batches"] == 2
    expected = plain_step([3, 4])  # the second backward adds into the gradients: counted too
    assert (it.forward.flops, it.backward.flops, it.step.flops) == (
        expected.forward.flops, expected.backward.flops, expected.step.flops)
    saved = flopsight.load(callback.path)
    assert callback.path == os.path.join(str(tmp_path), "profile.json")  # no logger: default_root_dir
    assert saved.iteration.model_flops == it.model_flops


def test_manual_optimization(tmp_path):
    callback = FlopsightCallback(profile_step=1, output=None)
    fit(tmp_path, [callback], MLP(manual=True))
    it = callback.result.iteration
    expected = plain_step([2])
    assert (it.forward.calls, it.backward.calls, it.step.calls) == (1, 1, 1)
    assert (it.forward.flops, it.backward.flops, it.step.flops) == (
        expected.forward.flops, expected.backward.flops, expected.step.flops)


def test_a_closure_run_by_the_step_is_forward_and_backward_not_step():
    """What Lightning's automatic optimization relies on: ``opt.step(closure)`` runs the
    forward and backward from inside the step (flopsight.capture.sources.optimizer)."""
    def measured(use_closure):
        torch.manual_seed(0)
        model = nn.Linear(IN, OUT)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.ones(3, IN)

        def closure():
            opt.zero_grad()
            loss = model(x).sum()
            loss.backward()
            return loss

        with flopsight.Profiler(model, optimizer=opt, gather_timeout=None) as prof:
            if use_closure:
                opt.step(closure)
            else:
                closure()
                opt.step()
        it = prof.result.iteration
        return [(s.macs, s.flops, s.calls) for s in (it.forward, it.backward, it.step)]

    assert measured(True) == measured(False)
    assert measured(True)[0] == (3 * IN * OUT, 2 * 3 * IN * OUT + 3 * OUT, 1)


# -- leaving training as it was ----------------------------------------------------------
def test_training_is_unchanged_and_the_module_left_as_found(tmp_path):
    _, plain = fit(tmp_path / "plain", max_steps=4)
    _, profiled = fit(tmp_path / "profiled", [FlopsightCallback(profile_step=1, output=None)], max_steps=4)
    assert profiled.losses == plain.losses and len(plain.losses) == 4
    for a, b in zip(plain.parameters(), profiled.parameters()):
        assert torch.equal(a, b)
    assert set(vars(profiled)) == set(vars(plain))
    for m in profiled.modules():
        assert not (m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks)


def test_an_exception_in_the_profiled_step_leaves_nothing_installed(tmp_path):
    callback = FlopsightCallback(profile_step=1, output="profile.html")
    with pytest.raises(RuntimeError, match="boom in training_step"):
        fit(tmp_path, [callback], MLP(fail_at=1))
    assert not callback.profiling and callback.result is None and callback.path is None
    assert not list(tmp_path.rglob("profile.html"))
    # the process goes on profiling as before (the autouse fixtures check hooks and modes)
    result = flopsight.profile(nn.Linear(2, 2), torch.ones(1, 2), gather_timeout=None)
    assert result.total.forward.macs == 4


def test_a_step_never_reached_warns(tmp_path):
    callback = FlopsightCallback(profile_step=7, output="profile.html")
    with pytest.warns(UserWarning, match=r"profile_step=7 was never reached: training ended at trainer.global_step 2"):
        fit(tmp_path, [callback], max_steps=2)
    assert callback.result is None and not list(tmp_path.rglob("profile.html"))


# -- arguments -------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, error, match", [
    ({"profile_step": -1}, ValueError, "profile_step: expected an int >= 0"),
    ({"profile_step": True}, ValueError, "profile_step"),
    ({"profile_step": 1.0}, ValueError, "profile_step"),
    ({"output": 3}, TypeError, "output: expected a file name"),
    ({"output": ""}, TypeError, "output"),
    ({"peak": 0}, ValueError, "peak: expected None, a positive number"),
    ({"peak": "H1OO"}, ValueError, "peak: no device named 'H1OO'"),
    ({"peak": [1e12]}, ValueError, "peak"),
    ({"dtype": "float99"}, ValueError, "dtype: expected one of"),
    ({"memory": "yes"}, TypeError, "memory: expected a bool"),
    ({"batch_size_fn": 8}, TypeError, "batch_size_fn: expected a function"),
    ({"gather_timeout": 0}, ValueError, "gather_timeout: expected a positive number"),
])
def test_arguments_are_checked_and_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        FlopsightCallback(**kwargs)


def test_output_directory_is_rejected(tmp_path):
    with pytest.raises(IsADirectoryError, match="output: .* is a directory"):
        FlopsightCallback(output=tmp_path)


def test_batch_size_fn_counts_samples(tmp_path):
    callback = FlopsightCallback(profile_step=2, output=None, batch_size_fn=lambda batch: 10 * len(batch[0]))
    fit(tmp_path, [callback])
    assert callback.metrics[OLD + "device/samples"] == 30  # batch 2 has 3 rows
    # 30 samples on the one rank over the step's wall time
    assert callback.metrics[PREFIX + "samples_per_second"] == 30 / callback.result.iteration.latency


def test_the_core_does_not_import_lightning():
    code = "import sys, flopsight, flopsight.integrations; print('lightning' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# -- the how-to's example, and two ranks -----------------------------------------------------
def test_example_script(tmp_path, capsys):
    main = runpy.run_path(str(ROOT / "examples" / "lightning_trainer.py"), run_name="example")["main"]
    callback = main(["--out", str(tmp_path), "--accumulate", "2", "--peak", "1e12"])
    out = capsys.readouterr().out
    assert f"{PREFIX}mfu" in out and "report: " in out
    assert Path(callback.path).parent == tmp_path / "lightning" / "version_0"
    assert (Path(callback.path).parent / "metrics.csv").exists()
    assert callback.result.iteration.forward.calls == 2


def test_two_ranks_ddp(gloo_scenarios):
    """Lightning's strategy="ddp" on two gloo ranks (tests/multirank/lightning_worker.py)."""
    tmp_path = gloo_scenarios / "lightning"
    rank0, rank1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert (rank0["rank"], rank1["rank"], rank0["world_size"]) == (0, 1, 2)
    # every rank profiled its step; rank 0 gathered both and wrote the one report
    assert rank0["forward_calls"] == rank1["forward_calls"] == 1
    assert len(rank0["ranks"]) == 2 and rank1["ranks"] == []
    assert rank0["path"] == os.path.join(rank0["log_dir"], "profile.json") and rank1["path"] is None
    assert [p.name for p in tmp_path.rglob("profile.json")] == ["profile.json"]
    assert flopsight.load(rank0["path"]).metadata.world_size == 2
    # device figures on each rank; the job's figures, from both ranks' results, on rank 0 only
    flops = rank0["metrics"][PREFIX + "model_flops"]
    assert rank1["metrics"][PREFIX + "model_flops"] == flops == rank0["ranks"][0] == rank0["ranks"][1]
    assert rank1["metrics"][OLD + "device/flops"] == flops
    assert rank0["metrics"][OLD + "flops"] == 2 * flops  # the job's, by the 0.1.0 names only
    assert OLD + "flops_per_sec" in rank0["metrics"] and OLD + "flops" not in rank1["metrics"]
    rows = [r for r in read_csv(Path(rank0["log_dir"]) / "metrics.csv") if r.get(OLD + "flops")]
    assert len(rows) == 1 and int(rows[0][OLD + "flops"]) == 2 * flops
