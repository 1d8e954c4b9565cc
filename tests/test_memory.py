"""Memory per module and for the span, derived by hand for a small MLP."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import flopsight

B = 4  # rows; fp32 throughout: 4 bytes an element


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def training_step(device="cpu", memory=True):
    model = mlp().to(device)
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(B, 8, device=device)
    with flopsight.Profiler(model, optimizer=opt, memory=memory) as prof:
        model(x).pow(2).mean().backward()
        if device != "meta":
            opt.step()
    return prof.result


def test_activations_saved_for_backward_per_module():
    r = training_step()
    # fc1 (addmm) saves its input x: 4*8 floats = 128 B (its weight, a parameter, is not an
    # activation); the ReLU saves its output: 4*16 floats = 256 B; fc2 saves its input, that
    # same ReLU output, which is counted once (by the ReLU, which saved it first)
    assert [r.module(p).memory.activations for p in ("0", "1", "2")] == [128, 256, 0]
    assert r.module("").memory.activations == 128 + 256 == r.memory.activations


PARAMS = (8 * 16 + 16 + 16 * 4 + 4) * 4  # 848 B


def test_forward_peaks_per_module_call():
    r = training_step()
    # fc1 allocates its output (256 B); the ReLU its own (256 B more: 512 live); fc1's output
    # is then freed (256) and fc2 allocates 4*4 floats (64 B: 320 live)
    assert [r.module(p).memory.peak for p in ("0", "1", "2")] == [256, 512, 320]
    assert r.module("").memory.peak == 512
    # the span's peaks count what was live when it began too: the parameters (848 B; the fresh
    # AdamW holds no state yet, and no gradient exists yet)
    assert r.memory.live_at_start == PARAMS
    assert r.memory.phase_peaks["forward"] == PARAMS + 512
    assert r.module("0").memory.peak_backward > 0
    # the backward pass runs autograd nodes, not module calls: a module's backward peak is
    # the highest of its subtree's, so the root's is the model's
    children = [r.module(p).memory.peak_backward for p in ("0", "1", "2")]
    assert r.module("").memory.peak_backward == max(children) > 0


def test_params_grads_and_adamw_state():
    r = training_step()
    params = PARAMS
    assert (r.memory.params, r.memory.grads) == (params, params)
    # AdamW keeps exp_avg and exp_avg_sq per parameter element, and a scalar fp32 step per tensor
    assert r.memory.optimizer_state == 2 * params + 4 * 4
    assert r.memory.peak == max(r.memory.phase_peaks.values()) >= r.memory.phase_peaks["step"]
    # nothing live at the start was released: the peak is it plus the most allocated
    assert r.memory.peak == r.memory.live_at_start + r.memory.peak_allocated


def test_the_peak_counts_the_states_and_gradients_live_before_the_span():
    """Issue 36: with AdamW's states and the gradients alive before the span, the peak counted
    only what the span allocated. Now it counts everything live at once: the parameters (848 B),
    the gradients (848 B) and AdamW's state (2 * 848 + 4 * 4 = 1712 B) live at the start, 3408 B;
    the span first releases the gradients (zero_grad), then allocates: its peak is what was live
    then (3408 - 848 = 2560 B) plus the most it allocated."""
    model = mlp()
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(B, 8)
    model(x).pow(2).mean().backward()
    opt.step()  # the state exists, and the gradients are left in place
    with flopsight.Profiler(model, optimizer=opt, memory=True) as prof:
        opt.zero_grad()  # set_to_none: the gradients of before are released
        model(x).pow(2).mean().backward()
        opt.step()
    m = prof.result.memory
    assert m.live_at_start == PARAMS + PARAMS + 2 * PARAMS + 4 * 4 == 3408
    assert m.peak == 3408 - PARAMS + m.peak_allocated
    assert m.peak >= m.params + m.grads + m.optimizer_state


def test_the_meta_device_gives_the_same_activations_and_forward_peaks():
    cpu, meta = training_step(), training_step("meta")
    for p in ("", "0", "1", "2"):
        assert meta.module(p).memory.activations == cpu.module(p).memory.activations
        assert meta.module(p).memory.peak == cpu.module(p).memory.peak
    assert meta.memory.params == cpu.memory.params


def test_memory_is_off_unless_asked_and_survives_save_and_load(tmp_path):
    r = training_step(memory=False)
    assert r.memory is None and r.module("0").memory is None
    r = training_step()
    r.save(tmp_path / "r.json")
    loaded = flopsight.load(tmp_path / "r.json")
    assert loaded.memory == r.memory and loaded.module("1").memory == r.module("1").memory


def test_profile_counts_memory_of_one_forward():
    r = flopsight.profile(mlp(), torch.randn(B, 8), warm_up=0, memory=True)
    # the parameters (848 B) live throughout, 512 B allocated at most
    assert r.module("").memory.activations == 384 and r.memory.phase_peaks["forward"] == PARAMS + 512


@pytest.mark.parametrize("memory", ["yes", 1, None])
def test_memory_must_be_a_bool(memory):
    with pytest.raises(TypeError, match="memory: expected a bool"):
        flopsight.Profiler(mlp(), memory=memory)
    with pytest.raises(TypeError, match="memory: expected a bool"):
        flopsight.profile(mlp(), torch.ones(1, 8), memory=memory)


def test_the_report_prints_the_memory_lines():
    text = flopsight.renderers.text_renderer.render_text(training_step())
    assert "memory, params per GPU:" in text and "848 B" in text
    assert "memory, activations saved for backward per GPU:" in text
    # the peak of everything live: the 848 B of parameters and the 512 B the forward allocated at most
    assert "memory, peak per GPU (everything live at once):" in text and "(fwd 1.36 KB, bwd " in text
    assert "memory, live when profiling began, in the peak:" in text
    assert "memory, peak allocated while profiling per GPU:" in text
    assert "memory," not in flopsight.renderers.text_renderer.render_text(training_step(memory=False))


def test_nothing_watches_the_storages_once_profiling_stopped():
    import weakref

    from flopsight.capture.sources.memory import MemorySource

    model = mlp()
    with flopsight.Profiler(model, memory=True) as prof:
        kept = model(torch.randn(B, 8))  # allocated while profiling, still alive afterwards
    assert kept is not None and prof.result.memory.peak > 0
    # its storage's finalizer was detached at stop: no finalizer keeps a memory source alive
    # (weakref.finalize keeps its live finalizers in a class-level registry)
    owners = [getattr(info.func, "__self__", None) for info in weakref.finalize._registry.values()]
    assert not any(isinstance(o, MemorySource) for o in owners)
