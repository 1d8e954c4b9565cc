"""Issue 29, item 11's small points: the HTML page's mode for a training step, an
``--input-shape`` given with the batch, a dict passed as ``args``, and a model nested 1,000
modules deep."""

from __future__ import annotations

import sys
import textwrap

import pytest
import torch
from headless_chromium import Chromium, find_chromium
from torch import nn

import flopsight
from flopsight.cli.main import main

CHROMIUM = find_chromium()


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def factories(tmp_path):
    """A factory file: a small convnet and an MLP that come without inputs."""
    path = tmp_path / "factories.py"
    path.write_text(textwrap.dedent("""
        from torch import nn

        def conv():
            return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))

        def mlp():
            return nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 2))
    """))
    return path


# -- the HTML page names a training step's mode ----------------------------------------------
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH (apt-get install chromium; .ci/run does)")
def test_the_html_header_names_the_mode_a_step_ran(capsys, tmp_path, factories):
    train, forward, span = tmp_path / "train.html", tmp_path / "forward.html", tmp_path / "span.html"
    assert run(capsys, "profile", f"{factories}:mlp", "--input-shape", "16", "--mode", "train", "--warm-up", "0",
               "-o", str(train))[0] == 0
    assert run(capsys, "profile", f"{factories}:mlp", "--input-shape", "16", "--warm-up", "0",
               "-o", str(forward))[0] == 0
    model = nn.Linear(4, 2)
    with flopsight.Profiler(model) as prof:  # a span of the user's code with no backward: not a training step
        model(torch.ones(1, 4))
    prof.result.save(span)
    headers = {}
    with Chromium(CHROMIUM) as browser:
        for path in (train, forward, span):
            page = browser.new_page(1200, 800)
            page.navigate(path.as_uri())
            page.wait_until("document.documentElement.dataset.state === 'drawn'", timeout=60)
            headers[path.stem] = page.evaluate("document.getElementById('meta').textContent")
    assert "mode train" in headers["train"]  # was "mode custom"
    assert "mode forward" in headers["forward"]
    assert "mode span" in headers["span"]
    assert not any("custom" in text for text in headers.values())


# -- --input-shape with the batch in it ------------------------------------------------------
def test_an_input_shape_with_the_batch_is_refused_before_a_zoo_model_runs(capsys):
    code, out, err = run(capsys, "profile", "resnet-18", "--input-shape", "(1,3,112,112)")
    assert code == 2 and not out
    assert err.splitlines()[-1] == ("flopsight profile: error: argument --input-shape: one sample's shape, without "
                                    "the batch dimension: got 1,3,112,112, which begins with a batch of 1; use "
                                    "--input-shape 3,112,112")
    # a batch other than the default: the line says how to ask for it
    assert "use --input-shape 3,64,64 --batch-size 4" in run(capsys, "profile", "resnet-18", "--input-shape",
                                                              "4,3,64,64")[2]
    # too few sizes: what an image's are
    assert ("resnet-18 takes one image's 3 sizes, (channels, height, width) such as 3,224,224, got 3,112"
            in run(capsys, "profile", "resnet-18", "--input-shape", "3,112")[2])


def test_a_factory_model_that_fails_on_the_batch_in_its_input_shape_says_so(capsys, factories):
    # the model is unknown until built: it runs, fails in conv, and runs on the shape without the batch
    code, _, err = run(capsys, "profile", f"{factories}:conv", "--input-shape", "2,3,16,16", "--batch-size", "2")
    assert code == 2
    assert err.splitlines()[-1].endswith("argument --input-shape: one sample's shape, without the batch dimension: "
                                         "got 2,3,16,16, which begins with a batch of 2; use --input-shape 3,16,16")
    assert "conv" not in err.splitlines()[-1]
    # a model that takes the shape as given (a Linear reads the last size) runs as before
    code, out, _ = run(capsys, "profile", f"{factories}:mlp", "--input-shape", "1,16", "--no-detailed")
    assert code == 0 and "DeepSpeed Flops Profiler" in out
    # a shape whose first size is not the batch: the model's own error, where it was raised
    code, _, err = run(capsys, "profile", f"{factories}:conv", "--input-shape", "5,3,16,16")
    assert code == 1 and "raised in module '0' (Conv2d)" in err


# -- a dict where positional arguments go ----------------------------------------------------
class Named(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 2)

    def forward(self, input_ids, mask=None):
        return self.proj(input_ids)


def test_a_dict_given_as_args_says_to_pass_kwargs():
    batch = {"input_ids": torch.ones(3, 4)}
    with pytest.raises(TypeError, match=r"^args: expected a tensor, a tuple or a list of positional arguments, got "
                                        r"a dict; pass named inputs as kwargs=batch .*model\(\*\*batch\)"
                                        r".*args=\(batch,\)"):
        flopsight.profile(Named(), batch)
    with pytest.raises(TypeError, match="kwargs=batch"):
        flopsight.get_model_profile(Named(), args=batch, print_profile=False)
    # as it says: 3 x 4 x 2 = 24 MACs
    assert flopsight.profile(Named(), kwargs=batch).total.forward.macs == 24


# -- a model nested 1,000 modules deep -------------------------------------------------------
def nested(depth: int) -> nn.Module:
    """A Linear(2, 2) inside ``depth`` levels of Sequential, each with a ReLU beside it."""
    model = nn.Linear(2, 2)
    for _ in range(depth):
        model = nn.Sequential(model, nn.ReLU())
    return model


def _plain_call_fits(model: nn.Module) -> bool:
    """Whether this Python can call the model at all, the recursion limit raised (Python 3.12
    bounds the C stack, which each module call uses, whatever the limit)."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)
    try:
        model(torch.ones(1, 2))
        return True
    except RecursionError:
        return False
    finally:
        sys.setrecursionlimit(before)


def test_a_model_1000_modules_deep_is_profiled_at_the_default_recursion_limit(tmp_path):
    model, x = nested(1000), torch.ones(1, 2)
    limit = sys.getrecursionlimit()
    if not _plain_call_fits(model):  # Python 3.12: the error says how deep the model is
        with pytest.raises(RecursionError) as raised:
            flopsight.profile(model, x)
        assert any("the model nests modules 1000 levels deep" in n for n in raised.value.__notes__)
        assert sys.getrecursionlimit() == limit
        return
    result = flopsight.profile(model, x)
    innermost = "0" + ".0" * 999
    # the Linear: 1 x 2 x 2 = 4 MACs; 1000 Sequentials, 1000 ReLUs and the Linear
    assert result.total.forward.macs == result.module(innermost).forward.macs == 4
    assert len(result.modules) == 2001 and result.module(innermost).depth == 1000
    with flopsight.Profiler(model) as prof:
        model(x.requires_grad_()).sum().backward()
    assert prof.result.total.backward.macs == 8  # the input's gradient and the weight's: 4 + 4
    assert flopsight.get_model_profile(model, input_shape=(1, 2), print_profile=False, as_string=False)[1] == 4
    assert sys.getrecursionlimit() == limit
    # the result's walks need no room: rendered, saved and read back at the default limit
    result.save(tmp_path / "deep.json")
    assert flopsight.load(tmp_path / "deep.json").module(innermost).forward.macs == 4
    assert "4 MACs" in result.render("text") and result.render("html").startswith("<!DOCTYPE html>")


def test_the_cli_profiles_a_deep_factory_model(tmp_path, capsys):
    # the CLI calls model.eval() (torch recurses there) before profile() makes room: it must too
    if not _plain_call_fits(nested(1000)):
        pytest.skip("this Python's C stack does not fit a 1000-deep call (3.12)")
    path = tmp_path / "deep.py"
    path.write_text(textwrap.dedent("""
        from torch import nn

        def deep():
            model = nn.Linear(2, 2)
            for _ in range(1000):
                model = nn.Sequential(model, nn.ReLU())
            return model
    """))
    limit = sys.getrecursionlimit()
    code, out, err = run(capsys, "profile", f"{path}:deep", "--input-shape", "2", "--repeat", "1", "--no-detailed")
    # the Linear on one sample of 2: 1 x 2 x 2 = 4 MACs
    assert code == 0, err
    assert "fwd MACs per GPU:" in out and "4 MACs" in out
    assert sys.getrecursionlimit() == limit


def test_the_walks_without_recursion_match_torchs():
    from flopsight.capture.model.modules import describe, walk, walk_named
    from flopsight.capture.model.recursion import model_depth

    shared = nn.Linear(2, 2)
    model = nn.Sequential(nn.Sequential(shared, nn.ReLU()), shared, nn.ModuleDict({"a": nn.Tanh(), "b": None}))
    model.alias = model[0]  # one object under two names of one parent
    assert walk_named(model) == list(model.named_modules())
    assert walk(model) == list(model.modules())
    assert model_depth(model) == 2 and model_depth(shared) == 0
    infos = describe(model)
    # every path (the shared Linear at both), pre-order; the second name of model[0] is an alias
    assert list(infos) == ["", "0", "0.0", "0.1", "1", "2", "2.a"]
    assert infos["0"].aliases == ["alias"] and infos["0.0"].shared_with == ["1"]
    assert infos[""].params == 6 and infos["0"].params == 6  # the Linear's 4 + 2, once
