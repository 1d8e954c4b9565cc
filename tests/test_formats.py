"""One way in for every format: render(fmt), save(path) by extension, output_file by extension;
golden JSON, CSV and Markdown; JSON round trips byte for byte; user text escaped per format."""

from __future__ import annotations

import csv
import io
import json
import random

import pytest
import torch
from helpers import with_metadata
from models import LeNet, Stack, TiedLM
from torch import nn

import flopsight
from flopsight.renderers import FORMATS

VERSIONS = dict(flopsight_version="0.0", torch_version="0.0", python_version="0.0")


def training_step(memory=True):
    """An MLP's training step (SGD), with memory, on the fake clock: deterministic."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with flopsight.Profiler(model, optimizer=opt, memory=memory) as prof:
        model(torch.ones(3, 4)).sum().backward()
        opt.step()
    return with_metadata(prof.result, **VERSIONS)


@pytest.mark.parametrize("fmt,name", [("json", "training_step.json"), ("csv", "training_step.csv"),
                                      ("ops_csv", "training_step.ops.csv"), ("md", "training_step.md")])
def test_golden(fake_clock, golden, fmt, name):
    golden(name, training_step().render(fmt))


def _results():
    """Results of different kinds: forward only, shared weights, training with memory."""
    yield flopsight.profile(LeNet(), torch.ones(2, 3, 32, 32), warm_up=0)
    yield flopsight.profile(TiedLM(), torch.tensor([[1, 2, 3]]), warm_up=0)
    yield flopsight.profile(Stack(width=8, depth=3), torch.ones(2, 8), warm_up=0)
    yield training_step()


def test_save_load_save_is_byte_identical(tmp_path):
    for i, result in enumerate(_results()):
        first, second = tmp_path / f"{i}a.json", tmp_path / f"{i}b.json"
        result.save(first)
        loaded = flopsight.load(first)
        loaded.save(second)
        assert first.read_bytes() == second.read_bytes()
        assert loaded == result
        assert json.loads(first.read_text())["schema_version"] == flopsight.SCHEMA_VERSION


def test_json_holds_everything_the_result_does():
    data = json.loads(training_step().render("json"))
    assert set(data) >= {"schema_version", "metadata", "modules", "spans", "calls", "collectives", "ranks",
                         "memory", "coverage", "device_usage"}
    fc1 = next(m for m in data["modules"] if m["name"] == "0")
    # Linear(4, 8) on 3 rows: addmm, 3*4*8 = 96 MACs, 2*96 + 24 (bias) = 216 FLOPs, 304 bytes moved
    assert fc1["phases"]["forward"]["macs"] == 96 and fc1["ops"]["forward"]["aten.addmm"]["flops"] == 216
    assert fc1["bytes_moved"]["forward"]["aten.addmm"] == 304
    assert data["coverage"]["calls_without_formula"] == 0


def test_save_picks_the_format_from_the_extension(tmp_path):
    result = training_step()
    written = {}
    for name in ("r.json", "r.csv", "r.ops.csv", "r.md", "r.html", "r.txt", "r.log"):
        result.save(tmp_path / name)
        written[name] = (tmp_path / name).read_text()
    assert json.loads(written["r.json"])["schema_version"] == flopsight.SCHEMA_VERSION
    assert written["r.csv"].startswith("rank,module,type,depth,phase,")
    assert written["r.ops.csv"].startswith("rank,module,type,phase,op,")
    assert written["r.md"].startswith("### flopsight: Sequential")
    assert written["r.html"].lstrip().lower().startswith("<!doctype html>")
    assert "Profile Summary" in written["r.txt"] and written["r.log"] == written["r.txt"]
    with pytest.raises(ValueError, match="fmt: expected one of"):
        result.render("pdf")
    assert set(FORMATS) >= {"text", "json", "csv", "md", "html", "trace"}


def test_output_file_follows_the_same_rule(tmp_path):
    flopsight.get_model_profile(LeNet(), input_shape=(2, 3, 32, 32), output_file=str(tmp_path / "p.json"),
                                print_profile=True, warm_up=0)
    assert flopsight.load(tmp_path / "p.json").total.forward.macs > 0
    flopsight.get_model_profile(LeNet(), input_shape=(2, 3, 32, 32), output_file=str(tmp_path / "p.md"),
                                print_profile=True, warm_up=0)
    assert (tmp_path / "p.md").read_text().startswith("### flopsight: LeNet")
    flopsight.get_model_profile(LeNet(), input_shape=(2, 3, 32, 32), output_file=str(tmp_path / "p.txt"),
                                print_profile=True, warm_up=0)
    assert "Profile Summary" in (tmp_path / "p.txt").read_text()


class _Named(nn.Module):
    def __init__(self, name: str):
        super().__init__()
        self.add_module(name, nn.Linear(2, 2))

    def forward(self, x):
        return next(iter(self.children()))(x)


def test_csv_is_one_clean_table_and_never_a_formula():
    result = flopsight.profile(_Named("=HYPERLINK(1)"), torch.ones(1, 2), warm_up=0)
    for text in (result.render("csv"), result.render("ops_csv")):
        rows = list(csv.reader(io.StringIO(text)))
        assert len({len(r) for r in rows}) == 1  # one header, every row as wide
        assert not any(cell.startswith("=") for row in rows for cell in row)
        assert any(cell == "'=HYPERLINK(1)" for row in rows for cell in row)


def test_markdown_escapes_names():
    result = flopsight.profile(_Named("a|b<img src=x>"), torch.ones(1, 2), warm_up=0)
    text = result.render("md")
    assert "a\\|b&lt;img src=x&gt;" in text and "<img" not in text
    with pytest.raises(ValueError, match="top: expected an int >= 0"):
        result.render("md", top=-1)


def test_markdown_efficiency_names_the_peak():
    text = training_step().render("md", peak=1e12)
    assert "#### Efficiency" in text and "1 TFLOPS" in text
    assert "#### Efficiency" not in training_step().render("md")


def _random_model(rng: random.Random) -> tuple[nn.Module, torch.Tensor]:
    """A random stack of layers (seeded): linear, norm, activation, dropout, nested blocks."""
    width = rng.choice([4, 8, 16])
    layers: list[nn.Module] = []
    for _ in range(rng.randint(1, 5)):
        kind = rng.choice(["linear", "norm", "act", "block", "dropout"])
        if kind == "linear":
            layers.append(nn.Linear(width, width, bias=rng.random() < 0.5))
        elif kind == "norm":
            layers.append(nn.LayerNorm(width))
        elif kind == "act":
            layers.append(rng.choice([nn.ReLU(), nn.GELU(), nn.Tanh()]))
        elif kind == "dropout":
            layers.append(nn.Dropout(0.1))
        else:
            layers.append(nn.Sequential(nn.Linear(width, width), nn.SiLU()))
    return nn.Sequential(*layers), torch.randn(rng.randint(1, 4), width)


@pytest.mark.parametrize("seed", range(12))
def test_round_trip_property_on_random_models(seed, tmp_path):
    """For random models, training or not, with memory or not: save, load, save gives the same
    bytes, the loaded result equals the original, and every format renders from either."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    model, x = _random_model(rng)
    if rng.random() < 0.5:
        result = flopsight.profile(model, x, warm_up=rng.randint(0, 1))
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with flopsight.Profiler(model, optimizer=opt, memory=rng.random() < 0.5) as prof:
            model(x).sum().backward()
            opt.step()
        result = prof.result
    result.save(tmp_path / "a.json")
    loaded = flopsight.load(tmp_path / "a.json")
    loaded.save(tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert loaded == result
    for fmt in FORMATS:
        assert loaded.render(fmt) == result.render(fmt)
