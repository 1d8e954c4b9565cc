"""Efficiency against a peak: achieved FLOPS, fraction of peak, bytes, intensity, roofline, MFU/HFU."""

import dataclasses
import json

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import flopsight
from flopsight.analysis.efficiency import efficiency, efficiency_dict, peak_dtype
from flopsight.hardware import PEAKS, Peak
from flopsight.renderers.efficiency_lines import efficiency_lines
from flopsight.result import ModuleStats, ProfileResult
from flopsight.result.metadata import Metadata
from flopsight.result.stats import Stats

# ridge point 5 FLOPs per byte: 5 TFLOPS over 1 TB/s
RIDGE_5 = Peak("ridge 5", {"fp32": 5e12, "bf16": 10e12}, memory_bandwidth=1e12, source="test")


def hand_built(bytes_moved=True, **metadata):
    """A root with a compute-heavy child ``a`` and a memory-heavy child ``b``, built by hand.

    a: 1,000,000 FLOPs moving 10,000 bytes in 1 ms: intensity 100, 1 GFLOPS
    b:    10,000 FLOPs moving 10,000 bytes in 1 ms: intensity 1,    10 MFLOPS
    root's own code: 2,000 FLOPs moving 1,000 bytes in 0.5 ms
    """
    def record(name, parent, children, stats, moved):
        depth = 0 if parent is None else 1
        extra = {"bytes_moved": {"forward": moved}} if bytes_moved else {}
        return ModuleStats(name, "M", depth, parent, children, 0, 0, phases={"forward": stats},
                           ops={"forward": {"aten.op": stats}}, **extra)

    modules = {
        "": record("", None, ("a", "b"), Stats(0, 2_000, 0.0005, 1), {"aten.add": 1_000}),
        "a": record("a", "", (), Stats(500_000, 1_000_000, 0.001, 1), {"aten.mm": 10_000}),
        "b": record("b", "", (), Stats(0, 10_000, 0.001, 1), {"aten.mul": 6_000, "aten.add": 4_000}),
    }
    md = {"dtype": "float32", "device": "cpu", "device_type": "cpu", "mode": "forward", **metadata}
    return ProfileResult(modules, metadata=Metadata(**md), spans={"forward": [0.0025]})


def test_per_module_figures_and_roofline_verdicts():
    eff = efficiency(hand_built(), peak=RIDGE_5)
    assert (eff.dtype, eff.peak_flops, eff.ridge, eff.reason) == ("fp32", 5e12, 5.0, None)
    a, b, root = eff.modules["a"]["forward"], eff.modules["b"]["forward"], eff.modules[""]["forward"]
    assert a.flops_per_second == pytest.approx(1e9) and a.fraction_of_peak == pytest.approx(1e9 / 5e12)
    assert (a.bytes, a.intensity, a.bound) == (10_000, 100.0, "compute")
    assert (b.bytes, b.intensity, b.bound) == (10_000, 1.0, "memory")
    assert b.bytes_per_second == pytest.approx(1e7) and b.fraction_of_bandwidth == pytest.approx(1e7 / 1e12)
    # inclusive: the root's own 1,000 bytes plus its children's 20,000; its FLOPs likewise
    assert (root.bytes, root.flops) == (21_000, 1_012_000)
    assert root.intensity == pytest.approx(1_012_000 / 21_000) and root.bound == "compute"
    assert root.latency == pytest.approx(0.0025)
    # forward-only model figure: the forward span's FLOPs per second over the peak
    assert eff.forward_fraction == pytest.approx(1_012_000 / 0.0025 / 5e12)
    assert eff.mfu is None and eff.hfu is None and not eff.training


def test_without_bytes_there_is_no_intensity_and_no_verdict():
    eff = efficiency(hand_built(bytes_moved=False), peak=RIDGE_5)
    a = eff.modules["a"]["forward"]
    assert (a.bytes, a.intensity, a.bound) == (None, None, None)
    assert a.fraction_of_peak == pytest.approx(1e9 / 5e12)


def test_a_peak_without_bandwidth_gives_ratios_but_no_verdict():
    eff = efficiency(hand_built(), peak=1e12)
    assert eff.modules["a"]["forward"].bound is None and eff.ridge is None
    assert "no memory bandwidth" in eff.reason
    assert eff.modules["a"]["forward"].fraction_of_peak == pytest.approx(1e-3)


def test_the_dtype_rule():
    assert peak_dtype(Metadata(dtype="bfloat16", device_type="cuda")) == "bf16"
    # float32 on CUDA is IEEE fp32 unless the run allowed TF32 (torch's default does not)
    assert peak_dtype(Metadata(dtype="float32", device_type="cuda")) == "fp32"
    assert peak_dtype(Metadata(dtype="float32"), dtype="tf32") == "tf32"
    assert peak_dtype(Metadata(dtype="")) is None
    eff = efficiency(hand_built(dtype="bfloat16"), peak=RIDGE_5)
    assert (eff.dtype, eff.peak_flops, eff.ridge) == ("bf16", 10e12, 10.0)


def test_no_mfu_when_the_peak_has_no_figure_for_the_dtype():
    eff = efficiency(hand_built(dtype="bfloat16"), peak="NVIDIA V100 SXM2")  # Volta: no bf16
    assert eff.peak_flops is None and eff.forward_fraction is None
    assert eff.reason == "NVIDIA V100 SXM2 has no bf16 peak"
    assert ("fwd fraction of peak", "n/a: NVIDIA V100 SXM2 has no bf16 peak") in efficiency_lines(
        hand_built(dtype="bfloat16"), peak="NVIDIA V100 SXM2")


def test_cpu_without_a_peak_gets_no_ratio_and_is_never_calibrated_implicitly(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    result = hand_built()
    eff = efficiency(result)
    assert eff.peak is None and eff.forward_fraction is None and "peak='cpu'" in eff.reason
    lines = efficiency_lines(result)
    assert [label for label, _ in lines] == ["fwd bytes moved, arithmetic intensity"]  # no ratio, no verdict
    assert not (tmp_path / "flopsight").exists()  # nothing was measured
    # asked for, the calibration runs (and is cached)
    assert efficiency(result, peak="cpu").peak.name.startswith("CPU")
    assert (tmp_path / "flopsight" / "cpu_peaks.json").exists()


def test_an_unknown_accelerator_gets_a_line_saying_so():
    result = hand_built(device="cuda:0", device_type="cuda")
    assert efficiency(result).peak is None
    label, value = efficiency_lines(result)[0]
    assert label == "fwd fraction of peak" and value.startswith("n/a: the name of device 'cuda:0' is not recorded")


def test_the_peak_is_printed_beside_every_ratio():
    result = hand_built(dtype="bfloat16", device="cuda:0", device_type="cuda")
    lines = dict(efficiency_lines(result, peak="NVIDIA H100 80GB HBM3"))
    source = PEAKS["NVIDIA H100 SXM"].source
    assert lines["peak (NVIDIA H100 SXM, dense bf16)"] == f"989.5 TFLOPS, 3.35 TB/s memory; source: {source}"
    # 1,012,000 FLOPs in 2.5 ms = 404.8 MFLOPS, of 989.5 TFLOPS
    assert lines["fwd fraction of peak (peak 989.5 TFLOPS bf16, NVIDIA H100 SXM)"] == "<0.01%"
    # intensity 1,012,000 / 21,000 = 48.19 FLOP/B, below the ridge 989.5e12 / 3.35e12 = 295.37
    assert lines["fwd bytes moved, arithmetic intensity"] == (
        "21 KB, 48.19 FLOP/B: memory-bound (ridge 295.37 FLOP/B, NVIDIA H100 SXM)")


def test_a_ratio_above_the_peak_is_flagged():
    lines = dict(efficiency_lines(hand_built(), peak=1e8))  # 404.8 MFLOPS measured
    assert lines["fwd fraction of peak (peak 100 MFLOPS fp32, given)"].startswith("404.8% (above the peak")


def test_efficiency_dict_is_json_ready():
    d = efficiency_dict(hand_built(), peak=RIDGE_5)
    assert json.loads(json.dumps(d, allow_nan=False)) == d
    assert d["peak"]["name"] == "ridge 5" and d["peak"]["source"] == "test" and d["peak"]["ridge"] == 5.0
    assert d["peak"]["dtype"] == "fp32" and d["peak"]["flops_per_second"] == 5e12
    a = d["modules"]["a"]["forward"]
    assert {k: a[k] for k in ("bytes", "intensity", "bound")} == {"bytes": 10_000, "intensity": 100.0,
                                                                  "bound": "compute"}
    assert a["flops_per_second"] == pytest.approx(1e9) and a["fraction_of_peak"] == pytest.approx(2e-4)
    assert d["model"]["forward_fraction_of_peak"] == pytest.approx(1_012_000 / 0.0025 / 5e12)


def test_efficiency_dict_is_none_when_there_is_nothing_to_say():
    # no peak, no time measured, no bytes captured (a result saved before bytes were)
    stats = Stats(4, 8, 0.0, 1)
    root = ModuleStats("", "Linear", 0, None, (), 20, 20, phases={"forward": stats})
    result = ProfileResult({"": root}, metadata=Metadata(dtype="float32", device="meta", device_type="meta"))
    assert efficiency_dict(result) is None and efficiency_lines(result) == []
    assert efficiency(result).reason == "the meta device runs nothing"
    # with a peak there is something to say (the peak), if no ratio
    assert efficiency_dict(result, peak=1e12)["model"]["forward_fraction_of_peak"] is None


def test_arguments_are_validated():
    with pytest.raises(TypeError, match="result: expected a flopsight ProfileResult"):
        efficiency({"": 1})
    with pytest.raises(ValueError, match="peak: no device named"):
        efficiency(hand_built(), peak="NVIDIA Z9000")
    with pytest.raises(ValueError, match="dtype: expected one of"):
        efficiency(hand_built(), peak=1e12, dtype="fp99")


# -- profiled for real: bytes and intensity derived by hand -------------------------------------
def test_linear_bytes_and_intensity_by_hand():
    # Linear(16, 8) on a (4, 16) float32 batch runs addmm(bias, x, W.t()), W.t() a view (0 bytes):
    #   read:    bias 8 + x 4*16 + W 8*16 = 200 elements; written: out 4*8 = 32 elements
    #   bytes  = (200 + 32) * 4 = 928
    #   FLOPs  = 2 * 4*16*8 (MACs) + 4*8 (bias adds) = 1056; intensity 1056 / 928 = 1.1379
    # ReLU on the (4, 8) output reads 32 and writes 32 elements: 256 bytes, 32 FLOPs
    model = nn.Sequential(nn.Linear(16, 8), nn.ReLU())
    result = flopsight.profile(model, torch.randn(4, 16), clock=flopsight.FakeClock())
    eff = efficiency(result, peak=RIDGE_5)
    linear, relu, root = (eff.modules[p]["forward"] for p in ("0", "1", ""))
    assert (linear.bytes, linear.flops) == (928, 1056) and linear.intensity == pytest.approx(1056 / 928)
    assert (relu.bytes, relu.flops) == (256, 32) and relu.intensity == 0.125
    assert (root.bytes, root.flops) == (928 + 256, 1056 + 32)  # inclusive over the subtree
    assert linear.bound == "memory" and relu.bound == "memory"  # both below the ridge of 5


def test_conv2d_bytes_and_intensity_by_hand():
    # Conv2d(3, 8, 3, padding=1) on a (2, 3, 8, 8) float32 input runs one aten.convolution:
    #   read:    input 2*3*8*8 = 384, weight 8*3*3*3 = 216, bias 8 = 608 elements
    #   written: output 2*8*8*8 = 1024 elements;  bytes = (608 + 1024) * 4 = 6528
    #   MACs = 1024 outputs * 3*3*3 = 27648; FLOPs = 2 * 27648 + 1024 (bias) = 56320
    #   intensity = 56320 / 6528 = 8.627: above the ridge of 5, compute-bound
    result = flopsight.profile(nn.Conv2d(3, 8, 3, padding=1), torch.randn(2, 3, 8, 8), clock=flopsight.FakeClock())
    conv = efficiency(result, peak=RIDGE_5).modules[""]["forward"]
    assert (conv.bytes, conv.flops) == (6528, 56320)
    assert conv.intensity == pytest.approx(56320 / 6528) and conv.bound == "compute"
    # on an H100 (ridge 67e12 / 3.35e12 = 20 FLOP/B in fp32) the same conv is memory-bound
    assert efficiency(result, peak="NVIDIA H100 SXM").modules[""]["forward"].bound == "memory"


# -- MFU and HFU on a real training step with activation checkpointing ---------------------------
class Checkpointed(nn.Module):
    """Linear(8, 16) -> checkpointed Sequential(Linear(16, 16), Linear(16, 16)) -> Linear(16, 4), no biases."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(8, 16, bias=False)
        self.block = nn.Sequential(nn.Linear(16, 16, bias=False), nn.Linear(16, 16, bias=False))
        self.out = nn.Linear(16, 4, bias=False)

    def forward(self, x):
        return self.out(checkpoint(self.block, self.head(x), use_reentrant=False))


def test_mfu_and_hfu_on_a_checkpointed_training_step():
    torch.manual_seed(0)
    model = Checkpointed()
    with flopsight.Profiler(model, clock=flopsight.FakeClock()) as prof:
        model(torch.randn(4, 8)).sum().backward()
    result = prof.result
    # batch 4; forward MACs 4 * (8*16 + 16*16 + 16*16 + 16*4) = 2816: 5632 FLOPs
    # backward: the first layer only its weight gradient (4*8*16 = 512 MACs), the others
    # both gradients (2 * 4 * (256 + 256 + 64) = 4608 MACs): 5120 MACs, 10240 FLOPs
    # recompute: non-reentrant checkpointing re-runs only block.0 (4*16*16 = 1024 MACs): 2048 FLOPs
    it = result.iteration
    assert (it.forward.flops, it.backward.flops, it.recompute.flops) == (5632, 10240, 2048)
    model_flops, hardware_flops = 5632 + 10240, 5632 + 10240 + 2048
    peak = 1e6
    eff = efficiency(result, peak=peak)
    assert eff.training and it.latency > 0
    assert eff.mfu == pytest.approx(model_flops / it.latency / peak)
    assert eff.hfu == pytest.approx(hardware_flops / it.latency / peak)
    assert eff.hfu / eff.mfu == pytest.approx(17920 / 15872)
    lines = dict(efficiency_lines(result, peak=peak))
    assert lines["MFU (peak 1 MFLOPS fp32, given)"] == f"{round(100 * eff.mfu, 2):g}%"
    assert lines["HFU, recompute included (peak 1 MFLOPS fp32, given)"] == f"{round(100 * eff.hfu, 2):g}%"
    assert efficiency_dict(result, peak=peak)["model"]["hfu"] == pytest.approx(eff.hfu)


def test_no_hfu_without_recompute():
    model = nn.Linear(8, 4)
    with flopsight.Profiler(model, clock=flopsight.FakeClock()) as prof:
        model(torch.randn(2, 8)).sum().backward()
    eff = efficiency(prof.result, peak=1e9)
    assert eff.mfu is not None and eff.hfu is None
    assert not any(label.startswith("HFU") for label, _ in efficiency_lines(prof.result, peak=1e9))


def test_meta_latencies_give_no_rates_but_verdicts_hold():
    # on meta nothing runs: no achieved FLOPS, fraction of peak or MFU from Python time; the
    # intensity against a peak's ridge point still gives the roofline verdict
    model = torch.nn.Linear(64, 64).to("meta")
    result = flopsight.profile(model, torch.ones(32, 64, device="meta"), warm_up=0)
    eff = efficiency(result, peak="H100 SXM")
    root = eff.modules[""]["forward"]
    assert root.flops_per_second is None and root.fraction_of_peak is None
    assert root.intensity is not None and root.bound in ("compute", "memory")
    assert not any(label.startswith(("MFU", "fwd fraction")) for label, _ in efficiency_lines(result, "H100 SXM"))


def test_autocast_inside_the_span_picks_the_peak_column():
    # the parameters are float32; autocast runs the matmuls in bf16, entered inside the span
    model = nn.Sequential(nn.Linear(8, 8))
    with flopsight.Profiler(model) as prof:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(torch.ones(2, 8))
    md = prof.result.metadata
    assert (md.dtype, md.autocast_dtype) == ("float32", "bfloat16")
    assert peak_dtype(md) == "bf16"
    assert flopsight.profile(model, torch.ones(2, 8)).metadata.autocast_dtype == ""
    with torch.autocast("cpu", dtype=torch.bfloat16):  # around profile(): the same
        assert flopsight.profile(model, torch.ones(2, 8)).metadata.autocast_dtype == "bfloat16"


def test_a_float32_conv_net_on_cuda_reads_tf32_under_cudnns_default():
    from flopsight.analysis.efficiency import mostly_convolutions

    conv = flopsight.profile(nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU()), torch.ones(1, 3, 8, 8))
    mlp = flopsight.profile(nn.Sequential(nn.Linear(8, 8)), torch.ones(2, 8))
    assert mostly_convolutions(conv) and not mostly_convolutions(mlp)
    on_gpu = dict(device_type="cuda", device="cuda:0", cudnn_conv_precision="tf32", float32_matmul_precision="highest")
    assert peak_dtype(dataclasses.replace(conv.metadata, **on_gpu), convolutions=True) == "tf32"
    assert peak_dtype(dataclasses.replace(mlp.metadata, **on_gpu)) == "fp32"
    ieee = dict(on_gpu, cudnn_conv_precision="ieee")
    assert peak_dtype(dataclasses.replace(conv.metadata, **ieee), convolutions=True) == "fp32"
    assert conv.metadata.cudnn_conv_precision in ("tf32", "ieee")  # recorded from torch


def test_with_cuda_kernels_a_modules_rate_is_over_its_kernels_gpu_time():
    from flopsight.result.kernels import Kernel, KernelSummary

    model = nn.Sequential(nn.Linear(8, 8))
    result = flopsight.profile(model, torch.ones(4, 8), clock=flopsight.FakeClock())
    # the same profile as if its kernels had been recorded on a GPU: 2 microseconds of addmm
    record = result.modules["0"]._replace(kernels={"forward": {"gemm": Kernel(1, 2e-6)}})
    modules = dict(result.modules, **{"0": record})
    on_gpu = dataclasses.replace(result, modules=modules, kernels=KernelSummary("cuda", 2e-6))
    flops = result.module("0").forward.flops  # 4 * 8 * 8 MACs * 2 + 4 * 8 bias adds = 544
    eff = efficiency(on_gpu, peak=1e12)
    assert eff.time_source == "device"
    assert eff.modules["0"]["forward"].flops_per_second == pytest.approx(flops / 2e-6)  # 272 GFLOP/s
    # without kernels (or with the CPU's), its span's time
    assert efficiency(result, peak=1e12).modules["0"]["forward"].flops_per_second == pytest.approx(
        flops / result.module("0").forward.latency)
    assert efficiency_dict(on_gpu, peak=1e12)["module_time"] == "device"
