"""Each example runs with one command; here with small sizes."""

import runpy
from pathlib import Path

import pytest

pytest.importorskip("transformers")

EXAMPLES = Path(__file__).parent.parent / "examples"


def run_example(name, argv, capsys):
    main = runpy.run_path(str(EXAMPLES / name), run_name="example")["main"]
    result = main(argv)
    return result, capsys.readouterr().out


def test_bert(capsys):
    (flops, macs, params), out = run_example("bert.py", ["--batch-size", "1", "--seq-len", "16", "--layers", "1"],
                                             capsys)
    L, H, I = 16, 768, 3072
    # one layer (4LH^2 + 2L^2H + 2LHI) + pooler H^2 + classifier H*2 labels
    assert macs == "114.23 MMACs" and 4 * L * H * H + 2 * L * L * H + 2 * L * H * I + H * H + H * 2 == 114_230_784
    assert "Detailed Profile per GPU" in out and "BertForSequenceClassification(" in out


def test_gpt2(capsys):
    (flops, macs, params), out = run_example("gpt2.py", ["--seq-len", "16", "--layers", "1"], capsys)
    L, H, V = 16, 768, 50257
    assert 12 * L * H * H + 2 * L * L * H + L * H * V == 731_197_440
    assert macs == "731.2 MMACs"
    assert "GPT2LMHeadModel(" in out


def test_t5_generate(capsys):
    (flops, macs, params), out = run_example("t5.py", ["--prompt-len", "4", "--new-tokens", "2", "--layers", "1"],
                                             capsys)
    assert "T5ForConditionalGeneration(" in out and "ops not counted" not in out
    assert macs.endswith("MACs") and not macs.startswith("0 ")


@pytest.mark.parametrize("model, size", [("resnet50", "32"), ("vit", "224")])
def test_vision(model, size, capsys):
    (flops, macs, params), out = run_example("vision.py", ["--model", model, "--batch-size", "1", "--image-size", size],
                                             capsys)
    assert "Top 3 modules" in out and "ops not counted" not in out
    # resnet50: torchvision's 25,557,032 less its 1000-class head (2048*1000+1000), plus a
    # 2-label head (2048*2+2) = 23,512,130; vit-base/16: embeddings 742,656 + 12 layers of
    # 7,087,872 + final norm 1,536 + 2-label head 1,538 = 85,800,194
    assert params == {"resnet50": "23.51 M", "vit": "85.8 M"}[model]


def test_native_api(tmp_path, capsys):
    _, out = run_example("native_api.py", ["--out", str(tmp_path)], capsys)
    # Conv2d(3, 16, 3, padding=1) on 8 x 3 x 32 x 32: 8*16*32*32 outputs x 27 MACs = 3,538,944
    assert "forward MACs: 3.54 MMACs" in out
    import flopsight

    saved = flopsight.load(tmp_path / "profile.json")
    assert saved.total.forward.macs == 8 * 16 * 32 * 32 * 27 + 8 * 16 * 10
    assert {p.name for p in tmp_path.iterdir()} == {"profile.json", "profile.html", "profile.csv", "profile.md",
                                                   "profile.trace.json"}


def test_deepspeed_config(capsys):
    _, out = run_example("deepspeed_config.py", [], capsys)
    # Linear(32, 64) + Linear(64, 10) on 16 rows: 16*(32*64 + 64*10) = 43,008 MACs
    assert "Profile Summary at step 2:" in out and "fwd MACs per GPU:" in out and "43.01 KMACs" in out
