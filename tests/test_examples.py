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
    (flops, macs, params), out = run_example("bert.py", ["--batch-size", "1", "--seq-len", "16", "--layers", "1"], capsys)
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
    (flops, macs, params), out = run_example("t5.py", ["--prompt-len", "4", "--new-tokens", "2", "--layers", "1"], capsys)
    assert "T5ForConditionalGeneration(" in out and "ops not counted" not in out
    assert macs.endswith("MACs") and not macs.startswith("0 ")


@pytest.mark.parametrize("model, size", [("resnet50", "32"), ("vit", "224")])
def test_vision(model, size, capsys):
    (flops, macs, params), out = run_example("vision.py", ["--model", model, "--batch-size", "1", "--image-size", size], capsys)
    assert "Top 3 modules" in out and "ops not counted" not in out
    # resnet50: torchvision's 25,557,032 less its 1000-class head (2048*1000+1000), plus a
    # 2-label head (2048*2+2) = 23,512,130; vit-base/16: embeddings 742,656 + 12 layers of
    # 7,087,872 + final norm 1,536 + 2-label head 1,538 = 85,800,194
    assert params == {"resnet50": "23.51 M", "vit": "85.8 M"}[model]
