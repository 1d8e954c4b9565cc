"""Issue 29, items 6 and 8: a result's short forms (a one-line ``repr``, ``summary()`` and the
notebook's HTML table) and the command line's default ``--repeat auto``."""

from __future__ import annotations

import json
import re

import pytest
import torch
from models import TiedLM
from torch import nn

import flopsight
from flopsight.cli import main
from flopsight.renderers.numbers import params_to_string
from flopsight.result.kernels import Kernel, KernelSummary

#: --repeat auto's bounds (flopsight.cli.repeat), as the issue asks: at least 3 timed calls, a bounded number more
MIN_REPEAT, MAX_REPEAT = 3, 30


def encoder(layers: int = 12) -> nn.Module:
    """BERT-base's shape of tree (12 layers, ~110 modules) at a size that profiles in a blink."""
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)


def profiled_encoder(**options) -> flopsight.ProfileResult:
    with torch.no_grad():
        return flopsight.profile(encoder().eval(), torch.ones(1, 4, 16), clock=flopsight.FakeClock(), **options)


# -- item 6: repr ------------------------------------------------------------------------------------------
def test_repr_is_one_short_line_with_model_params_macs_flops_latency_and_coverage():
    result = profiled_encoder()
    text = repr(result)
    assert "\n" not in text and len(text) < 200, text  # was ~90 KB for this model (~185 KB for BERT-base)
    total = result.total
    assert text.startswith("<ProfileResult TransformerEncoder: ")
    assert f"{params_to_string(total.params)} params" in text
    assert "MACs" in text and "FLOPs" in text and "coverage 100%" in text
    assert "ms" in text  # the forward's latency


def test_repr_of_a_tiny_model_has_its_hand_derived_figures():
    model = nn.Sequential(nn.Linear(16, 5), nn.ReLU())
    result = flopsight.profile(model, torch.ones(8, 16), clock=flopsight.FakeClock())
    # params 16*5 + 5 = 85; MACs 8*16*5 = 640; FLOPs 2*640 + 8*5 (bias) + 8*5 (ReLU) = 1360
    latency = flopsight.renderers.numbers.duration_to_string(result.total.forward.latency)
    assert repr(result) == f"<ProfileResult Sequential: 85 params | forward: 640 MACs, 1.36 KFLOPs, {latency} | " \
                           "coverage 100%>"


def test_repr_of_bert_base_on_meta_says_latency_is_na():
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        model = transformers.BertModel(transformers.BertConfig()).eval()
    with torch.no_grad():
        result = flopsight.profile(model, (torch.ones(1, 8, dtype=torch.long, device="meta"),), warm_up=0)
    text = repr(result)
    # embeddings 30522*768 + 512*768 + 2*768 + 2*768 = 23,837,184; 12 layers of 4*(768*768+768) + 2*1536
    # + 768*3072+3072 + 3072*768+768 = 7,087,872 each; pooler 768*768+768: 109,482,240 in all
    assert result.total.params == 109_482_240
    assert text.startswith("<ProfileResult BertModel: 109.48 M params | forward: ")
    assert "latency n/a (meta device)" in text and len(text) < 200
    summary = result.summary()
    assert len(summary.rows) <= 40 and all(row.latency is None for row in summary.rows)
    assert " n/a" in str(summary) and "meta device" in str(summary)


def test_nested_result_objects_stay_short():
    result = profiled_encoder(repeat=3)
    assert len(repr(result.timeline)) < 120 and repr(result.timeline).startswith("Timeline(")
    assert len(repr(result.samples)) < 200 and "count=3" in repr(result.samples)
    assert len(repr(result.total)) < 200 and len(repr(result.iteration)) < 1000
    many = KernelSummary("cpu", 1.0, {f"kernel_{i}": Kernel(1, 0.001) for i in range(500)})
    assert repr(many) == "KernelSummary(source='cpu', seconds=1.0, unassigned=500 kernels, busy=None)"
    assert len(repr([result, result])) < 400  # a list of results (ranks, steps) too


def test_repr_of_a_training_profile_shows_the_iteration():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with flopsight.Profiler(model, optimizer=optimizer, clock=flopsight.FakeClock()) as prof:
        model(torch.ones(3, 4)).sum().backward()
        optimizer.step()
    text = repr(prof.result)
    assert "| training iteration: " in text and "\n" not in text
    table = prof.result.summary()
    assert "bwd FLOPs" in str(table) and "bwd latency" in str(table)
    # forward 3*4*8 + 3*8*2 = 144 MACs; the backward's weight and input gradients are counted too
    assert table.rows[0].macs == 144 and table.rows[0].bwd_flops > 0


# -- item 6: summary() ---------------------------------------------------------------------------------------
def test_summary_is_returned_not_printed_and_sorts(capsys):
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    result = flopsight.profile(model, torch.ones(3, 4), clock=flopsight.FakeClock())
    table = result.summary(sort="macs")
    assert capsys.readouterr().out == ""  # a console or notebook shows it; print() in a script
    # MACs: Linear(4, 8) on 3 rows 3*4*8 = 96, Linear(8, 2) 3*8*2 = 48, ReLU 0; the model first
    assert [(r.path, r.macs) for r in table.rows] == [("", 144), ("0", 96), ("2", 48), ("1", 0)]
    assert str(table) == repr(table)
    lines = str(table).splitlines()
    assert lines[0] == repr(result)[len("<ProfileResult "):-1]  # the headline, then the table
    # params 4*8+8 + 8*2+2 = 58; FLOPs 2*144 + 3*8 and 3*2 bias adds + 3*8 ReLUs = 342
    assert lines[4].split()[:4] == ["Sequential", "58", "144", "342"]
    assert lines[5].startswith("0: Linear")


def test_summary_depth_collapse_and_max_rows():
    model = nn.Sequential(nn.Sequential(*(nn.Linear(4, 4) for _ in range(3))), nn.Linear(4, 2))
    result = flopsight.profile(model, torch.ones(1, 4), clock=flopsight.FakeClock())
    table = result.summary()  # identical layers as one row: 3 x 16 MACs
    assert [(r.path, r.count, r.macs) for r in table.rows] == [("", 1, 56), ("0", 1, 48), ("0.(0-2)", 3, 48),
                                                               ("1", 1, 8)]
    assert "(0-2): 3 x Linear" in str(table)
    assert len(result.summary(collapse=False).rows) == 6
    shallow = result.summary(depth=1)
    assert [r.path for r in shallow.rows] == ["", "0", "1"]
    assert "Modules deeper than depth 1 are in their parents' figures" in str(shallow)
    cut = result.summary(depth=2, max_rows=2, collapse=False)
    assert len(cut.rows) == 2 and "... 4 more rows (max_rows=2" in str(cut)


def test_summary_fits_one_screen_by_default():
    table = profiled_encoder().summary()
    lines = str(table).splitlines()
    assert len(table.rows) <= 40 and len(lines) <= 50
    assert max(map(len, lines)) <= 120
    assert any("12 x TransformerEncoderLayer" in line for line in lines)


@pytest.mark.parametrize("options, message", [
    ({"depth": -1}, "depth: expected an int >= 0 or None"),
    ({"max_rows": 0}, "max_rows: expected a positive int"),
    ({"sort": "time"}, "sort: expected one of None, 'flops', 'macs', 'params', 'latency', got 'time'"),
    ({"collapse": 1}, "collapse: expected a bool, got int"),
])
def test_summary_rejects_bad_arguments_naming_them(options, message):
    result = flopsight.profile(nn.Linear(2, 2), torch.ones(1, 2), clock=flopsight.FakeClock())
    with pytest.raises((ValueError, TypeError)) as e:
        result.summary(**options)
    assert message in str(e.value)


def test_notebook_html_is_the_table_with_every_name_escaped():
    model = nn.Sequential()
    model.add_module("<img src=x onerror=alert(1)>", nn.Linear(2, 2))
    result = flopsight.profile(model, torch.ones(1, 2), clock=flopsight.FakeClock())
    page = result._repr_html_()
    assert page.startswith('<div class="flopsight-summary"><table>') and "<td" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "<img" not in page
    assert result.summary()._repr_html_() == page
    assert "(<img src=x onerror=alert(1)>): Linear" in str(result.summary())  # text shows it as it is


def test_generate_profile_headline():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32, n_positions=16)
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        result = flopsight.profile(model, (torch.ones(1, 4, dtype=torch.long),),
                                   dict(max_new_tokens=2, min_new_tokens=2, do_sample=False, pad_token_id=0),
                                   mode="generate", warm_up=0)
    assert "| generate(): " in repr(result) and "\n" not in repr(result)


# -- item 8: --repeat auto ------------------------------------------------------------------------------------
def test_planned_repeat_from_given_call_times():
    from flopsight.cli.repeat import planned_repeat

    assert planned_repeat(0.5) == 4  # 2 s / 0.5 s
    assert planned_repeat(0.1) == 20  # 2 s / 0.1 s
    assert planned_repeat(0.7) == MIN_REPEAT  # 2 s / 0.7 s = 2.86: the minimum, 3
    assert planned_repeat(10.0) == MIN_REPEAT  # a slow model still gets a spread
    assert planned_repeat(1e-5) == MAX_REPEAT  # a tiny one does not run 200,000 times
    assert planned_repeat(None) == MIN_REPEAT  # not timed (--warm-up 0)
    assert planned_repeat(0.25, budget=1.0, minimum=2, maximum=10) == 4


@pytest.fixture
def factory(tmp_path):
    path = tmp_path / "tiny_models.py"
    path.write_text("import torch\n\ndef pair(batch_size=2):\n"
                    "    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))\n"
                    "    return model, torch.ones(batch_size, 8)\n")
    return f"{path}:pair"


def cli_result(capsys, tmp_path, *argv: str) -> flopsight.ProfileResult:
    out = tmp_path / "r.json"
    code = main(["profile", *argv, "--no-detailed", "-o", str(out)])
    assert code == 0, capsys.readouterr().err
    return flopsight.load(out)


def test_a_cli_run_reports_a_latency_with_its_spread(capsys, tmp_path, factory):
    result = cli_result(capsys, tmp_path, factory)
    assert result.samples.unit == "pass" and MIN_REPEAT <= result.samples.count <= MAX_REPEAT
    assert main(["profile", factory, "--no-detailed"]) == 0
    shown = re.search(r"fwd latency over (\d+) passes \(median, (IQR|min-max)\)", capsys.readouterr().out)
    assert shown is not None and int(shown.group(1)) >= MIN_REPEAT  # the report says so, with the spread


def test_a_cli_training_run_profiles_several_steps(capsys, tmp_path, factory):
    result = cli_result(capsys, tmp_path, factory, "--mode", "train")
    assert result.samples.unit == "step" and MIN_REPEAT <= result.samples.count <= MAX_REPEAT


def test_cli_without_warm_up_times_the_minimum_and_explicit_repeat_wins(capsys, tmp_path, factory):
    assert cli_result(capsys, tmp_path, factory, "--warm-up", "0").samples.count == MIN_REPEAT  # nothing timed first
    assert cli_result(capsys, tmp_path, factory, "--repeat", "2").samples.count == 2
    assert cli_result(capsys, tmp_path, factory, "--repeat", "auto").samples.count >= MIN_REPEAT


def test_a_cli_meta_run_does_one_pass(capsys, tmp_path, factory):
    result = cli_result(capsys, tmp_path, factory, "--device", "meta")
    assert result.samples is None or result.samples.count == 1
    assert json.loads((tmp_path / "r.json").read_text())["metadata"]["device_type"] == "meta"


def test_repeat_help_and_errors(capsys, factory):
    assert main(["profile", "--help"]) == 0
    flat = " ".join(capsys.readouterr().out.split())
    assert f"(default: auto: at least {MIN_REPEAT}, more while they fit in about 2 s (at most {MAX_REPEAT})" in flat
    assert main(["profile", factory, "--repeat", "0"]) == 2
    assert "argument --repeat: expected an integer >= 1 or auto, got '0'" in capsys.readouterr().err


def test_the_progress_bar_learns_the_planned_calls():
    import io

    from flopsight.cli.progress import Progress
    from flopsight.cli.run import run_forward
    from flopsight.options import ProfileOptions

    model = nn.Sequential(nn.Linear(4, 2))
    stream = io.StringIO()
    with Progress(["profile"], stream=stream, enabled=True, interval=0.0) as bar:
        with bar.stage("profile", total=4):
            result = run_forward(model, (torch.ones(1, 4),), {}, ProfileOptions(warm_up=1), progress=bar, auto=True)
            line = bar.line()
    n = result.samples.count
    # two untimed calls time the model, then the counting pass (the warm-up) and n timed ones: all counted
    assert MIN_REPEAT <= n <= MAX_REPEAT and f"profile {n + 3}/{n + 3}" in line


def test_tied_weights_are_marked_as_the_text_report_marks_them():
    # TiedLM(vocab=10, dim=4): one 10x4 = 40-element tensor, held by both embed and head
    result = flopsight.profile(TiedLM(vocab=10, dim=4), torch.zeros(1, 3, dtype=torch.long),
                               clock=flopsight.FakeClock())
    table = result.summary()
    rows = {r.path: r for r in table.rows}
    assert (rows[""].params, rows["embed"].params, rows["head"].params) == (40, 40, 40)  # the total counts it once
    assert rows["embed"].params_shared == rows["head"].params_shared == 40 and rows[""].params_shared == 0
    text = str(table)
    assert "(embed): Embedding" in text and "40 (40 shared)" in text and '"(N shared)"' in text
