"""Every Python block and shell command in README.md and docs/**/*.md runs as written, or says
why not in the comment just before it: ``<!-- not run: reason -->``.

A page's Python blocks run in order in one namespace, as a reader pasting them into one session
would, in a folder of its own. What a page leaves to the reader (``model``, ``x``, ``opt``,
...) comes from ``<!-- setup: name -->`` just before a block: the objects ``SETUPS[name]``
builds join the namespace first. A statement whose line ends in ``# NUMBER`` is checked: it
must equal that number, and ``<!-- prints: TEXT; TEXT -->`` before a block checks that what
the block prints holds each TEXT (the figures the page quotes).

Shell blocks run command by command in the page's folder: flopsight's command line
(``flopsight``, ``.venv/bin/flopsight``, ``python -m flopsight``) and the examples
(``python examples/NAME.py``, its ``main(argv)``) in this process; ``cat > FILE <<'EOF'`` writes
the file. A command must end with status 0, unless the page shows its status
(``; echo "exit status $?"``). Any other command must be marked not run.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
import runpy
import shlex
from pathlib import Path

import pytest
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
MARK = re.compile(r"<!--\s*(not run|setup|prints):\s*((?:(?!-->).)*?)\s*-->\s*\Z", re.S)  # right before a block
CHECKED = re.compile(r"#\s*(-?\d[\d_]*(?:\.\d+)?)\s*$")  # a line's comment that is a number


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.ModuleList([nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(2)])

    def forward(self, h):
        for layer in self.layer:
            h = layer(h)
        return h


class Model(nn.Module):
    """What the pages call ``model``: images (N x 3 x 224 x 224) in, 4 scores out; its paths
    are the pages' (``features.0``, ``encoder.layer.0``)."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 4, stride=4), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.encoder = Encoder()
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.encoder(self.features(x)))


class MyModel(nn.Module):
    """guide.md's ``MyModel(config)``: token ids in, a score per token out."""

    def __init__(self, config):
        super().__init__()
        self.embed = nn.Embedding(config["vocab"], config["hidden"])
        self.out = nn.Linear(config["hidden"], 2)

    def forward(self, ids):
        return self.out(self.embed(ids))


def model_and_data() -> dict:
    torch.manual_seed(0)
    model = Model()
    x, y = torch.randn(8, 3, 224, 224), torch.randint(0, 4, (8,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return {"torch": torch, "model": model, "x": x, "y": y, "batch": x, "inputs": x, "loader": [(x, y)] * 10,
            "loss_fn": nn.CrossEntropyLoss(), "opt": opt, "optimizer": opt}


def profiled() -> dict:
    """model_and_data() and ``result``, a profile of the model, saved as ``profile.json``."""
    import flopsight

    names = model_and_data()
    names["result"] = flopsight.profile(names["model"], names["x"], warm_up=0)
    names["result"].save("profile.json")
    return names


def saved() -> dict:
    """``main.json`` and ``pr.json``: the model's profile before and after a change."""
    import flopsight

    names = model_and_data()
    flopsight.profile(names["model"], names["x"][:4], warm_up=0).save("main.json")
    flopsight.profile(names["model"], names["x"], warm_up=0).save("pr.json")
    return names


def extending() -> dict:
    """guide.md's own operators (``mylib::...``), module ``FusedMLP`` and autograd function
    ``MyKernel``; the test puts flopsight's registry back as it was after the page."""
    import flopsight

    if not hasattr(torch.ops.mylib, "pack"):
        lib = torch.library.Library("mylib", "DEF")  # kept alive by torch's registry of libraries
        lib.define("fused_gelu_linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor")
        lib.define("pack(Tensor x) -> Tensor")
        lib.define("unpack(Tensor x) -> Tensor")
        _LIBRARIES.append(lib)

    class FusedMLP(nn.Module):
        hidden = 16

    class MyKernel(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight):
            return x @ weight

    def my_kernel_backward(out, x, weight):
        return flopsight.Cost.of_product(2 * x.shape[0] * weight.numel())

    return {"flopsight": flopsight, "FusedMLP": FusedMLP, "MyKernel": MyKernel,
            "my_kernel_backward": my_kernel_backward}


_LIBRARIES: list = []


def trainer() -> dict:
    """hf-trainer.md's ``Trainer``, ``model``, ``args`` and ``data``: a 2-layer GPT-2 for 3 steps."""
    transformers = pytest.importorskip("transformers")
    from helpers import Tokens, tiny_gpt2

    args = transformers.TrainingArguments(output_dir="trainer", use_cpu=True, report_to=[], save_strategy="no",
                                          per_device_train_batch_size=2, max_steps=3, disable_tqdm=True)
    return {"Trainer": transformers.Trainer, "model": tiny_gpt2(), "args": args, "data": Tokens()}


SETUPS = {
    "model": model_and_data,
    "result": profiled,
    "saved": saved,
    "meta": lambda: {"torch": torch, "MyModel": MyModel, "config": {"vocab": 1000, "hidden": 64}},
    "extending": extending,
    "trainer": trainer,
    "lightning": lambda: {
        "FlopsightCallback": pytest.importorskip("flopsight.integrations.lightning").FlopsightCallback},
}


def blocks(page: Path):
    """(line, language, code, mark, mark's text) of each Python or shell block of ``page``."""
    text = page.read_text()
    for m in FENCE.finditer(text):
        language, code = m.groups()
        if language not in ("python", "sh", "bash"):
            continue
        line = text.count("\n", 0, m.start()) + 2  # the block's first line
        yield line, language, code, *mark_before(text, m.start())


def mark_before(text: str, start: int) -> tuple:
    """(mark, its text) of the comment right before offset ``start``, or (None, None)."""
    found = MARK.search(text[:start])
    return found.groups() if found else (None, None)


def run_python(code: str, where: str, names: dict) -> None:
    """Run ``code`` statement by statement in ``names``; a statement whose line ends in
    ``# NUMBER`` must equal the number."""
    lines = code.splitlines()
    for statement in ast.parse(code, where).body:
        checked = CHECKED.search(lines[statement.end_lineno - 1])
        if checked and isinstance(statement, ast.Expr):
            got = eval(compile(ast.Expression(statement.value), where, "eval"), names)
            expected = float(checked.group(1).replace("_", ""))
            assert got == expected, f"{where}, line {statement.lineno}: {lines[statement.lineno - 1].strip()} is {got}"
        else:
            exec(compile(ast.Module([statement], []), where, "exec"), names)


def commands(code: str):
    """(argv, shows its status, here-document text) of each command of a shell block."""
    lines = iter(code.splitlines())
    for line in lines:
        heredoc = re.match(r"cat > (\S+) <<'(\w+)'$", line.strip())
        if heredoc:
            body = []
            for inner in lines:
                if inner == heredoc.group(2):
                    break
                body.append(inner)
            yield ["cat", ">", heredoc.group(1)], False, "\n".join(body) + "\n"
            continue
        command, _, shown = line.partition(";")
        argv = shlex.split(command, comments=True)
        if argv:
            yield argv, shlex.split(shown, comments=True) == ["echo", "exit status $?"], None


def run_command(argv: list[str], heredoc: str | None, where: str) -> int:
    """Run one command of a page in this process; its exit status."""
    if argv[:2] == ["cat", ">"]:
        Path(argv[2]).write_text(heredoc)
        return 0
    program = Path(argv[0]).name
    if program == "python" and argv[1:3] == ["-m", "flopsight"]:
        program, argv = "flopsight", argv[2:]
    if program == "flopsight":
        from flopsight.cli.main import main

        return main(argv[1:])
    if program == "python" and argv[1].startswith("examples/"):
        main = runpy.run_path(str(ROOT / argv[1]), run_name="example")["main"]
        main(argv[2:])
        return 0
    raise AssertionError(f"{where}: `{shlex.join(argv)}` is not a command this test runs: mark the block "
                         f"<!-- not run: reason --> and say why")


@pytest.fixture
def registry_kept():
    """flopsight's global registry put back as it was after the test (guide.md registers formulas)."""
    from flopsight.formulas import REGISTRY

    entries = {name: value for name, value in vars(REGISTRY.copy()).items() if name != "version"}
    yield
    vars(REGISTRY).update(entries)
    REGISTRY.version += 1  # what was cached under the page's formulas is stale


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_block_runs_as_written_or_says_why_not(page, tmp_path, monkeypatch, registry_kept):
    monkeypatch.chdir(tmp_path)
    names: dict = {"__name__": "__doc__"}
    for line, language, code, mark, said in blocks(page):
        where = f"{page.relative_to(ROOT)}:{line}"
        if mark == "not run":
            assert said, f"{where}: say why the block is not run"
            continue
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            if mark == "setup":
                names.update(SETUPS[said]())
            if language == "python":
                run_python(code, where, names)
                continue
            for argv, shows_status, heredoc in commands(code):
                status = run_command(argv, heredoc, where)
                assert status in ((0, 1) if shows_status else (0,)), (
                    f"{where}: `{shlex.join(argv)}` ended with {status}")
        if mark == "prints":
            missing = [text for text in said.split("; ") if text not in printed.getvalue()]
            assert not missing, f"{where}: the block does not print {missing}"


def test_the_marks_are_read():
    # a mark reaches the block right after it, and only that block
    page = "<!-- not run: needs a GPU -->\n```python\na = 1\n```\n\n```sh\nflopsight list\n```\n<!-- setup: model -->\n"
    starts = [m.start() for m in FENCE.finditer(page)]
    assert [mark_before(page, s) for s in starts] == [("not run", "needs a GPU"), (None, None)]
    assert mark_before(page, len(page)) == ("setup", "model")
    assert list(commands("cat > a.py <<'EOF'\nx = 1\nEOF\nflopsight diff a b; echo \"exit status $?\"  # gate\n")) == [
        (["cat", ">", "a.py"], False, "x = 1\n"), (["flopsight", "diff", "a", "b"], True, None)]


def test_the_readme_opens_with_an_install_block_and_a_snippet_that_stands_alone(tmp_path, monkeypatch):
    # a reader's first screen: three commands from nothing to a report, then code that runs as pasted
    found = list(blocks(ROOT / "README.md"))
    install = next(b for b in found if b[1] in ("sh", "bash"))
    assert [line.split("#")[0].split() for line in install[2].strip().splitlines()] == [
        ["pip", "install", "torch"], ["pip", "install", "."], ["flopsight", "profile", "resnet-18"]]
    line, _, code, mark, _ = next(b for b in found if b[1] == "python")
    assert mark != "setup", f"README.md:{line}: the first snippet must define what it uses (no setup)"
    monkeypatch.chdir(tmp_path)
    names: dict = {"__name__": "__doc__"}
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        run_python(code, f"README.md:{line}", names)
    # the snippet's conv: 8 x 64 x 112 x 112 outputs x (3 x 7 x 7) = 944,111,616 MACs, its Linear 8 x 64 x 10 =
    # 5,120: 944,116,736 in all
    assert isinstance(names["model"], nn.Module) and names["macs"] == "944.12 MMACs"
    assert "944.12 MMACs = 100% MACs" in printed.getvalue()
