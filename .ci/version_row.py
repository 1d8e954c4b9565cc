"""One row of the torch-versions table (README, "Supported torch"): what this torch gives for
the demo, BERT-base (2 layers) on both backends, the suite's GQA Llama, two overlapping
profilers and a compiled model profiled. `.ci/matrix` prints it after each release's suite;
the suite itself checks each of these (this only reports them side by side).

    .venv/bin/python .ci/version_row.py
"""

import contextlib
import io
import platform
import sys
import tempfile
from pathlib import Path

import torch
import transformers

import flopsight
from flopsight.cli.main import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from models import gqa_llama_config  # noqa: E402  (the suite's own model: tests/models.py)


def demo_macs() -> int:
    """The demo's model (``python -m flopsight``: ResNet-18, batch 1) profiled by the CLI: its forward MACs."""
    with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        main(["profile", "resnet-18", "-o", f"{folder}/demo.json"])
        return flopsight.load(f"{folder}/demo.json").total.forward.macs


def bert_macs(backend: str) -> int:
    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig(num_hidden_layers=2)).eval()
    with torch.no_grad():
        return flopsight.profile(model, torch.ones(1, 32, dtype=torch.long), backend=backend).total.forward.macs


def llama_macs() -> int:
    model = transformers.LlamaForCausalLM(gqa_llama_config()).eval()
    with torch.no_grad():
        return flopsight.profile(model, torch.ones(1, 32, dtype=torch.long),
                                 kwargs={"use_cache": False}).total.forward.macs


def overlapping() -> str:
    """A starts, B starts, A stops, B stops (then the other order): each one's forward MACs."""
    seen = []
    for first_to_stop in (0, 1):
        model, x = torch.nn.Linear(4, 3), torch.ones(2, 4)
        a, b = flopsight.Profiler(model), flopsight.Profiler(model)
        a.start(), model(x), b.start(), model(x)
        (a, b)[first_to_stop].stop()
        model(x)
        (b, a)[first_to_stop].stop()
        seen.append(f"{a.result.total.forward.macs}/{b.result.total.forward.macs}")
    return " ".join(seen)


def compiled_after_profiling() -> str:
    compiles, runs = [], []

    def backend(gm, example_inputs):
        compiles.append(gm)
        return lambda *args: runs.append(1) or gm.forward(*args)

    model = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()), backend=backend)
    x = torch.ones(4, 8)
    model(x)
    flopsight.profile(model, x, warm_up=1)
    before = len(runs)
    model(x)
    return "stays compiled" if len(runs) == before + 1 and len(compiles) == 1 else \
        f"recompiled or eager ({len(compiles)} compiles, {len(runs) - before} graph runs)"


if __name__ == "__main__":
    print(f"torch {torch.__version__} on Python {platform.python_version()} (transformers {transformers.__version__}): "
          f"demo {demo_macs():,} MACs; BERT-base 2 layers 1x32 MACs python {bert_macs('python'):,} native "
          f"{bert_macs('native'):,}; GQA Llama {llama_macs():,} MACs; overlapping profilers (A/B MACs) "
          f"{overlapping()}; a compiled model after profiling: {compiled_after_profiling()}")
