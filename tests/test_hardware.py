"""The peak table, device detection, user-given peaks and the CPU calibration's cache."""

import json

import pytest
import torch

from flopsight.hardware import (
    DTYPES,
    PEAKS,
    Peak,
    calibrate_cpu,
    canonical_dtype,
    cpu_cache_key,
    cpu_cache_path,
    detect_peak,
    device_peak,
    lookup_peak,
    resolve_peak,
)

# Dense figures as the datasheets print them, in TFLOPS (TOPS for int8) and TB/s. Where a
# datasheet prints only the "with sparsity" figure (L4, H100, H200, B200: marked *), the
# dense figure is half of it, and the entry's note says so.
EXPECTED = {
    #  name                            fp64    fp32    tf32    bf16     fp16     fp8      int8     TB/s
    "NVIDIA V100 SXM2":               (7.8,    15.7,   None,   None,    125,     None,    None,    0.9),
    "NVIDIA V100 PCIe":               (7,      14,     None,   None,    112,     None,    None,    0.9),
    "NVIDIA A100 40GB":               (19.5,   19.5,   156,    312,     312,     None,    624,     1.555),
    "NVIDIA A100 80GB SXM":           (19.5,   19.5,   156,    312,     312,     None,    624,     2.039),
    "NVIDIA A100 80GB PCIe":          (19.5,   19.5,   156,    312,     312,     None,    624,     1.935),
    "NVIDIA A10":                     (None,   31.2,   62.5,   125,     125,     None,    250,     0.6),
    "NVIDIA L4":                      (None,   30.3,   120/2,  242/2,   242/2,   485/2,   485/2,   0.3),    # *
    "NVIDIA L40S":                    (None,   91.6,   183,    362.05,  362.05,  733,     733,     0.864),
    "NVIDIA H100 SXM":                (67,     67,     989/2,  1979/2,  1979/2,  3958/2,  3958/2,  3.35),   # *
    "NVIDIA H100 PCIe":               (51,     51,     756/2,  1513/2,  1513/2,  3026/2,  3026/2,  2.0),    # *
    "NVIDIA H200":                    (67,     67,     989/2,  1979/2,  1979/2,  3958/2,  3958/2,  4.8),    # *
    "NVIDIA B200":                    (37,     75,     2200/2, 4500/2,  4500/2,  9000/2,  9000/2,  7.7),    # *
    # per GCD: the module's 95.7 / 383 / 383 TFLOPS and 3.2768 TB/s over its two dies
    "AMD Instinct MI250X (one GCD)":  (95.7/2, 95.7/2, None,   383/2,   383/2,   None,    383/2,   3.2768/2),
    "AMD Instinct MI300X":            (163.4,  163.4,  653.7,  1307.4,  1307.4,  2614.9,  2614.9,  5.3),
}


def test_the_table_holds_every_device_of_the_list_and_nothing_else():
    assert set(PEAKS) == set(EXPECTED)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_dense_figures_bandwidth_and_source(name):
    peak = PEAKS[name]
    *flops, bandwidth = EXPECTED[name]
    for dtype, tflops in zip(DTYPES, flops):
        expected = None if tflops is None else pytest.approx(tflops * 1e12, rel=1e-9)
        assert peak.flops_for(dtype) == expected, dtype
    assert peak.memory_bandwidth == pytest.approx(bandwidth * 1e12, rel=1e-9)
    assert "datasheet" in peak.source or "specifications" in peak.source
    assert "https://" in peak.source


@pytest.mark.parametrize("name", ["NVIDIA L4", "NVIDIA H100 SXM", "NVIDIA H100 PCIe", "NVIDIA H200", "NVIDIA B200"])
def test_entries_read_from_sparsity_figures_say_they_were_halved(name):
    assert "halved" in PEAKS[name].note


@pytest.mark.parametrize("torch_name, entry", [
    ("Tesla V100-SXM2-16GB", "NVIDIA V100 SXM2"),
    ("Tesla V100-SXM2-32GB", "NVIDIA V100 SXM2"),
    ("Tesla V100-PCIE-32GB", "NVIDIA V100 PCIe"),
    ("NVIDIA A100-SXM4-40GB", "NVIDIA A100 40GB"),
    ("NVIDIA A100-PCIE-40GB", "NVIDIA A100 40GB"),
    ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB SXM"),
    ("NVIDIA A100-SXM-80GB", "NVIDIA A100 80GB SXM"),  # how some drivers name it (issue 17)
    ("NVIDIA A100 80GB PCIe", "NVIDIA A100 80GB PCIe"),
    ("NVIDIA A10", "NVIDIA A10"),
    ("NVIDIA L4", "NVIDIA L4"),
    ("NVIDIA L40S", "NVIDIA L40S"),
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"),
    ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
    ("NVIDIA H200", "NVIDIA H200"),
    ("NVIDIA B200", "NVIDIA B200"),
    ("AMD Instinct MI250X", "AMD Instinct MI250X (one GCD)"),
    ("AMD Instinct MI300X", "AMD Instinct MI300X"),
    ("nvidia h100 sxm", "NVIDIA H100 SXM"),  # the table's own names, any case
])
def test_detection_from_torch_device_names(torch_name, entry):
    assert detect_peak(torch_name) is PEAKS[entry]


@pytest.mark.parametrize("torch_name", [
    "NVIDIA GeForce RTX 4090",
    "NVIDIA A10G",  # AWS's variant: other clocks, not the A10
    "NVIDIA H100 NVL",  # other figures than the H100 PCIe
    "NVIDIA H200 NVL",
    "Tesla V100S-PCIE-32GB",
    "AMD Instinct MI250X/MI250",  # what ROCm reports for both chips: either one would be a guess
    "AMD Instinct MI210",
    "",
])
def test_unknown_devices_get_no_peak_rather_than_a_guess(torch_name):
    assert detect_peak(torch_name) is None


def test_live_device_peak_is_none_on_cpu_and_meta():
    # the CPU's peak is measured only when asked; meta runs nothing
    assert device_peak("cpu") is None and device_peak("meta") is None
    if not torch.cuda.is_available():
        assert device_peak() is None


def test_user_given_peaks():
    given = resolve_peak(312e12)
    assert given.name == "given" and given.source == "given by the user"
    assert all(given.flops_for(d) == 312e12 for d in DTYPES) and given.memory_bandwidth is None
    assert resolve_peak("NVIDIA A100-SXM4-80GB") is PEAKS["NVIDIA A100 80GB SXM"]
    mine = Peak("my chip", {"bf16": 1e15}, memory_bandwidth=2e12, source="lab measurement")
    assert resolve_peak(mine) is mine and resolve_peak(None) is None
    assert mine.ridge("bfloat16") == 500.0 and mine.ridge("fp32") is None


def test_a_given_name_not_in_the_table_raises_with_close_names():
    with pytest.raises(ValueError, match="peak: no device named 'NVIDIA H100 SMX'.*did you mean 'NVIDIA H100 SXM'"):
        lookup_peak("NVIDIA H100 SMX")
    with pytest.raises(TypeError, match="peak: expected None, a number"):
        resolve_peak(True)
    with pytest.raises(ValueError, match="peak: expected a positive number"):
        resolve_peak(-1.0)


def test_peak_validates_its_fields():
    with pytest.raises(ValueError, match="flops: unknown dtype"):
        Peak("x", {"float99": 1.0})
    with pytest.raises(ValueError, match="memory_bandwidth"):
        Peak("x", {"fp32": 1.0}, memory_bandwidth=0)


def test_dtype_names():
    assert ([canonical_dtype(d) for d in (torch.float64, torch.float32, torch.bfloat16, torch.float16,
                                          torch.float8_e5m2, torch.int8)]
            == ["fp64", "fp32", "bf16", "fp16", "fp8", "int8"])
    assert canonical_dtype("tf32") == "tf32"
    with pytest.raises(ValueError, match="dtype: expected one of"):
        canonical_dtype("complex64")


# -- the CPU calibration ----------------------------------------------------------------------
def test_calibration_is_cached_and_a_second_call_reads_the_cache(tmp_path):
    first = calibrate_cpu(["fp32"], seconds=0.05, cache_dir=tmp_path)
    assert first.flops_for("fp32") > 0 and first.memory_bandwidth > 0 and first.flops_for("bf16") is None
    path = cpu_cache_path(tmp_path)
    data = json.loads(path.read_text())
    entry = data["entries"][cpu_cache_key()]
    assert entry["flops"] == {"fp32": first.flops_for("fp32")}
    # a value no measurement gives: the second call can only have read it from the file
    entry["flops"]["fp32"], entry["memory_bandwidth"] = 123.0, 456.0
    path.write_text(json.dumps(data))
    second = calibrate_cpu(["fp32"], seconds=0.05, cache_dir=tmp_path)
    assert (second.flops_for("fp32"), second.memory_bandwidth) == (123.0, 456.0)
    assert "cached in" in second.source and cpu_cache_key() in second.source
    # a dtype not measured yet is measured and added; what was cached stays
    third = calibrate_cpu(["fp32", "bf16"], seconds=0.05, cache_dir=tmp_path)
    assert third.flops_for("fp32") == 123.0 and third.flops_for("bf16") > 0
    assert set(json.loads(path.read_text())["entries"][cpu_cache_key()]["flops"]) == {"fp32", "bf16"}
    # refresh measures again
    assert calibrate_cpu(["fp32"], seconds=0.05, cache_dir=tmp_path, refresh=True).flops_for("fp32") != 123.0


def test_cache_key_changes_with_the_torch_version(tmp_path):
    assert cpu_cache_key("2.0.0") != cpu_cache_key() and torch.__version__ in cpu_cache_key()
    # an entry measured under another torch is not used
    other = cpu_cache_key("1.0.0")
    path = cpu_cache_path(tmp_path)
    path.write_text(json.dumps({"version": 1,
                                "entries": {other: {"flops": {"fp32": 123.0}, "memory_bandwidth": 456.0}}}))
    peak = calibrate_cpu(["fp32"], seconds=0.05, cache_dir=tmp_path)
    assert peak.flops_for("fp32") != 123.0
    assert set(json.loads(path.read_text())["entries"]) == {other, cpu_cache_key()}


def test_cache_lives_under_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cpu_cache_path() == tmp_path / "flopsight" / "cpu_peaks.json"
    calibrate_cpu(["fp32"], seconds=0.05)
    assert (tmp_path / "flopsight" / "cpu_peaks.json").exists()
    assert resolve_peak("cpu").flops_for("fp32") > 0  # peak="cpu": the cached calibration


def test_calibration_arguments_are_validated(tmp_path):
    with pytest.raises(ValueError, match="dtypes: the CPU calibration measures"):
        calibrate_cpu(["fp8"], cache_dir=tmp_path)
    with pytest.raises(ValueError, match="seconds"):
        calibrate_cpu(["fp32"], seconds=0, cache_dir=tmp_path)


def test_calibration_leaves_the_global_rng_alone(tmp_path):
    state = torch.get_rng_state()
    calibrate_cpu(["fp32"], seconds=0.05, cache_dir=tmp_path)
    assert torch.equal(state, torch.get_rng_state())
