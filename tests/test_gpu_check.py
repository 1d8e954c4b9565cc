"""benchmarks/gpu_check.py: each judge on recorded figures (passing and failing), and the
whole script on the CPU, where every CUDA check is skipped."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


gc = _load()
PASS, FAIL, SKIP = gc.PASS, gc.FAIL, gc.SKIP


# -- counts ----------------------------------------------------------------------------------
REF = {"macs": 100, "flops": 210, "modules": {"": 100, "a": 60, "b": 40}}


def test_compare_counts_equal_and_different():
    assert gc.compare_counts(REF, dict(REF)) is None
    assert "total macs 101" in gc.compare_counts(REF, dict(REF, macs=101))
    moved = dict(REF, modules={"": 100, "a": 59, "b": 41})  # same totals, one MAC moved
    assert gc.compare_counts(REF, moved) == "2 modules differ; first 'a': 59 vs 60 MACs"


def _run(status, **extra):
    return {"model": "bert-base", "dtype": "bfloat16", "backend": "FLASH_ATTENTION", "status": status, **extra}


def test_counts_pass_with_unsupported_backends_skipped():
    v = gc.judge_counts([_run("equal"), _run("equal"), _run("skipped", reason="torch cannot run it")])
    assert v.status == PASS
    assert v.figure == "2/2 runs equal to CPU fp32, 1 backend runs unsupported"


def test_counts_fail_on_mismatch_or_error():
    v = gc.judge_counts([_run("equal"), _run("mismatch", what="total macs 1 vs 2")])
    assert v.status == FAIL and "1/2 runs equal" in v.figure and "total macs 1 vs 2" in v.figure
    v = gc.judge_counts([_run("equal"), _run("error", error="RuntimeError: boom")])
    assert v.status == FAIL and "RuntimeError: boom" in v.figure


def test_counts_fail_when_nothing_compared():
    assert gc.judge_counts([_run("skipped", reason="x")]).status == FAIL


# -- latency -----------------------------------------------------------------------------------
def test_latency_within_five_percent():
    v = gc.judge_latency({"bert-base": {"profiled_ms": 10.4, "plain_ms": 10.0},
                          "gpt2": {"profiled_ms": 9.6, "plain_ms": 10.0}})
    assert v.status == PASS and "1.040x" in v.figure and "0.960x" in v.figure


def test_latency_fails_past_five_percent_and_reports_deepspeed():
    v = gc.judge_latency({"bert-base": {"profiled_ms": 10.6, "plain_ms": 10.0, "deepspeed_ms": 12.0},
                          "gpt2": {"profiled_ms": 10.0, "plain_ms": 10.0, "deepspeed_ms": "not installed"}})
    assert v.status == FAIL and "1.060x" in v.figure
    assert "deepspeed/plain: bert-base 1.200x" in v.figure and "gpt2" not in v.figure.split("deepspeed")[1]


def test_latency_nothing_measured_fails():
    assert gc.judge_latency({}).status == FAIL


def test_module_sum_against_the_gpus_busy_time():
    # 9.6 of 9.8 ms busy: 0.980 (within 5%); the forward took 12.25 ms, so the GPU idled 20%
    ok = gc.judge_module_sum({"bert-base": {"children_ms": 9.6, "busy_ms": 9.8, "forward_ms": 12.25}})
    bad = gc.judge_module_sum({"gpt2": {"children_ms": 9.4, "busy_ms": 10.0, "forward_ms": 10.0}})
    assert ok.status == PASS and "0.980 (GPU idle 20%)" in ok.figure
    assert bad.status == FAIL and "0.940" in bad.figure


def test_module_sum_without_a_busy_time_fails():
    assert gc.judge_module_sum({"bert-base": {"children_ms": 9.6, "forward_ms": 10.0}}).status == FAIL


# -- training step ---------------------------------------------------------------------------------
def _step_figures(span, build=0.01, fwd=0.010):
    # three paired rounds of a 100 ms plain step (10 fwd, 60 bwd, 30 step)
    plain_phases = [{"fwd": 0.010, "bwd": 0.060, "step": 0.030, "iteration": 0.100}] * 3
    reported = [{"fwd": fwd, "bwd": 0.061, "step": 0.0295, "iteration": 0.1005}] * 3
    return {"plain_s": [0.1] * 3, "span_s": span, "build_s": [build] * 3, "plain_phases": plain_phases,
            "reported": reported, "timing": "phases/cuda_events"}


def test_training_step_passes_within_its_limits():
    # span ratios 1.2, 1.25, 1.5: median 1.25 <= 1.3; build 10 ms; fwd 1.0, bwd 61/60 = 1.017
    v = gc.judge_step(_step_figures([0.12, 0.125, 0.15]))
    assert v.status == PASS and v.figure.startswith("span 1.250x") and "bwd 1.017" in v.figure


@pytest.mark.parametrize("figures", [_step_figures([0.14] * 3), _step_figures([0.1] * 3, build=0.06),
                                     _step_figures([0.1] * 3, fwd=0.0106)])
def test_training_step_fails_past_any_limit(figures):
    # span 1.4x; or a 60 ms build; or a forward reported 6% over the plain one
    assert gc.judge_step(figures).status == FAIL


def test_training_step_needs_paired_rounds():
    assert gc.judge_step({"plain_s": [0.1], "span_s": []}).status == FAIL


# -- engine ----------------------------------------------------------------------------------------
def _engine(reported=0.084, step=0.120, ds_step=0.133, framework=0.05):
    # a 78 ms plain step; DeepSpeed's profiled step 0.133 / 0.078 = 1.705x ("1.71x"), its report 94.5 ms;
    # flopsight's step 0.120 / 0.078 = 1.54x, its report 0.084 / 0.078 = 1.077x ("1.08x"), framework 5%
    return {"0": {"plain_s": 0.078, "deepspeed": {"step_s": ds_step, "reported_s": 0.0945},
                  "flopsight": {"step_s": step, "reported_s": reported, "framework": framework}}}


def test_engine_passes_when_reported_close_cheaper_than_deepspeed_and_framework_small():
    v = gc.judge_engine(_engine())
    assert v.status == PASS and "reported 1.08x" in v.figure and "deepspeed step 1.71x" in v.figure


@pytest.mark.parametrize("figures", [_engine(reported=0.573), _engine(step=0.140), _engine(framework=0.61)])
def test_engine_fails_on_each_row(figures):
    # reported 7.3x; a step dearer than DeepSpeed's; framework and hooks 61%
    assert gc.judge_engine(figures).status == FAIL


def test_engine_skips_without_deepspeed():
    assert gc.judge_engine({"skipped": "deepspeed does not import"}).status == gc.SKIP


# -- memory ----------------------------------------------------------------------------------------
MIB = 2 ** 20


def _memory(peak=100 * MIB, torch_peak=102 * MIB, layer=(10 * MIB, 10 * MIB)):
    return {"peak": peak, "torch_peak": torch_peak, "activations": 50 * MIB, "torch_activations": 51 * MIB,
            "modules": {"bert.encoder.layer.0": {"flopsight": layer[0], "torch": layer[1]}}}


def test_memory_within_five_percent():
    v = gc.judge_memory(_memory())
    assert v.status == PASS and "peak 100.0 vs 102.0 MiB" in v.figure and "3 figures" in v.figure


def test_memory_fails_on_peak_or_module():
    v = gc.judge_memory(_memory(peak=90 * MIB, torch_peak=100 * MIB))
    assert v.status == FAIL and "worst step peak off by 10.0%" in v.figure
    v = gc.judge_memory(_memory(layer=(12 * MIB, 10 * MIB)))
    assert v.status == FAIL and "activations bert.encoder.layer.0 off by 20.0%" in v.figure


def test_memory_zero_reference_fails():
    assert gc.judge_memory(_memory(torch_peak=0)).status == FAIL


# -- NVML -------------------------------------------------------------------------------------------
GIB = 2 ** 30
USAGE = {"samples": 3, "utilization_mean": 62.5, "utilization_max": 99, "memory_used_max": 5 * GIB,
         "memory_total": 80 * GIB, "allocator_peak": GIB}


def test_nvml_pass():
    v = gc.judge_nvml({"nvml_available": True, "usage": USAGE, "line_present": True, "device_total": 79 * GIB})
    assert v.status == PASS and "util mean 62.5 % max 99 %" in v.figure


def test_nvml_skipped_without_pynvml():
    assert gc.judge_nvml({"nvml_available": False, "usage": None}).status == SKIP


@pytest.mark.parametrize("change, why", [
    ({"utilization_max": 101}, "utilization_max 101 not in [0, 100]"),
    ({"memory_used_max": 81 * GIB}, "not at or below"),
    ({"samples": 0}, "no NVML samples"),
])
def test_nvml_fail(change, why):
    v = gc.judge_nvml({"nvml_available": True, "usage": dict(USAGE, **change), "line_present": True})
    assert v.status == FAIL and why in v.figure


def test_nvml_fail_without_line_or_usage():
    v = gc.judge_nvml({"nvml_available": True, "usage": USAGE, "line_present": False})
    assert v.status == FAIL and "line" in v.figure
    assert gc.judge_nvml({"nvml_available": True, "usage": None}).status == FAIL


# -- efficiency --------------------------------------------------------------------------------------
def test_efficiency():
    ok = {"device_name": "NVIDIA H100 80GB HBM3", "peak_name": "NVIDIA H100 SXM", "mfu": 0.31}
    assert gc.judge_efficiency(ok).status == PASS
    assert gc.judge_efficiency(dict(ok, peak_name=None)).status == FAIL
    assert gc.judge_efficiency(dict(ok, device_name="")).status == FAIL
    assert gc.judge_efficiency(dict(ok, mfu=1.2)).status == FAIL
    assert gc.judge_efficiency(dict(ok, mfu=None)).status == FAIL
    assert gc.judge_efficiency(dict(ok, mfu=0.0)).status == FAIL


# -- compile, native, not built -------------------------------------------------------------------------
def test_compile():
    assert gc.judge_compile({"mismatch": None, "eager_ms": 2.0, "compiled_ms": 1.5}).status == PASS
    assert gc.judge_compile({"mismatch": None, "eager_ms": 2.0, "compiled_ms": 2.0}).status == PASS
    v = gc.judge_compile({"mismatch": None, "eager_ms": 2.0, "compiled_ms": 2.1})
    assert v.status == FAIL and "1.050x" in v.figure
    assert gc.judge_compile({"mismatch": "total macs 1 vs 2", "eager_ms": 2.0, "compiled_ms": 1.0}).status == FAIL


def test_native():
    assert gc.judge_native({"available": False, "reason": "not built yet: no backend="}).status == SKIP
    assert gc.judge_native({"available": True, "mismatch": None, "macs": 5}).status == PASS
    assert gc.judge_native({"available": True, "mismatch": "total macs 4 vs 5"}).status == FAIL


def test_not_built_probe():
    v = gc.judge_not_built(["ProfileResult.kernels"], [])
    assert v.status == SKIP and v.figure.startswith("not built yet")
    assert gc.judge_not_built(["ProfileResult.kernels"], ["ProfileResult.kernels"]).status == SKIP


def test_kernels_at_most_one_percent_unassigned():
    # recorded shape of the figures: 1000 kernels, 50 ms, 0.4 ms outside every module
    figures = {"source": "cuda", "expected_source": "cuda", "seconds": 0.05, "unassigned_seconds": 0.0004,
               "kernels": 1000, "modules": 120}
    v = gc.judge_kernels(figures)
    assert v.status == PASS and "0.80%" in v.figure
    assert gc.judge_kernels(dict(figures, unassigned_seconds=0.001)).status == FAIL  # 2%
    assert gc.judge_kernels(dict(figures, seconds=0.0, unassigned_seconds=0.0)).status == FAIL  # nothing recorded
    v = gc.judge_kernels(dict(figures, source="cpu"))  # CUPTI gave no kernels: CPU ops only
    assert v.status == FAIL and "expected 'cuda'" in v.figure


def test_a_raising_check_is_a_fail_and_the_run_goes_on(capsys):
    def boom(ctx):
        raise ValueError("bad figure\nsecond line")

    checks = [gc.Check("boom", boom, 5), gc.Check("ok", lambda c: gc.Verdict(PASS, "fine"), 5)]
    rows = gc.run_checks(object(), checks, deadline_s=100)
    assert [r["status"] for r in rows] == [FAIL, PASS]
    assert rows[0]["figure"] == "ValueError: bad figure"
    assert "FAIL boom: ValueError: bad figure" in capsys.readouterr().out


def test_a_check_past_the_deadline_is_not_started():
    rows = gc.run_checks(object(), [gc.Check("slow", lambda c: gc.Verdict(PASS, "x"), 90)], deadline_s=60)
    assert rows[0]["status"] == SKIP and "deadline" in rows[0]["figure"]


# -- the whole script on the CPU -------------------------------------------------------------------------
@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the CPU path")
def test_whole_script_on_cpu(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run([sys.executable, str(SCRIPT), str(out), "--quick"], capture_output=True, text=True,
                          env=env, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert {c["name"] for c in summary["checks"]} == {c.name for c in gc.CHECKS}
    for check in summary["checks"]:
        assert check["status"] == SKIP and check["figure"] == "no CUDA device", check
        assert f"SKIP {check['name']}: no CUDA device" in proc.stdout
    for key in ("date", "device_name", "torch_version", "python_version", "flopsight_version"):
        assert summary[key]
    assert proc.stdout.strip().splitlines()[-1] == f"0 passed, 0 failed, {len(gc.CHECKS)} skipped"


def test_compile_regions():
    figures = {"blocks": 8, "compiled": [str(i) for i in range(8)], "region_kernels": 64, "region_ms": 3.2,
               "regions_without_kernels": [], "compile_events": 0, "mismatch": None}
    assert gc.judge_compile_regions(figures).status == PASS
    assert gc.judge_compile_regions(dict(figures, compiled=["0"])).status == FAIL  # a block not named
    assert gc.judge_compile_regions(dict(figures, compile_events=3)).status == FAIL  # compilation timed
    assert gc.judge_compile_regions(dict(figures, regions_without_kernels=["5"])).status == FAIL
    assert gc.judge_compile_regions(dict(figures, mismatch="total macs 1 vs 2")).status == FAIL
