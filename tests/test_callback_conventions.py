"""Issue 29, items 10 and 12: the two trainer callbacks choose their step alike (as DeepSpeed's
``profile_step``: the optimizer steps taken before it, default 1) and log the same names; the
Lightning callback's old names stay one release, with a warning; an output path that cannot be
written fails before the model runs (CLI, callbacks, ``check_output_file``)."""

from __future__ import annotations

import os
import warnings

import pytest
import torch
from torch import nn

from flopsight._process import WARNED
from flopsight.cli import main as cli_main
from flopsight.renderers.output import check_output_file

transformers = pytest.importorskip("transformers")
L = pytest.importorskip("lightning")

from helpers import Tokens, tiny_gpt2  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from transformers import Trainer, TrainerCallback, TrainingArguments  # noqa: E402

import flopsight.integrations.hf as hf  # noqa: E402
import flopsight.integrations.lightning as lightning  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*does not have many workers"),
    pytest.mark.filterwarnings("ignore:.*smaller than the logging interval"),
    pytest.mark.filterwarnings("ignore:.*isinstance\\(treespec, LeafSpec\\)"),
]


# -- a Trainer of each kind, recording whether the callback profiled each optimizer step ---
class _HFSteps(TrainerCallback):
    def __init__(self, callback):
        self.callback, self.profiling = callback, []

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.profiling.append(self.callback.profiling)


def hf_run(tmp_path, callback, max_steps=3):
    steps = _HFSteps(callback)
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[], save_strategy="no",
                             per_device_train_batch_size=2, max_steps=max_steps, logging_steps=1, seed=0,
                             disable_tqdm=True)
    trainer = Trainer(model=tiny_gpt2(), args=args, train_dataset=Tokens(), callbacks=[callback, steps])
    trainer.train()
    return steps.profiling


class MLP(L.LightningModule):
    def __init__(self, callback=None):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        self.callback, self.profiling = callback, []

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        return nn.functional.mse_loss(self(batch[0]), batch[1])

    def on_before_optimizer_step(self, optimizer):
        self.profiling.append(self.callback.profiling)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def lightning_run(tmp_path, callback, max_steps=3):
    torch.manual_seed(0)
    module = MLP(callback)
    data = [(torch.randn(2, 8), torch.randn(2, 4)) for _ in range(max_steps)]
    trainer = L.Trainer(default_root_dir=tmp_path, max_steps=max_steps, callbacks=[callback], logger=False,
                        accelerator="cpu", devices=1, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(module, DataLoader(data, batch_size=None))
    return module.profiling


# -- item 10: one numbering, one default, one set of names ---------------------------------
@pytest.mark.parametrize("step", [None, 0])
def test_both_callbacks_profile_the_same_step_and_mark_the_first(tmp_path, step):
    given = {} if step is None else {"profile_step": step}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        hf_cb = hf.FlopsightCallback(output="profile.txt", peak=1e12, **given)
        pl_cb = lightning.FlopsightCallback(output="profile.txt", peak=1e12, **given)
        hf_steps = hf_run(tmp_path / "hf", hf_cb)
        pl_steps = lightning_run(tmp_path / "pl", pl_cb)
    # the default, 1, skips the first step (one step already taken), as DeepSpeed's profile_step
    expected = [False, True, False] if step is None else [True, False, False]
    assert hf_steps == pl_steps == expected
    assert hf_cb.profile_step == pl_cb.profile_step == (1 if step is None else 0)
    assert hf_cb.result.samples.first_step == pl_cb.result.samples.first_step == (step == 0)
    # the report's title, as DeepSpeed's engine words it: the steps taken once the profiled one ended
    # (profile_step 1: the second step, "at step 2"; profile_step 0: the first, "at step 1")
    title = f"Profile Summary at step {2 if step is None else 1}:"
    assert title in (tmp_path / "hf" / "profile.txt").read_text()
    assert title in next((tmp_path / "pl").rglob("profile.txt")).read_text()
    # the same names, the same meanings: tokens/s is the HF callback's alone (token ids as input)
    hf_names = set(hf_cb.metrics) - {"flopsight/tokens_per_second"}
    pl_names = {name for name in pl_cb.metrics if not name.startswith(lightning.DEPRECATED_PREFIX)}
    assert hf_names == pl_names and "flopsight/model_flops" in pl_names and "flopsight/mfu" in pl_names
    for cb in (hf_cb, pl_cb):
        it = cb.result.iteration
        assert (cb.metrics["flopsight/model_flops"], cb.metrics["flopsight/iter_latency_s"]) == (it.model_flops,
                                                                                                 it.latency)


def test_lightnings_old_names_are_still_logged_with_one_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(WARNED, "_keys", set())  # a fresh process's: nothing warned yet
    callback = lightning.FlopsightCallback(output=None)
    with pytest.warns(FutureWarning, match=r"flopsight/train/\.\.\. are deprecated") as caught:
        lightning_run(tmp_path, callback)
    assert sum("are deprecated" in str(w.message) for w in caught) == 1
    m = callback.metrics
    # old name -> the same figure under its new name
    assert m["flopsight/train/device/flops"] == m["flopsight/model_flops"]
    assert m["flopsight/train/device/forward_flops"] == m["flopsight/fwd_flops"]
    assert m["flopsight/train/device/step_time"] == m["flopsight/iter_latency_s"]
    assert m["flopsight/train/device/batches"] == m["flopsight/micro_batches"] == 1


def test_hf_warns_once_that_profile_step_counts_differently_now(monkeypatch):
    monkeypatch.setattr(WARNED, "_keys", set())  # a fresh process's: nothing warned yet
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hf.FlopsightCallback(profile_step=0, output=None)  # refused until 0.1.0: written for today's numbering
    assert not [w for w in caught if issubclass(w.category, FutureWarning)]
    with pytest.warns(FutureWarning, match=r"profile_step=3\) now counts .* profiles the Trainer's step 4 .* "
                                           r"pass profile_step=2 for that one"):
        hf.FlopsightCallback(profile_step=3, output=None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hf.FlopsightCallback(output=None)
    assert not [w for w in caught if issubclass(w.category, FutureWarning)]


@pytest.mark.parametrize("callbacks", [hf, lightning], ids=["hf", "lightning"])
def test_steps_must_be_a_count_when_the_callback_is_made(callbacks):
    # ProfileOptions takes steps=None (one step, for Profiler); a callback adds it to profile_step
    with pytest.raises(ValueError, match=r"^steps: expected a positive int"):
        callbacks.FlopsightCallback(steps=None)


# -- item 12: a path that cannot be written fails before the model runs --------------------
def test_a_path_under_a_file_is_refused_naming_the_argument(tmp_path):
    (tmp_path / "notes").write_text("mine")
    for path in (tmp_path / "notes" / "r.html", tmp_path / "notes" / "a" / "b" / "r.json"):
        with pytest.raises(NotADirectoryError, match=r"^-o: cannot write .*/notes' is a file, not a folder"):
            check_output_file(str(path), "-o")
    with pytest.raises(IsADirectoryError, match="^-o: .* is a directory"):
        check_output_file(str(tmp_path), "-o")
    check_output_file(str(tmp_path / "new" / "deeper" / "r.html"), "-o")  # missing folders are made


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any folder")
def test_a_folder_that_cannot_be_written_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(PermissionError, match="output: cannot write .* is not writable"):
        check_output_file(str(locked / "r.html"), "output")


def test_the_cli_refuses_it_in_one_line_before_building_the_model(tmp_path, capsys):
    (tmp_path / "somefile").write_text("mine")
    (tmp_path / "factory.py").write_text(
        "import torch\n"
        "def pair():\n    open(__file__ + '.built', 'w').close()\n"
        "    return torch.nn.Linear(4, 2), torch.ones(1, 4)\n")
    code = cli_main(["profile", f"{tmp_path / 'factory.py'}:pair", "-o", str(tmp_path / "somefile" / "r.html")])
    err = capsys.readouterr().err
    assert code == 2 and not (tmp_path / "factory.py.built").exists()
    assert "argument -o/--output: cannot write" in err and "is a file, not a folder" in err
    assert "Traceback" not in err


def test_the_hf_callback_refuses_it_before_the_first_step(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "reports").write_text("mine")
    forwards = []
    callback = hf.FlopsightCallback(profile_step=0, output="reports/profile.html")
    args = TrainingArguments(output_dir=str(out), use_cpu=True, report_to=[], save_strategy="no",
                             per_device_train_batch_size=2, max_steps=2, disable_tqdm=True)
    model = tiny_gpt2()
    model.register_forward_pre_hook(lambda *a: forwards.append(1))
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[callback])
    with pytest.raises(NotADirectoryError, match="^output: cannot write .* is a file, not a folder"):
        trainer.train()
    assert forwards == [] and not callback.profiling


def test_the_lightning_callback_refuses_it_before_the_first_step(tmp_path):
    (tmp_path / "reports").write_text("mine")
    callback = lightning.FlopsightCallback(profile_step=0, output="reports/profile.html")
    with pytest.raises(NotADirectoryError, match="^output: cannot write .* is a file, not a folder"):
        lightning_run(tmp_path, callback)
    assert not callback.profiling and callback.result is None
