"""flopsight.attach: DeepSpeed's flops_profiler config block driving any training loop."""

import json
import os
import re
import warnings

import pytest
import torch
from torch import nn
from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks

import flopsight
from flopsight.integrations.deepspeed.config import FlopsProfilerConfig, parse_config


def make(width=8):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(width, 16), nn.Linear(16, 4))
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def hooks_of(opt):
    """Sizes of every optimizer hook registry attach() may touch."""
    return (
        len(opt._optimizer_step_pre_hooks),
        len(opt._optimizer_step_post_hooks),
        len(_global_optimizer_pre_hooks),
        len(_global_optimizer_post_hooks),
    )


def enabled(**block):
    return {"train_batch_size": 8, "flops_profiler": {"enabled": True, **block}}


def train(model, opt, steps, *, after_step=None, rows=lambda step: 4):
    """A plain loop: step i (1-based) trains on rows(i) rows."""
    for step in range(1, steps + 1):
        x = torch.ones(rows(step), 8)
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        if after_step:
            after_step(step)


def value(text, label):
    m = re.search(rf"^{re.escape(label)}.*?:\s+(\S.*?)\s*$", text, re.M)
    assert m, f"no summary line {label!r}"
    return m.group(1)


# -- when it profiles and prints ----------------------------------------------------------------
def test_prints_at_the_end_of_profile_step_and_profiles_that_step_only(capsys):
    model, opt = make()
    before = hooks_of(opt)
    printed = {}
    # 2 steps taken before it: the third, as DeepSpeed's engine counts (global_steps == 2)
    handle = flopsight.attach(model, opt, enabled(profile_step=2, detailed=False))

    def after_step(step):
        printed[step] = capsys.readouterr().out
        # attached until step 3 ends, nothing at all afterwards
        assert handle.attached == (step < 3) and handle.done == (step >= 3)

    train(model, opt, 5, after_step=after_step, rows=lambda step: step)  # step i: i rows
    handle.close()
    assert [s for s, out in printed.items() if out] == [3]
    text = printed[3]
    assert "Profile Summary at step 3:" in text and "Detailed Profile" not in text
    # the iteration of step 3 (3 rows), whole: one forward, one backward, one step
    assert value(text, "batch size per GPU") == "3"
    it = handle.result.iteration
    assert (it.forward.calls, len(handle.result.spans["backward"]), it.step.calls) == (1, 1, 1)
    assert it.forward.macs == 3 * (8 * 16 + 16 * 4)
    assert handle.report == text and handle.steps == 3  # not counted once detached
    assert hooks_of(opt) == before


def test_profile_step_0_starts_at_attach_and_marks_the_first_step(capsys):
    model, opt = make()
    with flopsight.attach(model, opt, {"enabled": True, "profile_step": 0}) as handle:  # the block alone
        assert handle.attached and "profiling" in repr(handle)
        train(model, opt, 2)
    # DeepSpeed's title: the engine's step count when it prints, 1 after the first step
    assert capsys.readouterr().out.count("Profile Summary at step 1:") == 1
    assert handle.result.samples.first_step and handle.steps == 1


def test_the_default_profile_step_1_profiles_the_second_step(capsys):
    model, opt = make()
    with flopsight.attach(model, opt, {"enabled": True}) as handle:  # the block alone
        assert handle.attached and "waiting" in repr(handle)
        train(model, opt, 3, rows=lambda step: step)  # step i: i rows
    text = capsys.readouterr().out
    assert text.count("Profile Summary at step 2:") == 1 and value(text, "batch size per GPU") == "2"
    assert handle.steps == 2 and not handle.result.samples.first_step
    # DeepSpeed's defaults: every depth, top 1 module, the detailed profile; 8*16+16 + 16*4+4 params
    assert "Detailed Profile per GPU" in text and "    params      - {'Sequential': '212'}" in text
    assert re.search(r"^depth 1:", text, re.M)


@pytest.mark.parametrize("profile_step, steps", [(0, 1), (1, 1), (2, 1), (0, 2), (1, 3)])
def test_profile_step_counts_the_steps_taken_before_it_as_deepspeeds_engine(profile_step, steps, capsys):
    # the engine profiles the step during which global_steps == profile_step (global_steps: the
    # steps done), and prints after the last profiled one, titled with global_steps then
    model, opt = make()
    taken = []  # the steps done when each forward ran: the engine's global_steps at the time
    profiled = []  # whether each forward was profiled
    model.register_forward_pre_hook(lambda m, args: taken.append(handle.steps) or profiled.append(
        "profiling" in repr(handle)))
    config = enabled(profile_step=profile_step, steps=steps, detailed=False)
    with flopsight.attach(model, opt, config) as handle:
        train(model, opt, profile_step + steps + 1, rows=lambda step: step)  # step i (from 1): i rows
    assert [t for t, p in zip(taken, profiled) if p] == list(range(profile_step, profile_step + steps))
    # a run of several steps keeps the median one: rows profile_step + 1 ... profile_step + steps
    assert profile_step + 1 <= handle.result.iteration.samples <= profile_step + steps
    assert f"Profile Summary at step {profile_step + steps}:" in capsys.readouterr().out
    assert handle.result.samples.first_step == (profile_step == 0)


def test_other_step_hooks_keep_running_and_two_handles_can_share_a_step(capsys):
    from torch.optim.optimizer import register_optimizer_step_post_hook

    model, opt = make()
    calls = []
    early = register_optimizer_step_post_hook(lambda o, a, k: calls.append("early"))
    own = opt.register_step_post_hook(lambda o, a, k: calls.append("own"))
    try:
        first = flopsight.attach(model, opt, enabled(profile_step=1, detailed=False))
        second = flopsight.attach(model, opt, enabled(profile_step=1, detailed=False, top_modules=2))
        late = register_optimizer_step_post_hook(lambda o, a, k: calls.append("late"))
        train(model, opt, 3)
        late.remove()
    finally:
        early.remove()
        own.remove()
    assert calls == ["own", "early", "late"] * 3
    out = capsys.readouterr().out
    assert out.count("Profile Summary at step 2:") == 2 and first.done and second.done
    assert hooks_of(opt) == (0, 0, 0, 0)


def test_gradient_accumulation_profiles_every_micro_batch_of_the_step(capsys):
    model, opt = make()
    with flopsight.attach(model, opt, enabled(profile_step=2)) as handle:
        for _ in range(3):
            for _ in range(2):  # two micro-batches per optimizer step
                model(torch.ones(4, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
    it = handle.result.iteration
    assert it.micro_batches == 2 and it.step.calls == 1 and it.samples == 8
    assert value(capsys.readouterr().out, "micro-batches") == "2"


def test_output_file(tmp_path, capsys):
    model, opt = make()
    out = tmp_path / "flops.txt"
    with flopsight.attach(model, opt, enabled(profile_step=1, output_file=str(out), module_depth=0, top_modules=2)):
        train(model, opt, 3)
    assert capsys.readouterr().out == ""
    text = out.read_text()
    assert "Profile Summary at step 2:" in text and not re.search(r"^depth 1:", text, re.M)
    assert "bwd latency:" in text and "step latency:" in text


def test_config_file_path(tmp_path, capsys):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 4, "flops_profiler": {"enabled": True}}))
    model, opt = make()
    with flopsight.attach(model, opt, str(path)):
        train(model, opt, 2)
    assert "Profile Summary at step 2:" in capsys.readouterr().out


def test_output_file_in_a_missing_directory_is_created_as_deepspeed_does(tmp_path):
    model, opt = make()
    out = tmp_path / "reports" / "step1" / "x.txt"
    with flopsight.attach(model, opt, enabled(profile_step=0, output_file=str(out))):
        train(model, opt, 1)
    assert "Profile Summary at step 1:" in out.read_text()


# -- nothing to do, or never reached ----------------------------------------------------------
def test_disabled_is_a_no_op(capsys):
    model, opt = make()
    for config in ({"flops_profiler": {"enabled": False, "profile_step": 1}},
                   {"train_batch_size": 8, "flops_profiler": {}}, {}):
        handle = flopsight.attach(model, opt, config)
        assert not handle.enabled and not handle.attached and "disabled" in repr(handle)
        assert hooks_of(opt) == (0, 0, 0, 0)
        train(model, opt, 2)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            handle.close()
        assert handle.result is None and handle.steps == 0
    assert capsys.readouterr().out == ""


def test_profile_step_never_reached_warns_and_leaves_nothing(capsys):
    model, opt = make()
    handle = flopsight.attach(model, opt, enabled(profile_step=10))
    train(model, opt, 3)
    with pytest.warns(UserWarning, match=r"profile_step=10 was never reached: 3 steps ran of the 11 needed"):
        handle.close()
    assert not handle.attached and handle.result is None and hooks_of(opt) == (0, 0, 0, 0)
    handle.close()  # twice is harmless and silent
    train(model, opt, 10)
    assert capsys.readouterr().out == "" and handle.steps == 3


def test_never_reached_while_profiling_stops_the_profiler():
    model, opt = make()
    with pytest.warns(UserWarning, match=r"profile_step=1 was never reached: 1 step ran of the 2 needed"):
        with flopsight.attach(model, opt, enabled(profile_step=1)) as handle:
            train(model, opt, 1)  # profiling started after step 1
            assert "profiling" in repr(handle)
    assert not handle.attached and hooks_of(opt) == (0, 0, 0, 0)


def test_an_error_in_the_loop_leaves_nothing_attached():
    model, opt = make()
    with pytest.raises(RuntimeError, match="boom"), pytest.warns(UserWarning, match="never reached: 0 steps ran"):
        with flopsight.attach(model, opt, enabled()):
            model(torch.ones(2, 8))
            raise RuntimeError("boom")
    assert hooks_of(opt) == (0, 0, 0, 0)


# -- config validation ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "config, message",
    [
        ({"enabled": True, "profile_steps": 3},
         r"unknown key 'profile_steps'.*ignored \(did you mean 'profile_step'\?\)"),
        ({"flops_profiler": {"enabled": True, "depth": 2}}, r"config\['flops_profiler'\]: unknown key 'depth' in the"),
        ({"train_batch_size": 8, "flops_profile": {"enabled": True}}, r"no 'flops_profiler' block.*did you mean"),
    ],
)
def test_unknown_keys_warn_and_are_ignored_as_deepspeed_ignores_them(config, message):
    with pytest.warns(UserWarning, match=message):
        cfg = parse_config(config)
    assert cfg.profile_step == 1 and cfg.module_depth == -1


def test_a_config_without_the_block_is_off():
    assert parse_config({"train_batch_size": 8, "zero_optimization": {"stage": 2}}) == FlopsProfilerConfig()


def test_defaults_are_deepspeeds():
    assert parse_config({}) == FlopsProfilerConfig(
        enabled=False, profile_step=1, module_depth=-1, top_modules=1, detailed=True, output_file=None
    )
    assert parse_config({"flops_profiler": {"enabled": True, "output_file": ""}}).output_file is None


@pytest.mark.parametrize(
    "config, error, message",
    [
        ({"flops_profiler": {"enabled": "yes"}}, TypeError,
         r"config\['flops_profiler'\]\['enabled'\]: expected a bool, got 'yes'"),
        ({"enabled": True, "profile_step": -1}, TypeError, r"config\['profile_step'\]: expected an int >= 0 .* got -1"),
        ({"enabled": True, "profile_step": 2.0}, TypeError, r"\['profile_step'\]: expected an int >= 0"),
        ({"enabled": True, "profile_step": True}, TypeError, r"\['profile_step'\]: expected an int >= 0"),
        ({"enabled": True, "module_depth": -2}, TypeError, r"\['module_depth'\]: expected an int >= -1"),
        ({"enabled": True, "top_modules": "3"}, TypeError, r"\['top_modules'\]: expected an int >= 0, got '3'"),
        ({"enabled": True, "detailed": 1}, TypeError, r"\['detailed'\]: expected a bool, got 1"),
        ({"enabled": True, "output_file": 3}, TypeError, r"\['output_file'\]: expected a path or None"),
        ({"flops_profiler": [1]}, TypeError, r"config\['flops_profiler'\]: expected a dict, got list"),
        ([("enabled", True)], TypeError, r"config: expected a dict"),
    ],
)
def test_bad_config_is_an_error_naming_the_key(config, error, message):
    model, opt = make()
    with pytest.raises(error, match=message):
        flopsight.attach(model, opt, config)
    assert hooks_of(opt) == (0, 0, 0, 0)


def test_bad_model_or_optimizer():
    model, opt = make()
    with pytest.raises(TypeError, match="optimizer: expected a torch.optim.Optimizer"):
        flopsight.attach(model, [opt], enabled())
    with pytest.raises(TypeError, match="optimizer: expected a torch.optim.Optimizer"):
        flopsight.attach(model, None, enabled())
    with pytest.raises(TypeError, match="model: expected a torch.nn.Module"):
        flopsight.attach(opt, opt, enabled())
    with pytest.raises(ValueError, match="batch_size"):
        flopsight.attach(model, opt, enabled(), batch_size=0)
    assert hooks_of(opt) == (0, 0, 0, 0)


def test_recompute_fwd_factor_sets_deepspeeds_backward_estimate(capsys):
    model, opt = make()
    with flopsight.attach(model, opt, enabled(recompute_fwd_factor=1.0)):
        train(model, opt, 2)
    out = capsys.readouterr().out
    # DeepSpeed's lines estimate the backward as (2 + recompute_fwd_factor) * the forward
    assert "bwd FLOPS per GPU = 3 * fwd flops per GPU / bwd latency:" in out
    assert "FLOPS per GPU = 4 * fwd flops per GPU / iter latency:" in out
    assert "measured bwd MACs per GPU:" in out


class ZeroLikeOptimizer:
    """What DeepSpeed's ZeRO optimizers look like from outside: not a torch optimizer, a
    step() that wraps the inner one (here: it also scales the gradients first)."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def zero_grad(self):
        self.optimizer.zero_grad()

    def step(self):
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.mul_(0.5)
        self.optimizer.step()


def test_a_wrapper_optimizer_is_counted_around_its_own_step(capsys):
    model, opt = make()
    wrapper = ZeroLikeOptimizer(opt)
    with flopsight.attach(model, wrapper, enabled(profile_step=1, detailed=False)) as handle:
        train(model, wrapper, 3)
    assert handle.done and handle.steps == 2 and "step" not in vars(wrapper)
    # the wrapper's own gradient scaling is part of the step: one multiply per element of
    # the 8*16+16 + 16*4+4 = 212 parameters, besides SGD's update
    it = handle.result.iteration
    assert it.step.flops >= 212 and handle.result.step.latency > 0
    assert "Profile Summary at step 2:" in capsys.readouterr().out


def test_bad_optimizer_or_missing_config():
    model, opt = make()
    with pytest.raises(TypeError, match="optimizer: expected a torch.optim.Optimizer, an object with a step"):
        flopsight.attach(model, object(), enabled())
    with pytest.raises(TypeError, match="config: expected DeepSpeed's config"):
        flopsight.attach(model, opt)


# -- torch.distributed ------------------------------------------------------------------------------
def test_two_gloo_ranks_every_rank_profiles_rank_0_gathers_and_prints(gloo_scenarios):
    tmp_path = gloo_scenarios / "attach"  # tests/multirank/attach_worker.py's files
    for rank in (0, 1):
        assert "Profile Summary" not in (tmp_path / f"stdout.rank{rank}.txt").read_text()  # it went to output_file
    states = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for state in states:  # every rank counted its steps and detached
        assert state["steps"] == 2 and state["done"] and not state["attached"] and state["hooks"] == [0, 0]
    assert states[0]["report"] and states[0]["result"]
    assert not states[1]["report"] and states[1]["result"]  # rank 1 profiled its step, did not print
    assert states[0]["ranks"] == [4, 6] and states[1]["ranks"] == []  # rank 0 gathered both ranks' results
    text = (tmp_path / "report.txt").read_text()
    assert "Profile Summary at step 2:" in text
    assert (value(text, "world size"), value(text, "data parallel size"), value(text, "model parallel size")) == (
        "2",
        "2",
        "1",
    )
    assert value(text, "batch size per GPU") == "4"  # rank 0's
    assert "ops not counted" not in text  # DDP's gradient allreduce is communication, not compute
    assert value(text, "measured bwd MACs per GPU") == flopsight.macs_to_string(4 * 16 * 4 * 2 + 4 * 8 * 16)


def test_attach_profiles_several_steps_from_the_configs_own_steps_key():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.Adam(model.parameters())
    config = {"flops_profiler": {"enabled": True, "profile_step": 2, "steps": 3, "detailed": False,
                                 "output_file": os.devnull}}
    with flopsight.attach(model, opt, config) as handle:
        for _ in range(6):
            model(torch.ones(4, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
    r = handle.result
    assert handle.done and r.samples.count == 3 and r.iteration.step.calls == 1
    assert r.memory is not None  # memory is counted unless the block says "memory": false
    assert not r.samples.first_step


def test_the_configs_own_keys_are_checked():
    from flopsight.integrations.deepspeed.config import parse_config

    assert parse_config({"enabled": True}).steps == 1 and parse_config({"enabled": True}).memory is True
    assert parse_config({"enabled": True, "steps": 4, "memory": False}).memory is False
    with pytest.raises(TypeError, match=r"\['steps'\]: expected a positive int"):
        parse_config({"enabled": True, "steps": 0})


# -- one numbering: attach, DeepSpeed's engine and the trainer callbacks -----------------------------
@pytest.mark.parametrize("profile_step", [0, 1, 2])
def test_attach_profiles_the_step_the_trainer_callbacks_profile_for_the_same_profile_step(profile_step, tmp_path):
    L = pytest.importorskip("lightning")
    from torch.utils.data import DataLoader

    from flopsight.integrations.lightning import FlopsightCallback

    # step i (0-based: the optimizer steps taken before it) trains on i + 1 rows, so the
    # profiled step's batch size says which step it was
    data = [(torch.ones(i + 1, 8), torch.zeros(i + 1, 4)) for i in range(4)]

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = make()[0]

        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).sub(batch[1]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice on workers and logging
        callback = FlopsightCallback(profile_step, output=None)
        trainer = L.Trainer(default_root_dir=tmp_path, max_steps=len(data), callbacks=[callback], logger=False,
                            accelerator="cpu", devices=1, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False)
        trainer.fit(Module(), DataLoader(data, batch_size=None))

    model, opt = make()
    with flopsight.attach(model, opt, enabled(profile_step=profile_step, output_file=os.devnull)) as handle:
        for x, y in data:
            (model(x) - y).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
    # the same step index on both, the one DeepSpeed's engine profiles (global_steps == profile_step):
    # its forward has profile_step + 1 rows of 8*16 + 16*4 = 192 MACs each
    assert handle.result.iteration.forward.macs == callback.result.iteration.forward.macs == (profile_step + 1) * 192
    assert handle.result.samples.first_step == callback.result.samples.first_step == (profile_step == 0)


def _attach_module():
    import importlib

    return importlib.import_module("flopsight.integrations.attach")  # the module, not the function


def test_a_profile_step_from_before_the_change_warns_once_which_step_it_profiles_now(monkeypatch):
    from flopsight._process import WARNED

    monkeypatch.setattr(WARNED, "_keys", set())  # a fresh process's: nothing warned yet
    model, opt = make()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        flopsight.attach(model, opt, enabled(profile_step=0)).close()  # refused until 0.1.0: today's numbering
        flopsight.attach(model, opt, {"enabled": False, "profile_step": 3}).close()  # off: nothing profiled
    assert not [w for w in caught if issubclass(w.category, FutureWarning)]
    with pytest.warns(FutureWarning, match=r"attach's profile_step=3 now counts the optimizer steps taken before the "
                                           r"profiled one, as DeepSpeed's engine does: it profiles step 4 after attach;"
                                           r".* pass profile_step=2 for that one") as caught:
        handle = flopsight.attach(model, opt, enabled(profile_step=3, output_file=os.devnull))
    assert caught[0].filename == __file__  # it points at the attach() call
    handle.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with flopsight.attach(model, opt, enabled(output_file=os.devnull)):  # the default, 1: once per process
            train(model, opt, 2)
    assert not [w for w in caught if issubclass(w.category, FutureWarning)]


def test_the_config_takes_profile_step_0_as_deepspeed_does():
    # DeepSpeed reads profile_step with no check (get_scalar_param), and its engine profiles the
    # first step for 0 (global_steps == 0): the block, and so the engine drop-in, take it too
    assert parse_config({"flops_profiler": {"enabled": True, "profile_step": 0}}).profile_step == 0
    with pytest.raises(TypeError, match=r"\['profile_step'\]: expected an int >= 0"):
        parse_config({"flops_profiler": {"enabled": True, "profile_step": -1}})  # never comes: refused
