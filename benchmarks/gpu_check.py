"""GPU acceptance checks for flopsight (issue 17 section 2): one command, one line per check.

    python benchmarks/gpu_check.py OUT_DIR [--quick] [--only a,b] [--skip a,b] [--on-cpu]

Prints ``PASS|FAIL|SKIP <check>: <figure>`` per check, each check's wall time, a final table
and ``N passed, M failed, K skipped``; writes ``OUT_DIR/summary.json``. Exit status 1 when
any check failed (the JSON is written first), else 0.

Without a CUDA device every check is ``SKIP: no CUDA device``. ``--on-cpu`` runs the
measuring code on the CPU anyway (a dry run of the code paths; its figures mean nothing).
``--quick`` uses tiny models. Needs only torch, transformers and flopsight: models are
built from configs (never downloaded), ResNet-50 is flopsight's plain-torch zoo model.

Each check is ``measure_*`` (runs models, returns plain figures) followed by a pure
``judge_*`` (figures -> :class:`Verdict`), so the judging is unit-tested with recorded
figures (``tests/test_gpu_check.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import datetime
import inspect
import json
import math
import os
import platform
import statistics
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
NO_CUDA = "no CUDA device"
NOT_BUILT = "not built yet"


@dataclass
class Verdict:
    """A check's outcome: status, its headline figure (or skip reason), and details."""

    status: str
    figure: str
    details: dict = field(default_factory=dict)


# =========================================================================================
# Pure judging logic: figures in, Verdict out (no torch)
# =========================================================================================
def _rel(a: float, b: float) -> float:
    """|a - b| / |b| (inf when b is 0 and a is not)."""
    if b == 0:
        return 0.0 if a == 0 else float("inf")
    return abs(a - b) / abs(b)


def judge_counts(runs: list[dict]) -> Verdict:
    """Each run is ``{model, dtype, backend, status, ...}``: status ``"equal"``, ``"mismatch"``
    (with ``what``), ``"skipped"`` (with ``reason``: backend unsupported) or ``"error"``
    (with ``error``). PASS when no run mismatched or errored and at least one compared."""
    compared = [r for r in runs if r["status"] in ("equal", "mismatch")]
    bad = [r for r in runs if r["status"] in ("mismatch", "error")]
    skipped = [r for r in runs if r["status"] == "skipped"]
    equal = len(compared) - sum(r["status"] == "mismatch" for r in compared)
    figure = f"{equal}/{len(compared)} runs equal to CPU fp32"
    figure += f", {len(skipped)} backend runs unsupported"
    details = {"runs": runs}
    if bad:
        first = bad[0]
        why = first.get("what") or first.get("error")
        return Verdict(FAIL, f"{figure}, {len(bad)} bad; first: {first['model']} {first['dtype']} "
                             f"{first['backend']}: {why}", details)
    if not compared:
        return Verdict(FAIL, "nothing compared", details)
    return Verdict(PASS, figure, details)


def compare_counts(ref: dict, got: dict) -> str | None:
    """None when two count records (``macs``, ``flops``, ``modules``: path -> macs) are
    equal, else what differs."""
    if got["macs"] != ref["macs"] or got["flops"] != ref["flops"]:
        return f"total macs {got['macs']} vs {ref['macs']}, flops {got['flops']} vs {ref['flops']}"
    diff = sorted(p for p in set(ref["modules"]) | set(got["modules"])
                  if ref["modules"].get(p) != got["modules"].get(p))
    if diff:
        p = diff[0]
        return f"{len(diff)} modules differ; first {p!r}: {got['modules'].get(p)} vs {ref['modules'].get(p)} MACs"
    return None


def judge_latency(models: dict[str, dict], tol: float = 0.05) -> Verdict:
    """``models[name]`` has ``profiled_ms`` and ``plain_ms`` (medians): PASS when every
    profiled / plain ratio is within ``tol`` of 1."""
    if not models:
        return Verdict(FAIL, "no model measured")
    ratios = {m: f["profiled_ms"] / f["plain_ms"] for m, f in models.items()}
    figure = ", ".join(f"{m} {models[m]['profiled_ms']:.3f}/{models[m]['plain_ms']:.3f} ms = {r:.3f}x"
                       for m, r in ratios.items())
    ok = all(abs(r - 1) <= tol for r in ratios.values())
    ds = {m: f["deepspeed_ms"] / f["plain_ms"] for m, f in models.items()
          if isinstance(f.get("deepspeed_ms"), (int, float))}
    if ds:
        figure += "; for comparison deepspeed/plain: " + ", ".join(f"{m} {r:.3f}x" for m, r in ds.items())
    return Verdict(PASS if ok else FAIL, f"profiled/plain: {figure} (limit {1 - tol:.2f}-{1 + tol:.2f})",
                   {"models": models, "ratios": ratios, "tolerance": tol})


def judge_module_sum(models: dict[str, dict], tol: float = 0.05) -> Verdict:
    """``models[name]`` has ``children_ms`` (the top-level modules' latencies summed, with the
    root's own kernels), ``busy_ms`` (the GPU's busy time) and ``forward_ms``: PASS when every
    sum is within ``tol`` of the busy time; the idle share (1 - busy / forward) is reported."""
    if not models:
        return Verdict(FAIL, "no model measured")
    ratios = {m: _ratio(f["children_ms"], f.get("busy_ms")) for m, f in models.items()}
    ok = all(abs(r - 1) <= tol for r in ratios.values())
    idle = {m: 1 - r for m, r in ((m, _ratio(f.get("busy_ms"), f["forward_ms"])) for m, f in models.items())
            if not math.isnan(r)}
    figure = ", ".join(f"{m} {r:.3f}" + (f" (GPU idle {idle[m]:.0%})" if m in idle else "") for m, r in ratios.items())
    return Verdict(PASS if ok else FAIL, f"sum(top-level modules)/GPU busy: {figure} (limit +-{tol:.0%})",
                   {"models": models, "ratios": ratios, "idle": idle, "tolerance": tol})


def _ratio(a, b) -> float:
    """a / b, NaN when either is missing or b is 0."""
    ok = isinstance(a, (int, float)) and isinstance(b, (int, float)) and b
    return a / b if ok else float("nan")


def judge_step(figures: dict, limit: float = 1.3, build_ms: float = 50.0, tol: float = 0.05) -> Verdict:
    """A training step in ``Profiler``, paired rounds with a plain one: ``plain_s`` and
    ``span_s`` (host wall, device drained: the profiled span as the GPU sees it), ``build_s``
    (stopping and building the result, after the span), and per phase (``fwd``, ``bwd``,
    ``step``, ``iteration``) the plain step's seconds (``plain_phases``, CUDA events at the
    boundaries) and the profiled result's (``reported``), one dict per round. PASS when the
    span costs at most ``limit`` x the plain step, the build takes under ``build_ms``, and
    every reported phase is within ``tol`` of the plain one (medians)."""
    plain, span, build = figures.get("plain_s", []), figures.get("span_s", []), figures.get("build_s", [])
    if not plain or len(plain) != len(span):
        return Verdict(FAIL, f"need paired rounds, got {len(plain)} plain and {len(span)} profiled")
    ratio = statistics.median(p / q for p, q in zip(span, plain))
    built = statistics.median(build) * 1e3
    phases = {}
    for name in ("fwd", "bwd", "step", "iteration"):
        ours = statistics.median(r[name] for r in figures["reported"])
        theirs = statistics.median(r[name] for r in figures["plain_phases"])
        phases[name] = _ratio(ours, theirs)
    ok = ratio <= limit and built < build_ms and all(abs(r - 1) <= tol for r in phases.values())
    figure = (f"span {ratio:.3f}x a plain step ({statistics.median(plain) * 1e3:.1f} ms; limit {limit:.2f}x), "
              f"build {built:.1f} ms (limit {build_ms:.0f}), reported/plain "
              + ", ".join(f"{k} {r:.3f}" for k, r in phases.items()) + f" (limit +-{tol:.0%}); "
              f"timing {figures.get('timing')}")
    return Verdict(PASS if ok else FAIL, figure, {**figures, "ratio": ratio, "build_ms": built, "phases": phases})


def judge_engine(figures: dict, limit: float = 1.10, framework: float = 0.10) -> Verdict:
    """The DeepSpeed engine's profiled step (``figures[stage]`` per ZeRO stage: ``plain_s``,
    the median unprofiled step; per variant ``deepspeed`` and ``flopsight``, ``step_s``, the
    profiled step's wall time, and ``reported_s``, the iter latency its report gives;
    flopsight's ``framework``, the anatomy's framework share): PASS when flopsight's reported
    iteration is within ``limit`` of the plain step, its profiled step costs no more than
    DeepSpeed's (when DeepSpeed's ran), and on ZeRO-0 framework and hooks are under
    ``framework`` of the step. SKIP when DeepSpeed does not import (``skipped``)."""
    if "skipped" in figures:
        return Verdict(SKIP, figures["skipped"])
    ok, parts = True, []
    for stage, f in figures.items():
        plain, ours, theirs = f["plain_s"], f["flopsight"], f.get("deepspeed") or {}
        reported = _ratio(ours["reported_s"], plain)
        cost = _ratio(ours["step_s"], plain)
        ds_cost = _ratio(theirs.get("step_s"), plain)
        ok &= abs(reported - 1) <= limit - 1 and (math.isnan(ds_cost) or cost <= ds_cost)
        if stage == "0":
            ok &= ours["framework"] < framework
        parts.append(f"ZeRO-{stage}: plain {plain * 1e3:.1f} ms, flopsight step {cost:.2f}x reported "
                     f"{reported:.2f}x framework {ours['framework']:.0%}; deepspeed step {ds_cost:.2f}x reported "
                     f"{_ratio(theirs.get('reported_s'), plain):.2f}x")
    return Verdict(PASS if ok else FAIL, "; ".join(parts) + f" (limits: reported within {limit:.2f}x, step <= "
                   f"deepspeed's, ZeRO-0 framework < {framework:.0%})", figures)


def judge_memory(figures: dict, tol: float = 0.05) -> Verdict:
    """``figures``: ``peak`` (flopsight's step peak) and ``torch_peak`` (max_memory_allocated
    above the start), ``activations`` / ``torch_activations`` (the whole forward), and
    ``modules`` (path -> {``flopsight``, ``torch``}) of per-module activation bytes. PASS
    when each flopsight figure is within ``tol`` of torch's."""
    pairs = [("step peak", figures["peak"], figures["torch_peak"]),
             ("forward activations", figures["activations"], figures["torch_activations"])]
    pairs += [(f"activations {p}", m["flopsight"], m["torch"]) for p, m in figures.get("modules", {}).items()]
    errs = [(name, a, b, _rel(a, b)) for name, a, b in pairs]
    worst = max(errs, key=lambda e: e[3])
    bad = [e for e in errs if e[3] > tol]
    mib = 2 ** 20
    figure = (f"peak {figures['peak'] / mib:.1f} vs {figures['torch_peak'] / mib:.1f} MiB, activations "
              f"{figures['activations'] / mib:.1f} vs {figures['torch_activations'] / mib:.1f} MiB, "
              f"worst {worst[0]} off by {worst[3]:.1%} (limit {tol:.0%}, {len(pairs)} figures)")
    details = dict(figures, errors={name: e for name, _, _, e in errs}, tolerance=tol)
    return Verdict(FAIL if bad else PASS, figure, details)


def judge_nvml(figures: dict) -> Verdict:
    """``figures``: ``nvml_available``, ``usage`` (the result's DeviceUsage as a dict or
    None), ``line_present`` (the report's NVML line) and ``device_total`` (torch's
    total memory). SKIP without NVML (the report leaves the line out by design)."""
    if not figures.get("nvml_available"):
        return Verdict(SKIP, "pynvml (nvidia-ml-py, the gpu extra) not installed: no NVML line by design", figures)
    u = figures.get("usage")
    if u is None:
        return Verdict(FAIL, "result.device_usage is None on a CUDA run", figures)
    problems = []
    if not u.get("samples"):
        problems.append("no NVML samples")
    if not figures.get("line_present"):
        problems.append("no 'GPU utilization (NVML' line in the report")
    for key in ("utilization_mean", "utilization_max"):
        v = u.get(key)
        if v is None or not 0 <= v <= 100:
            problems.append(f"{key} {v} not in [0, 100]")
    used, total = u.get("memory_used_max"), u.get("memory_total")
    if used is None or total is None or used > total:
        problems.append(f"memory used {used} not at or below the device's {total}")
    figure = (f"util mean {u.get('utilization_mean')} % max {u.get('utilization_max')} %, memory "
              f"{(used or 0) / 2**30:.2f} of {(total or 0) / 2**30:.2f} GiB, {u.get('samples')} samples")
    if problems:
        return Verdict(FAIL, f"{figure}: {'; '.join(problems)}", figures)
    return Verdict(PASS, figure, figures)


def judge_efficiency(figures: dict) -> Verdict:
    """``figures``: ``device_name`` (recorded), ``peak_name`` (the table entry, None if not
    found), ``mfu`` of a training step: PASS when the name maps and 0 < MFU <= 1."""
    name, peak, mfu = figures.get("device_name"), figures.get("peak_name"), figures.get("mfu")
    if not name:
        return Verdict(FAIL, "no device name recorded in result.metadata.device_name", figures)
    if peak is None:
        return Verdict(FAIL, f"{name!r} maps to no peak-table entry", figures)
    figure = f"{name!r} -> {peak!r}, MFU {mfu if mfu is None else format(mfu, '.4f')}"
    if mfu is None or not 0 < mfu <= 1:
        return Verdict(FAIL, f"{figure}: MFU not in (0, 1]", figures)
    return Verdict(PASS, figure, figures)


def judge_compile(figures: dict) -> Verdict:
    """``figures``: ``mismatch`` (None when the compiled model's counts equal the eager's),
    ``eager_ms`` and ``compiled_ms`` (medians of flopsight's reported forward latency):
    PASS when the counts are kept and compiled <= eager."""
    eager, comp = figures["eager_ms"], figures["compiled_ms"]
    figure = f"compiled {comp:.3f} ms vs eager {eager:.3f} ms ({comp / eager:.3f}x)"
    if figures.get("mismatch"):
        return Verdict(FAIL, f"counts differ: {figures['mismatch']}; {figure}", figures)
    if comp > eager:
        return Verdict(FAIL, f"counts equal, but {figure} is above eager", figures)
    return Verdict(PASS, f"counts equal, {figure}", figures)


def judge_compile_regions(figures: dict) -> Verdict:
    """A model whose blocks are compiled one by one, profiled with ``kernels=True``:
    PASS when the result names every compiled block, each has kernels charged to it, none of
    them compilation's, and the counts equal the eager model's."""
    figure = (f"{len(figures['compiled'])} of {figures['blocks']} blocks named compiled, "
              f"{figures['region_kernels']} kernels in them ({figures['region_ms']:.3f} ms), "
              f"{figures['compile_events']} compile events")
    if figures.get("mismatch"):
        return Verdict(FAIL, f"counts differ: {figures['mismatch']}; {figure}", figures)
    if len(figures["compiled"]) != figures["blocks"] or figures["regions_without_kernels"] or figures["compile_events"]:
        return Verdict(FAIL, figure, figures)
    return Verdict(PASS, figure, figures)


def judge_native(figures: dict) -> Verdict:
    """``figures``: ``available`` (False with ``reason``) and ``mismatch`` (None when the
    native backend's counts equal the Python one's)."""
    if not figures.get("available"):
        return Verdict(SKIP, figures.get("reason", "native backend not available"), figures)
    if figures.get("mismatch"):
        return Verdict(FAIL, f"native vs python: {figures['mismatch']}", figures)
    return Verdict(PASS, f"native == python counts ({figures.get('macs')} MACs)", figures)


def judge_kernels(figures: dict, limit: float = 0.01) -> Verdict:
    """Every kernel of a profiled training step charged to a module: at most ``limit`` of
    the device time unassigned, on the device's own kernels (``source`` as expected)."""
    total, unassigned = figures["seconds"], figures["unassigned_seconds"]
    share = unassigned / total if total > 0 else 1.0
    figure = (f"{figures['kernels']} {figures['source']} kernels in {figures['modules']} modules, "
              f"{total * 1e3:.3f} ms; unassigned {unassigned * 1e3:.3f} ms = {100 * share:.2f}% "
              f"(limit {100 * limit:g}%)")
    if figures["source"] != figures["expected_source"]:
        return Verdict(FAIL, f"kernels came from {figures['source']!r}, expected {figures['expected_source']!r}; "
                             + figure, figures)
    if total <= 0 or share > limit:
        return Verdict(FAIL, figure, figures)
    return Verdict(PASS, figure, figures)


def judge_not_built(missing: list[str], found: list[str]) -> Verdict:
    """A capability probe: SKIP ``not built yet`` while none of its API exists; a SKIP that
    says so when some appeared (this check has not been written against it)."""
    if not found:
        return Verdict(SKIP, f"{NOT_BUILT} (no {', '.join(missing)})")
    return Verdict(SKIP, f"API appeared ({', '.join(found)}) but this check is not written yet")


# =========================================================================================
# Measuring (torch from here on)
# =========================================================================================
class Ctx:
    """What every measurement needs: the device, sizes and the command-line options."""

    def __init__(self, device, quick: bool):
        import torch

        self.torch = torch
        self.device = device
        self.quick = quick
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def time_ms(self, fn: Callable[[], Any]) -> float:
        """One call's time: CUDA events on a GPU, perf_counter elsewhere."""
        torch = self.torch
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3

    def clock(self) -> dict:
        """``clock=`` for flopsight: the default on CUDA; in a dry run on the CPU a fake device's,
        so the CUDA paths (device timing, phase-boundary events) run."""
        if self.cuda:
            return {}
        from flopsight.capture.runtime.timing import FakeDeviceClock

        return {"clock": FakeDeviceClock()}

    def stamp(self):
        """A point in time: a CUDA event recorded on the current stream, perf_counter elsewhere."""
        if self.cuda:
            event = self.torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def between(self, a, b) -> float:
        """Seconds between two :meth:`stamp`s (the device synchronized since)."""
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a

    def wall_s(self, fn: Callable[[], Any]) -> float:
        """Host wall time of ``fn`` with the device drained before and after."""
        self.sync()
        t0 = time.perf_counter()
        fn()
        self.sync()
        return time.perf_counter() - t0

    def memory_allocated(self) -> int:
        """The caching allocator's live bytes (0 off CUDA: the --on-cpu dry run)."""
        return self.torch.cuda.memory_allocated(self.device) if self.cuda else 0

    def max_memory_allocated(self) -> int:
        return self.torch.cuda.max_memory_allocated(self.device) if self.cuda else 0

    def reset_peak(self) -> None:
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats(self.device)

    def device_total(self) -> int | None:
        return self.torch.cuda.get_device_properties(self.device).total_memory if self.cuda else None

    def free(self) -> None:
        import gc

        gc.collect()
        if self.cuda:
            self.torch.cuda.empty_cache()


# -- models ------------------------------------------------------------------------------
def _tf_size(quick: bool, **full):
    return dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                vocab_size=1000) if quick else full


def build_bert(quick: bool, batch: int, seq: int, large: bool = False, head: bool = False):
    """BERT-base (or -large) from its config; ``head``: for sequence classification."""
    import torch
    import transformers as tf

    sizes = _tf_size(quick) if quick else (
        dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
        if large else {})
    cfg = tf.BertConfig(attn_implementation="sdpa", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                        **sizes)
    model = (tf.BertForSequenceClassification if head else tf.BertModel)(cfg)
    inputs = {"input_ids": torch.randint(0, cfg.vocab_size, (batch, seq))}
    if head:
        inputs["labels"] = torch.zeros(batch, dtype=torch.long)
    return model, inputs


def build_gpt2(quick: bool, batch: int, seq: int):
    import torch
    import transformers as tf

    sizes = dict(n_embd=64, n_layer=2, n_head=4, vocab_size=1000, bos_token_id=0, eos_token_id=0) if quick else {}
    cfg = tf.GPT2Config(attn_implementation="sdpa", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **sizes)
    return tf.GPT2Model(cfg), {"input_ids": torch.randint(0, cfg.vocab_size, (batch, seq))}


def build_llama(quick: bool, batch: int, seq: int):
    """A Llama-style model with grouped-query attention (KV heads < heads)."""
    import torch
    import transformers as tf

    sizes = (dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=1000) if quick else
             dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=4, num_attention_heads=16,
                  num_key_value_heads=4, vocab_size=32000))
    cfg = tf.LlamaConfig(attn_implementation="sdpa", **sizes)
    return tf.LlamaModel(cfg), {"input_ids": torch.randint(0, cfg.vocab_size, (batch, seq))}


def build_resnet50(quick: bool, batch: int):
    import torch

    from flopsight.cli.zoo.models import Bottleneck, ResNet

    side = 64 if quick else 224
    return ResNet(Bottleneck, [3, 4, 6, 3]), {"x": torch.randn(batch, 3, side, side)}


def build_lstm(quick: bool, batch: int):
    import torch
    from torch import nn

    class LSTMNet(nn.Module):
        """An embedding-free LSTM stack with a linear head (nn.LSTM: cuDNN's fused kernel on CUDA)."""

        def __init__(self, features: int, hidden: int):
            super().__init__()
            self.lstm = nn.LSTM(features, hidden, num_layers=2, batch_first=True)
            self.head = nn.Linear(hidden, 10)

        def forward(self, x):
            return self.head(self.lstm(x)[0][:, -1])

    features, hidden, seq = (16, 32, 8) if quick else (512, 1024, 64)
    return LSTMNet(features, hidden), {"x": torch.randn(batch, seq, features)}


def _to(inputs: dict, device, dtype=None) -> dict:
    """Inputs on ``device``; floating-point ones in ``dtype`` (when given)."""
    out = {}
    for k, v in inputs.items():
        v = v.to(device)
        if dtype is not None and v.is_floating_point():
            v = v.to(dtype)
        out[k] = v
    return out


def _has_backend() -> bool:
    import flopsight

    # profile() takes ProfileOptions' fields as keywords (**fields)
    options = getattr(flopsight, "ProfileOptions", None)
    return "backend" in inspect.signature(flopsight.profile).parameters or (
        options is not None and "backend" in {f.name for f in dataclasses.fields(options)})


def _reference_options() -> dict:
    """``profile`` options of the reference counts: the Python dispatch mode where flopsight
    also has a native backend (``native-backend`` compares the two)."""
    return {"backend": "python"} if _has_backend() else {}


def _counts(result) -> dict:
    return {"macs": result.total.forward.macs, "flops": result.total.forward.flops,
            "modules": {n.name: n.forward.macs for n in result.walk()}}


def _sdpa_ops(result) -> list[str]:
    return sorted(n for n in result.ops() if "attention" in n or "scaled_dot_product" in n)


def _why_not(error: Exception, plain: Callable[[], Any], guard) -> dict:
    """A run that raised under flopsight: ``skipped`` when the plain call raises too
    (torch cannot run it: an SDPA backend that does not support the config), else ``error``."""
    message = f"{type(error).__name__}: {error}".splitlines()[0][:300]
    try:
        with guard, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            plain()
    except Exception as e:
        return {"status": "skipped", "reason": f"torch cannot run it: {type(e).__name__}: {e}".splitlines()[0][:300]}
    return {"status": "error", "error": message}


# -- counts ------------------------------------------------------------------------------
def measure_counts(ctx: Ctx) -> list[dict]:
    """CPU fp32 counts of each model against the device's, fp32 and bf16, and for the
    transformers under each SDPA backend (an unsupported backend is a skipped run)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import flopsight

    b = 1 if ctx.quick else 2
    seq = 16 if ctx.quick else 128
    models = [
        ("bert-base", lambda: build_bert(ctx.quick, b, seq), True),
        ("gpt2", lambda: build_gpt2(ctx.quick, b, seq), True),
        ("llama-gqa", lambda: build_llama(ctx.quick, b, seq), True),
        ("resnet50", lambda: build_resnet50(ctx.quick, b), False),
        ("lstm", lambda: build_lstm(ctx.quick, b * 2), False),
    ]
    backends = ["default"] + [n for n in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")
                              if hasattr(SDPBackend, n)]
    runs = []
    for name, build, attention in models:
        torch.manual_seed(0)
        model, inputs = build()
        model.eval()
        with torch.no_grad():
            ref = _counts(flopsight.profile(model, kwargs=inputs, warm_up=0, **_reference_options()))
            for dtype in (torch.float32, torch.bfloat16):
                dev_model = copy.deepcopy(model).to(ctx.device, dtype)
                dev_inputs = _to(inputs, ctx.device, dtype)
                for backend in (backends if attention else ["default"]):
                    run = {"model": name, "dtype": str(dtype).replace("torch.", ""), "backend": backend}
                    guard = (contextlib.nullcontext() if backend == "default"
                             else sdpa_kernel(getattr(SDPBackend, backend)))
                    try:
                        with guard, warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            result = flopsight.profile(dev_model, kwargs=dev_inputs, warm_up=0, **_reference_options())
                    except Exception as e:
                        runs.append(dict(run, **_why_not(e, lambda: dev_model(**dev_inputs), guard)))
                        continue
                    what = compare_counts(ref, _counts(result))
                    runs.append(dict(run, status="mismatch" if what else "equal", what=what,
                                     macs=result.total.forward.macs, sdpa_ops=_sdpa_ops(result)))
                dev_model = None  # dropped, not deleted: closures above name them
                ctx.free()
        model = None  # dropped, not deleted: closures above name them
    return runs


# -- latency -----------------------------------------------------------------------------
def _deepspeed_latency_ms(model, inputs) -> float | str:
    """DeepSpeed's profiled forward latency (ms), or why there is none."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from deepspeed.profiling.flops_profiler import FlopsProfiler
    except Exception as e:  # not installed, or its import fails on this machine
        return f"deepspeed not available ({type(e).__name__})"
    try:
        prof = FlopsProfiler(model)
        prof.start_profile()
        try:
            model(**inputs)
            return prof.get_total_duration() * 1e3
        finally:
            prof.end_profile()
    except Exception as e:
        return f"deepspeed's profiler failed: {type(e).__name__}: {e}".splitlines()[0][:200]


#: the note's section 2 (../shared/research/gpu-2026-11-28.md): name -> (builder, dtype, batch, seq)
LATENCY_CONFIGS = {
    "bert-base fp32 8x128": ("bert", "float32", 8, 128),
    "bert-base bf16 64x512": ("bert", "bfloat16", 64, 512),
    "bert-large bf16 32x512": ("bert-large", "bfloat16", 32, 512),
    "gpt2 bf16 16x1024": ("gpt2", "bfloat16", 16, 1024),
    "resnet50 fp32 64": ("resnet50", "float32", 64, 0),
}


def _build(kind: str, quick: bool, batch: int, seq: int):
    if kind == "resnet50":
        return build_resnet50(quick, batch)
    if kind == "gpt2":
        return build_gpt2(quick, batch, seq)
    return build_bert(quick, batch, seq, large=kind == "bert-large")


def measure_latency(ctx: Ctx) -> dict[str, dict]:
    """Per configuration, interleaved rounds: a plain forward timed with two CUDA events, then
    ``flopsight.profile(warm_up=1)``'s reported forward latency; medians. Also the sum of the
    top-level modules' latencies (their kernels' device time on CUDA) with the root's own
    kernels, the GPU's busy time and idle share, and DeepSpeed's latency when it is installed."""
    import torch

    import flopsight

    passes = 2 if ctx.quick else 5
    out = {}
    for name, (kind, dtype, batch, seq) in LATENCY_CONFIGS.items():
        if ctx.quick:
            batch, seq = 2, 16
        torch.manual_seed(0)
        model, inputs = _build(kind, ctx.quick, batch, seq)
        model = model.to(ctx.device, getattr(torch, dtype)).eval()
        inputs = _to(inputs, ctx.device, getattr(torch, dtype))
        plain, profiled, children, busy = [], [], [], []
        with torch.no_grad():
            for _ in range(3):
                model(**inputs)
            for _ in range(passes):
                plain.append(ctx.time_ms(lambda: model(**inputs)))
                r = flopsight.profile(model, kwargs=inputs, warm_up=1, **ctx.clock())
                profiled.append(r.total.forward.latency * 1e3)
                root_own = r.module("").record.kernel_time.get("forward", 0.0)
                children.append((sum(r.module(c).forward.latency for c in r.total.children) + root_own) * 1e3)
                busy.append((r.kernels.busy or 0.0) * 1e3 if r.kernels is not None else float("nan"))
            ds = [_deepspeed_latency_ms(model, inputs) for _ in range(2)]
        ds_ms = statistics.median(ds) if all(isinstance(d, float) for d in ds) else ds[0]
        out[name] = {"plain_ms": statistics.median(plain), "profiled_ms": statistics.median(profiled),
                     "children_ms": statistics.median(children), "busy_ms": statistics.median(busy),
                     "forward_ms": statistics.median(profiled), "deepspeed_ms": ds_ms,
                     "timing": r.metadata.timing.method + "/" + r.metadata.timing.clock,
                     "top_level": list(r.total.children), "batch": batch, "seq": seq, "dtype": dtype,
                     "passes": passes}
        model = None  # dropped, not deleted: closures above name them
        ctx.free()
    return out


# -- overhead ----------------------------------------------------------------------------
def bert_training_step(ctx: Ctx, large: bool = False):
    """(model, optimizer, step): a BERT (large or base) bf16 model for sequence
    classification on the device and ``step()``, one forward, backward and AdamW step."""
    import torch

    torch.manual_seed(0)
    batch, seq = (2, 16) if ctx.quick else (8, 128)
    model, inputs = build_bert(ctx.quick, batch, seq, large=large, head=True)
    model = model.to(ctx.device, torch.bfloat16).train()
    inputs = _to(inputs, ctx.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)

    def step(zero_grad: bool = True):
        if zero_grad:
            opt.zero_grad(set_to_none=True)
        model(**inputs).loss.backward()
        opt.step()

    return model, opt, step


def _gpt2_training(quick: bool):
    """(batch, seq, config) of the issue's training step, GPT-2 small at 8 x 512 (a tiny one
    at 2 x 16 when ``quick``): :func:`measure_step`'s and :func:`measure_engine`'s."""
    import transformers as tf

    batch, seq = (2, 16) if quick else (8, 512)
    sizes = dict(n_embd=64, n_layer=2, n_head=4, vocab_size=1000) if quick else {}
    return batch, seq, tf.GPT2Config(attn_implementation="sdpa", bos_token_id=0, eos_token_id=0, **sizes)


def measure_step(ctx: Ctx) -> dict:
    """GPT-2 small bf16, batch 8 x 512, AdamW (the issue's step): paired rounds of a plain
    step, its phases timed with CUDA events at their boundaries, and a step inside
    ``flopsight.Profiler(model, optimizer=opt)``: the span (start to the step's end, device
    drained) on the host's wall clock, the build after it, and the result's phase latencies."""
    import torch
    import transformers as tf

    import flopsight

    torch.manual_seed(0)
    batch, seq, cfg = _gpt2_training(ctx.quick)
    model = tf.GPT2LMHeadModel(cfg).to(ctx.device, torch.bfloat16).train()
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=ctx.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    stamp = ctx.stamp

    def step(marks: list | None = None):
        opt.zero_grad(set_to_none=True)
        marks is not None and marks.append(stamp())
        loss = model(input_ids=ids, labels=ids).loss
        marks is not None and marks.append(stamp())
        loss.backward()
        marks is not None and marks.append(stamp())
        opt.step()
        marks is not None and marks.append(stamp())

    for _ in range(3):
        step()
    rounds = 2 if ctx.quick else 7
    plain, span, build, phases, reported = [], [], [], [], []
    timing = None
    for i in range(rounds + 1):
        plain.append(ctx.wall_s(step))
        marks: list = []
        step(marks)
        ctx.sync()
        a, f, b, s = marks
        phases.append({"fwd": ctx.between(a, f), "bwd": ctx.between(f, b), "step": ctx.between(b, s),
                       "iteration": ctx.between(a, s)})
        prof = flopsight.Profiler(model, optimizer=opt, **ctx.clock())
        ctx.sync()
        t0 = time.perf_counter()
        prof.start()
        step()
        ctx.sync()
        t1 = time.perf_counter()
        prof.stop()
        it = prof.result.iteration
        t2 = time.perf_counter()
        if i == 0:  # the first profiled step builds and loads what later ones reuse
            plain.pop()
            phases.pop()
            continue
        span.append(t1 - t0)
        build.append(t2 - t1)
        reported.append({"fwd": it.forward.latency, "bwd": it.backward.latency, "step": it.step.latency,
                         "iteration": it.latency})
        timing = f"{prof.result.metadata.timing.method}/{prof.result.metadata.timing.clock}"
    model = opt = None  # dropped, not deleted: closures above name them
    ctx.free()
    return {"plain_s": plain, "span_s": span, "build_s": build, "plain_phases": phases, "reported": reported,
            "timing": timing}


def measure_engine(ctx: Ctx) -> dict:
    """The note's section 4: GPT-2 small bf16 (fp32 off CUDA), micro-batch 8 x 512, torch
    AdamW, one rank, the engine's ``flops_profiler`` block at ``profile_step`` 4 (memory at its
    default), ZeRO-0 and ZeRO-3; per stage three engines in turn (the block off, DeepSpeed's
    profiler, ``flopsight.deepspeed.install()``), eight steps each, every step's wall time
    (device drained) and the iter latency the report file gives."""
    import tempfile

    import torch
    import transformers as tf

    if not ctx.cuda:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import deepspeed

            import flopsight.deepspeed
    except Exception as e:
        return {"skipped": f"deepspeed does not import ({type(e).__name__}: {e})".splitlines()[0][:200]}
    import torch.distributed as dist

    if not dist.is_initialized():
        os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": os.environ.get("MASTER_PORT", "29533"),
                           "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"})
        deepspeed.init_distributed(dist_backend="nccl" if ctx.cuda else "gloo", verbose=False)
    batch, seq, cfg = _gpt2_training(ctx.quick)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(0))
    out = {}
    for stage in (0, 3):
        figures: dict = {}
        for variant in ("plain", "deepspeed", "flopsight"):
            with tempfile.TemporaryDirectory() as tmp:
                report = os.path.join(tmp, "report.txt")
                config = {"train_micro_batch_size_per_gpu": batch, "zero_optimization": {"stage": stage},
                          "flops_profiler": {"enabled": variant != "plain", "profile_step": 4, "module_depth": -1,
                                             "top_modules": 1, "detailed": False, "output_file": report}}
                if ctx.cuda:
                    config["bf16"] = {"enabled": True}
                if variant == "flopsight":
                    flopsight.deepspeed.install()
                try:
                    torch.manual_seed(0)
                    model = tf.GPT2LMHeadModel(cfg)
                    engine, _, _, _ = deepspeed.initialize(
                        model=model, config=config, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-5))
                    x = ids.to(engine.device)
                    walls = []
                    for _ in range(8):
                        def one():
                            engine.backward(engine(input_ids=x, labels=x).loss)
                            engine.step()
                        walls.append(ctx.wall_s(one))
                    anatomy = engine.flops_profiler.result.iteration.anatomy if variant == "flopsight" else None
                finally:
                    if variant == "flopsight":
                        flopsight.deepspeed.uninstall()
                if variant == "plain":
                    figures["plain_s"] = statistics.median(walls[2:])
                    continue
                reported = _iter_latency(report)
                figures[variant] = {"step_s": walls[4], "reported_s": reported, "walls_s": walls}
                if anatomy is not None:
                    figures[variant]["framework"] = anatomy.framework / anatomy.total if anatomy.total else 0.0
                engine = model = None
                ctx.free()
        out[str(stage)] = figures
    return out


def _iter_latency(path: str) -> float | None:
    """Seconds on a DeepSpeed-format report's ``iter latency:`` line (None: no such line)."""
    units = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("iter latency:"):
                    value, unit = line.split()[-2:]
                    return float(value) * units[unit]
    except OSError:
        return None
    return None


# -- memory ------------------------------------------------------------------------------
def measure_memory(ctx: Ctx) -> dict:
    """One BERT-base training step inside ``Profiler(memory=True)``: flopsight's step peak
    against ``max_memory_allocated`` above the start (peak statistics reset first), and
    each encoder layer's saved activations against its ``memory_allocated`` delta over
    its forward, less its output when the layer did not save it itself (own hooks)."""
    import torch

    import flopsight

    torch.manual_seed(0)
    batch, seq = (2, 16) if ctx.quick else (8, 128)
    model, inputs = build_bert(ctx.quick, batch, seq, head=True)
    model = model.to(ctx.device).eval()  # eval: no dropout; grad mode on, so tensors are saved
    inputs = _to(inputs, ctx.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)

    def step():
        out = model(**inputs)
        out.loss.backward()
        opt.step()

    step()  # optimizer state, cuBLAS workspaces
    opt.zero_grad(set_to_none=True)
    alloc = ctx.memory_allocated
    layers = {f"bert.encoder.layer.{i}": m for i, m in enumerate(model.bert.encoder.layer)}
    deltas: dict[str, int] = {}
    starts: dict[str, int] = {}
    handles = []

    def pre(name):
        def hook(module, args):
            starts[name] = alloc()
        return hook

    def post(name):
        def hook(module, args, output):
            # less its output: a BERT layer does not save its own output (its last op, a
            # LayerNorm, saves its input); the next layer saves it as its input. Plus its
            # input, which its first Linear saves: allocated before the layer, flopsight
            # charges it to the first module that saves it (this layer)
            out = output[0] if isinstance(output, tuple) else output
            hidden = args[0] if args else None
            saved_input = hidden.untyped_storage().nbytes() if isinstance(hidden, torch.Tensor) else 0
            deltas[name] = alloc() - starts[name] - out.untyped_storage().nbytes() + saved_input
        return hook

    for name, m in layers.items():
        handles += [m.register_forward_pre_hook(pre(name)), m.register_forward_hook(post(name))]
    ctx.sync()
    ctx.reset_peak()
    base = alloc()
    try:
        with flopsight.Profiler(model, optimizer=opt, memory=True) as prof:
            out = model(**inputs)
            fwd_live = alloc() - base - out.logits.untyped_storage().nbytes() - out.loss.untyped_storage().nbytes()
            out.loss.backward()
            opt.step()
            del out
        ctx.sync()
    finally:
        for h in handles:
            h.remove()
    torch_peak = ctx.max_memory_allocated() - base
    r = prof.result
    usage = r.device_usage
    figures = {
        "peak": r.memory.peak, "torch_peak": torch_peak,
        "allocator_peak": usage.allocator_peak if usage is not None else None,
        "phase_peaks": dict(r.memory.phase_peaks),
        "activations": r.total.memory.activations, "torch_activations": fwd_live,
        "modules": {n: {"flopsight": r.module(n).memory.activations, "torch": deltas[n]} for n in layers},
        "construction": ("a layer's delta is what it allocated and kept over its forward, less its output "
                         "(the next layer saves it), plus its input (allocated before it, saved by its first "
                         "Linear): flopsight charges a saved storage to the first module that saves it"),
        "batch": batch, "seq": seq,
    }
    model = opt = prof = r = None  # dropped, not deleted: step() above names them
    ctx.free()
    return figures


# -- NVML ----------------------------------------------------------------------------------
def measure_nvml(ctx: Ctx) -> dict:
    """A BERT-base forward profiled on CUDA: ``result.device_usage`` and the report's line."""
    import torch

    import flopsight

    try:
        import pynvml  # noqa: F401
        available = True
    except ImportError:
        available = False
    model, inputs = build_bert(ctx.quick, 8, 128 if not ctx.quick else 16)
    model = model.to(ctx.device).eval()
    inputs = _to(inputs, ctx.device)
    with torch.no_grad():
        r = flopsight.profile(model, kwargs=inputs, warm_up=1)
    text = r.render("text")
    usage = r.device_usage
    figures = {"nvml_available": available, "usage": asdict(usage) if usage is not None else None,
               "line_present": "GPU utilization (NVML" in text,
               "device_total": ctx.device_total()}
    del model
    ctx.free()
    return figures


# -- efficiency ----------------------------------------------------------------------------
def measure_efficiency(ctx: Ctx) -> dict:
    """A BERT-base bf16 training step inside a Profiler: the recorded device name, the
    peak-table entry it maps to, and the step's MFU (flopsight.analysis.efficiency)."""
    import flopsight
    from flopsight.analysis.efficiency import efficiency
    from flopsight.hardware import detect_peak

    model, opt, step = bert_training_step(ctx)
    step()
    with flopsight.Profiler(model, optimizer=opt) as prof:
        step()
    r = prof.result
    eff = efficiency(r)
    name = r.metadata.device_name
    peak = detect_peak(name) if name else None
    model = opt = None  # dropped, not deleted: closures above name them
    ctx.free()
    return {"device_name": name, "peak_name": peak.name if peak else None, "mfu": eff.mfu,
            "dtype": eff.dtype, "peak_flops": eff.peak_flops, "reason": eff.reason,
            "iteration_ms": r.iteration.latency * 1e3, "iteration_flops": r.iteration.flops}


# -- compile -------------------------------------------------------------------------------
def build_mlp(quick: bool):
    """A stack of Linear-GELU-Linear-LayerNorm blocks: elementwise work torch.compile fuses."""
    import torch
    from torch import nn

    width, depth, tokens = (32, 2, 64) if quick else (1024, 8, 8192)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.act, self.down = nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
            self.norm = nn.LayerNorm(width)

        def forward(self, x):
            return self.norm(x + self.down(self.act(self.up(x))))

    return nn.Sequential(*[Block() for _ in range(depth)]), torch.randn(tokens, width)


def measure_compile(ctx: Ctx) -> dict:
    """``flopsight.profile`` of an eager and a ``torch.compile``d MLP stack: counts and
    the median reported forward latency of each (compiled once before any profile)."""
    import torch

    import flopsight

    torch.manual_seed(0)
    model, x = build_mlp(ctx.quick)
    model, x = model.to(ctx.device).eval(), x.to(ctx.device)
    compiled = torch.compile(model)
    reps = 2 if ctx.quick else 7
    with torch.no_grad():
        for _ in range(3):
            compiled(x)
            model(x)
        eager_r = [flopsight.profile(model, x, warm_up=2) for _ in range(reps)]
        comp_r = [flopsight.profile(compiled, x, warm_up=2) for _ in range(reps)]
    figures = {"mismatch": compare_counts(_counts(eager_r[0]), _counts(comp_r[0])),
               "eager_ms": statistics.median(r.total.forward.latency for r in eager_r) * 1e3,
               "compiled_ms": statistics.median(r.total.forward.latency for r in comp_r) * 1e3,
               "timing_note": comp_r[0].metadata.timing.compiled, "macs": eager_r[0].total.forward.macs}
    del model, compiled
    ctx.free()
    return figures


# -- native backend --------------------------------------------------------------------------
def measure_native(ctx: Ctx) -> dict:
    """BERT-base counted with ``backend="native"`` against ``backend="python"``, when
    flopsight has the argument. Both count on a host clock (``FakeClock``): the native
    recorder steps aside for CUDA-event timing. A run the native path did not count
    (``metadata.backend``) is reported as not available, never compared."""
    import torch

    import flopsight

    if not _has_backend():
        return {"available": False, "reason": f"{NOT_BUILT}: flopsight.profile has no backend= argument"}
    model, inputs = build_bert(ctx.quick, 2, 128 if not ctx.quick else 16)
    model = model.to(ctx.device).eval()
    inputs = _to(inputs, ctx.device)
    with torch.no_grad():
        python = flopsight.profile(model, kwargs=inputs, warm_up=0, backend="python", clock=flopsight.FakeClock())
        t0 = time.perf_counter()
        try:
            native = flopsight.profile(model, kwargs=inputs, warm_up=0, backend="native", clock=flopsight.FakeClock())
        except (ImportError, NotImplementedError, ValueError, RuntimeError) as e:
            text = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            if isinstance(e, RuntimeError) and "cannot be built" not in text:
                raise
            return {"available": False, "reason": f"native backend not available: {text}"}
    used = getattr(native.metadata, "backend", "")
    figures = {"backend_used": used, "backend_note": getattr(native.metadata, "backend_note", None),
               "native_seconds_incl_build": round(time.perf_counter() - t0, 2)}
    if used != "native":
        return dict(figures, available=False,
                    reason=f"backend='native' counted with {used or 'an unnamed path'!r}: {figures['backend_note']}")
    return dict(figures, available=True, mismatch=compare_counts(_counts(python), _counts(native)),
                macs=python.total.forward.macs)


def measure_kernels(ctx: Ctx) -> dict:
    """A BERT-base bf16 training step (forward with its loss, backward, AdamW step) inside
    ``flopsight.Profiler(model, optimizer=opt, kernels=True)``, after two plain steps:
    how many kernels ran, their device time, and what no module was charged with."""
    import flopsight

    model, opt, step = bert_training_step(ctx)
    for _ in range(2):
        step()
    opt.zero_grad(set_to_none=True)  # outside the span: user code, not the model's
    with flopsight.Profiler(model, optimizer=opt, kernels=True) as prof:
        step(zero_grad=False)
    result = prof.result
    summary = result.kernels
    kernels = sum(k.calls for rec in result.modules.values() for ks in rec.kernels.values() for k in ks.values())
    unassigned = sorted(summary.unassigned.items(), key=lambda kv: -kv[1].seconds)[:5]
    del model, opt
    ctx.free()
    return {"source": summary.source, "expected_source": "cuda" if ctx.cuda else "cpu",
            "seconds": summary.seconds, "unassigned_seconds": summary.unassigned_seconds,
            "kernels": kernels, "modules": sum(1 for rec in result.modules.values() if rec.kernels),
            "kernel_time": dict(result.total.kernel_time),
            "top_unassigned": {name: [k.calls, k.seconds] for name, k in unassigned}}


# -- capabilities not built yet ------------------------------------------------------------


def measure_compile_regions(ctx: Ctx) -> dict:
    """The MLP stack with each block ``torch.compile``d on its own, profiled with
    ``kernels=True`` (no call before: flopsight must warm each region up itself), against
    the eager stack's counts: which modules the result names compiled, each region's kernels,
    and any kernel or op of compilation (dynamo, inductor) in the timed pass."""
    import torch

    import flopsight

    torch.manual_seed(0)
    eager, x = build_mlp(ctx.quick)
    eager, x = eager.to(ctx.device).eval(), x.to(ctx.device)
    regions = copy.deepcopy(eager)
    for i in range(len(regions)):
        regions[i] = torch.compile(regions[i])
    with torch.no_grad():
        counted = flopsight.profile(eager, x)
        result = flopsight.profile(regions, x, kernels=True)
    paths = [str(i) for i in range(len(regions))]
    inside = {p: sum(k.calls for k in kernels_of(result, p).values()) for p in paths}
    names = [name for rec in result.modules.values() for ks in rec.kernels.values() for name in ks]
    figures = {"blocks": len(paths), "compiled": list(result.metadata.compiled),
               "region_kernels": sum(inside.values()),
               "region_ms": sum(result.module(p).kernel_time.get("forward", 0.0) for p in paths) * 1e3,
               "regions_without_kernels": [p for p in paths if not inside[p]],
               "compile_events": sum(1 for n in names if "dynamo" in n or "inductor" in n.lower() and "compile" in n),
               # the compiled tree has a wrapper level more ('0._orig_mod.up'): the totals compare
               "mismatch": None if (counted.total.forward.macs, counted.total.forward.flops)
               == (result.total.forward.macs, result.total.forward.flops)
               else f"total {result.total.forward.macs} vs eager {counted.total.forward.macs} MACs"}
    del eager, regions
    ctx.free()
    return figures


def kernels_of(result, path: str) -> dict:
    """A module's kernels in the forward, its submodules' included, by name."""
    out = {}
    for node in result.walk():
        if node.name == path or node.name.startswith(path + "."):
            for name, k in node.record.kernels.get("forward", {}).items():
                out[name] = out[name] + k if name in out else k
    return out


# =========================================================================================
# Runner
# =========================================================================================
@dataclass
class Check:
    name: str
    run: Callable[[Ctx], Verdict]
    budget_s: float  # expected wall time on one H100 (printed against the measured time)
    needs_cuda: bool = True


_LATENCY_CACHE: dict = {}


def _latency(ctx: Ctx) -> Verdict:
    figures = measure_latency(ctx)
    _LATENCY_CACHE["figures"] = figures
    return judge_latency(figures)


def _latency_modules(ctx: Ctx) -> Verdict:
    """Judged from the latency check's passes (no extra run)."""
    figures = _LATENCY_CACHE.get("figures")
    if figures is None:
        return Verdict(SKIP, "the latency check did not produce figures")
    return judge_module_sum(figures)


CHECKS = [
    Check("counts", lambda c: judge_counts(measure_counts(c)), 90),
    Check("latency", _latency, 60),
    Check("latency-modules", _latency_modules, 1),
    Check("training-step", lambda c: judge_step(measure_step(c)), 40),
    Check("engine", lambda c: judge_engine(measure_engine(c)), 60),
    Check("kernels", lambda c: judge_kernels(measure_kernels(c)), 30),
    Check("memory", lambda c: judge_memory(measure_memory(c)), 30),
    Check("nvml", lambda c: judge_nvml(measure_nvml(c)), 20),
    Check("efficiency", lambda c: judge_efficiency(measure_efficiency(c)), 20),
    Check("native-backend", lambda c: judge_native(measure_native(c)), 60),  # may build the recorder
    Check("compile", lambda c: judge_compile(measure_compile(c)), 90),
    Check("compile-regions", lambda c: judge_compile_regions(measure_compile_regions(c)), 90),
]



def run_checks(ctx: Ctx | None, checks: list[Check], deadline_s: float) -> list[dict]:
    """Run each check, printing its line and time; an exception is that check's FAIL. A
    check whose budget would end past ``deadline_s`` (from the start) is not started."""
    t_start = time.perf_counter()
    rows = []
    for check in checks:
        t0 = time.perf_counter()
        if check.needs_cuda and ctx is None:
            verdict = Verdict(SKIP, NO_CUDA)
        elif t0 - t_start + check.budget_s > deadline_s:
            verdict = Verdict(SKIP, f"not started: its {check.budget_s:.0f} s budget would end past the "
                                    f"{deadline_s:.0f} s deadline ({t0 - t_start:.0f} s spent)")
        else:
            try:
                verdict = check.run(ctx)
            except Exception as e:  # a broken check must not stop the others
                verdict = Verdict(FAIL, f"{type(e).__name__}: {e}".splitlines()[0][:400],
                                  {"traceback": traceback.format_exc()})
        secs = time.perf_counter() - t0
        print(f"{verdict.status} {check.name}: {verdict.figure}", flush=True)
        over = "  OVER BUDGET" if secs > check.budget_s else ""
        print(f"    [{check.name}: {secs:.1f} s of {check.budget_s:.0f} s budget]{over}", flush=True)
        rows.append({"name": check.name, "status": verdict.status, "figure": verdict.figure,
                     "seconds": round(secs, 2), "details": verdict.details})
    return rows


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and obj != obj:
        return None
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return repr(obj)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="folder for summary.json (created)")
    parser.add_argument("--quick", action="store_true", help="tiny models (for tests)")
    parser.add_argument("--on-cpu", action="store_true", help="run the CUDA checks on the CPU (a dry run)")
    parser.add_argument("--only", default="", help="comma-separated checks to run")
    parser.add_argument("--skip", default="", help="comma-separated checks to leave out")
    parser.add_argument("--deadline", type=float, default=340.0,
                        help="seconds (from the first check) by which every check must end: one whose "
                             "budget would end later is skipped")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.perf_counter()

    import torch

    import flopsight

    names = {c.name for c in CHECKS}
    only = {n for n in args.only.split(",") if n}
    skip = {n for n in args.skip.split(",") if n}
    unknown = (only | skip) - names
    if unknown:
        parser.error(f"unknown check(s) {', '.join(sorted(unknown))}; known: {', '.join(c.name for c in CHECKS)}")
    checks = [c for c in CHECKS if (not only or c.name in only) and c.name not in skip]

    cuda = torch.cuda.is_available()
    device_name = torch.cuda.get_device_name(0) if cuda else "cpu"
    if cuda:
        ctx = Ctx(torch.device("cuda", 0), args.quick)
    elif args.on_cpu:
        ctx = Ctx(torch.device("cpu"), args.quick)
    else:
        ctx = None
    try:
        import transformers
        tf_version = transformers.__version__
    except Exception as e:
        tf_version = f"unavailable ({type(e).__name__})"
    print(f"gpu_check: device {device_name}, torch {torch.__version__}, transformers {tf_version}, "
          f"flopsight {flopsight.__version__}, python {platform.python_version()}"
          f"{', quick' if args.quick else ''}{', on-cpu dry run' if args.on_cpu and not cuda else ''}", flush=True)

    rows = run_checks(ctx, checks, args.deadline)
    counts = {s: sum(r["status"] == s for r in rows) for s in (PASS, FAIL, SKIP)}
    summary_line = f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped"
    summary = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device_name": device_name, "torch_version": torch.__version__, "transformers_version": tf_version,
        "python_version": platform.python_version(), "flopsight_version": flopsight.__version__,
        "argv": sys.argv[1:] if argv is None else argv, "quick": args.quick, "on_cpu": args.on_cpu and not cuda,
        "seconds": round(time.perf_counter() - t0, 1), "summary": summary_line, "checks": _jsonable(rows),
    }
    path = os.path.join(args.out, "summary.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)

    width = max(len(r["name"]) for r in rows) if rows else 4
    print(f"\n{'check':<{width}}  status  seconds  figure", flush=True)
    for r in rows:
        print(f"{r['name']:<{width}}  {r['status']:<6}  {r['seconds']:7.1f}  {r['figure']}", flush=True)
    print(f"summary: {path}; total {summary['seconds']} s", flush=True)
    print(summary_line, flush=True)
    return 1 if counts[FAIL] else 0


if __name__ == "__main__":
    sys.exit(main())
