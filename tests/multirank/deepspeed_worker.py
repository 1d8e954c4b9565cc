"""Scenario ``engine`` of scenarios.py, for tests/test_deepspeed_engine.py: 2 CPU ranks started by
DeepSpeed's launcher.

With ``flopsight.deepspeed.install()`` in effect, trains a small MLP for 3 steps under each
engine configuration below, its config's ``flops_profiler`` block profiling step 2 into
``OUT/<name>/report.txt`` (a folder that does not exist yet); rank 0 also saves the
result as ``OUT/<name>.json``. Then uninstalls and records what is left installed in
``OUT/state.rank<r>.json``.
"""

import json
import sys

import deepspeed
import torch
from torch import nn

import flopsight
import flopsight.deepspeed
from flopsight._torch_private import active_dispatch_modes, active_function_modes, global_module_hooks

out = sys.argv[-1]
flopsight.deepspeed.install()


class MLP(nn.Module):
    """Linear(16, 32) -> ReLU -> Linear(32, 4); optionally the last layer checkpointed with
    DeepSpeed's activation checkpointing (its input needs a gradient, as reentrant
    checkpointing requires)."""

    def __init__(self, checkpointed=False):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 4)
        self.checkpointed = checkpointed

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        return deepspeed.checkpointing.checkpoint(self.fc2, h) if self.checkpointed else self.fc2(h)


CONFIGS = {
    "zero0": {"zero_optimization": {"stage": 0}},
    "zero1": {"zero_optimization": {"stage": 1}},
    "zero2": {"zero_optimization": {"stage": 2}},
    "zero3": {"zero_optimization": {"stage": 3}},
    "zero2_bf16_accumulate2": {"zero_optimization": {"stage": 2}, "bf16": {"enabled": True},
                               "gradient_accumulation_steps": 2},
    "checkpointed": {"zero_optimization": {"stage": 0}},
    "zero3_memory": {"zero_optimization": {"stage": 3}},  # with install(memory=True)
    # the block's own keys (DeepSpeed ignores them): steps 2, 3 and 4 profiled, memory off
    "zero3_steps3": {"zero_optimization": {"stage": 3}, "_block": {"steps": 3, "memory": False}, "_train": 5},
    # the first step after the engine's first: no step before it is timed apart
    "zero0_profile_step1": {"zero_optimization": {"stage": 0}, "_block": {"profile_step": 1}},
}
left = {}  # config -> what its engine still holds of the profiler's after training

for name, extra in CONFIGS.items():
    extra = dict(extra)
    block_keys, train_steps = extra.pop("_block", {}), extra.pop("_train", 3)
    if name == "zero3_memory":
        flopsight.deepspeed.install(memory=True)
    elif name == "zero3_steps3":
        flopsight.deepspeed.install()  # the block's own keys decide again
    torch.manual_seed(0)
    accumulate = extra.get("gradient_accumulation_steps", 1)
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
        "flops_profiler": {"enabled": True, "profile_step": 2, "detailed": False,
                           "output_file": f"{out}/{name}/report.txt", "unknown_key": 1, **block_keys},
        **extra,
    }
    if name == "checkpointed":
        deepspeed.checkpointing.configure(None, deepspeed_config=config)
    engine, _, _, _ = deepspeed.initialize(model=MLP(checkpointed=name == "checkpointed"), config=config)
    dtype = torch.bfloat16 if "bf16" in extra else torch.float32
    for _step in range(train_steps):
        for _ in range(accumulate):
            if name == "zero3_steps3":  # the idiom that looks engine.backward up before the forward runs
                engine.backward(engine(torch.randn(4, 16, dtype=dtype)).float().pow(2).mean())
            else:
                loss = engine(torch.randn(4, 16, dtype=dtype)).float().pow(2).mean()
                engine.backward(loss)
            engine.step()
    if engine.global_rank == 0:
        engine.flops_profiler.result.save(f"{out}/{name}.json")
    left[name] = {"hooks": len(engine._forward_pre_hooks) + len(engine._forward_hooks),
                  "attributes": sorted(k for k in ("step", "backward") if k in vars(engine))}

flopsight.deepspeed.uninstall()
import deepspeed.runtime.engine as ds_engine  # noqa: E402

# flopsight.attach without install(), on a ZeRO-2 engine whose config has no flops_profiler
# block: given the engine itself, and given the model and the engine's ZeRO optimizer
for name in ("attach_engine", "attach_zero_optimizer"):
    torch.manual_seed(0)
    config = {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2},
              "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}}}
    engine, optimizer, _, _ = deepspeed.initialize(model=MLP(), config=config)
    # steps 2 (profile_step 1: one taken before it, as the engine counts) and, on the engine's
    # own step(), 3, each profiled on its own (the block's "steps")
    block = {"flops_profiler": {"enabled": True, "profile_step": 1, "detailed": False,
                                "output_file": f"{out}/{name}/report.txt",
                                **({"steps": 2} if name == "attach_engine" else {})}}
    if name == "attach_engine":
        handle = flopsight.attach(engine, config=block)
    else:
        handle = flopsight.attach(engine.module, optimizer, block)
    with handle:
        for _step in range(4):
            engine.backward(engine(torch.randn(4, 16)).pow(2).mean())
            engine.step()
    if engine.global_rank == 0:
        handle.result.save(f"{out}/{name}.json")

state = {
    "restored": ds_engine.FlopsProfiler.__module__,
    "dispatch_modes": len(active_dispatch_modes()),
    "function_modes": len(active_function_modes()),
    "module_hooks": sum(global_module_hooks().values()),
    "engine_attributes": sorted(k for k in ("step", "backward") if k in vars(engine)),
    "engine_hooks": len(engine._forward_pre_hooks),
    "install_engines_left": sorted(name for name, what in left.items() if what != {"hooks": 0, "attributes": []}),
}
with open(f"{out}/state.rank{engine.global_rank}.json", "w") as f:
    json.dump(state, f)
