"""The HTML report: a self-contained page that embeds the JSON document, escapes user data,
and works in a real headless Chromium (Debian's package; ``.ci/run`` installs it).

The browser tests load real profiles of real models and drive the page through the DevTools
protocol (``headless_chromium.py``): no console error or exception, the chart draws, a click
shows the module's numbers, the escaping case opens no dialog, and a screenshot is kept
under the test's tmp dir and ``build/test-artifacts/``.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch
from headless_chromium import Chromium, colour_stats, decode_png, find_chromium
from torch import nn

import flopsight
from flopsight.analysis.derived import derived
from flopsight.cli.zoo.models import build
from flopsight.renderers.html_renderer import embed_json, render_html
from flopsight.renderers.numbers import duration_to_string, macs_to_string, params_to_string

ARTIFACTS = Path(__file__).resolve().parents[1] / "build" / "test-artifacts"
EVIL = "</script><script>alert(1)</script>"


# -- real profiles ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def resnet():
    """ResNet-18 (``python -m flopsight``'s model), one forward at batch 1."""
    model, inputs = build("resnet18", 1)
    with torch.no_grad():
        return flopsight.profile(model, inputs, warm_up=1)


class Evil(nn.Module):
    """A module whose type name and repr are markup too."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(2, 2)

    def forward(self, x):
        return self.proj(x)

    def extra_repr(self) -> str:
        return '<img src=x onerror="alert(2)"> & \u2028 line'


Evil.__name__ = Evil.__qualname__ = "Evil<svg onload=alert(3)>"


@pytest.fixture(scope="module")
def evil():
    model = nn.Sequential(nn.Linear(4, 2))
    model.add_module(EVIL, Evil())
    return flopsight.profile(model, torch.ones(3, 4))


@pytest.fixture(scope="module")
def training():
    """A training step: forward, backward and an optimizer step."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with flopsight.Profiler(model, optimizer=opt) as prof:
        model(torch.ones(8, 16)).sum().backward()
        opt.step()
    return prof.result


def _parts(page: str) -> dict:
    """Tags with their attributes, and the text of each <script> and <style> element."""
    class Parser(HTMLParser):
        def __init__(self):
            super().__init__()
            self.tags, self.scripts, self.styles, self._in = [], [], [], None

        def handle_starttag(self, tag, attrs):
            self.tags.append((tag, dict(attrs)))
            if tag in ("script", "style"):
                self._in = (tag, dict(attrs), [])

        def handle_data(self, data):
            if self._in:
                self._in[2].append(data)

        def handle_endtag(self, tag):
            if self._in and tag == self._in[0]:
                (self.scripts if tag == "script" else self.styles).append((self._in[1], "".join(self._in[2])))
                self._in = None

    parser = Parser()
    parser.feed(page)
    return {"tags": parser.tags, "scripts": parser.scripts, "styles": parser.styles}


def _json_block(page: str, ident: str):
    return json.loads(re.search(rf'<script type="application/json" id="{ident}">(.*?)</script>', page, re.S).group(1))


# -- the page as text -----------------------------------------------------------------------
def test_self_contained_no_network(resnet):
    page = render_html(resnet)
    parts = _parts(page)
    for tag, attrs in parts["tags"]:
        for name in ("src", "href", "action", "data", "poster"):
            assert not re.match(r"\s*(https?:)?//", attrs.get(name) or ""), (tag, attrs)
        assert not (tag == "link" and "stylesheet" in (attrs.get("rel") or "")), "stylesheets are inlined"
    assert [a for a, _ in parts["scripts"] if "src" in a] == [], "scripts are inlined"
    assert len(parts["styles"]) == 1 and "#icicle" in parts["styles"][0][1]
    code = [text for attrs, text in parts["scripts"] if "type" not in attrs]
    assert len(code) == 1 and "buildTree" in code[0]
    assert "@import" not in page and "url(http" not in page


def test_content_security_policy_allows_only_the_page(resnet):
    """No fetch of any kind, and only the inlined script and style (by their hashes) run."""
    page = render_html(resnet)
    parts = _parts(page)
    csp = next(a["content"] for t, a in parts["tags"] if a.get("http-equiv") == "Content-Security-Policy")
    assert "default-src 'none'" in csp
    [(_, code)] = [(a, t) for a, t in parts["scripts"] if "type" not in a]
    [(_, style)] = parts["styles"]
    for text, directive in ((code, "script-src"), (style, "style-src")):
        digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
        assert f"{directive} 'sha256-{digest}'" in csp


def test_embeds_the_json_renderers_document(resnet):
    page = render_html(resnet)
    assert _json_block(page, "flopsight-data") == json.loads(resnet.render("json"))
    d = _json_block(page, "flopsight-derived")
    assert d == json.loads(embed_json(derived(resnet)))
    assert d["ranks"] is None and d["coverage"]["fraction"] == 1.0
    assert d["iteration"]["forward"]["macs"] == resnet.total.forward.macs


def test_derived_block_of_a_training_step(training):
    d = derived(training)
    anatomy = training.iteration.anatomy
    assert d["anatomy"] == dataclasses.asdict(anatomy)
    assert d["phases"] == ["forward", "backward", "step"]
    assert d["iteration"]["backward"]["macs"] == training.total.backward.macs
    try:
        from flopsight.analysis.efficiency import efficiency_dict
    except ImportError:
        assert d["efficiency"] is None
    else:
        assert d["efficiency"] == efficiency_dict(training)


def test_derived_rank_figures(training):
    """A gathered result (two ranks' results on rank 0) carries each rank's figures."""
    gathered = dataclasses.replace(training, ranks=(training, None, training), rank_notes={2: "failed: E"})
    d = derived(gathered)["ranks"]
    assert d["world"] == 3 and d["missing"] == [1] and d["failed"] == {"2": "E"}
    assert d["per_rank"][0]["latency"] == training.iteration.latency and d["per_rank"][1] is None
    # one rank completed its profile: no spread over ranks to show
    assert d["iteration"] is None and d["modules"] == {}
    d = derived(dataclasses.replace(training, ranks=(training, training)))["ranks"]
    assert d["modules"]["0"]["forward"]["max"] == training.module("0").forward.latency


def test_every_metric_and_phase_is_offered(resnet):
    options: dict[str, list[str]] = {}
    current = None
    for tag, attrs in _parts(render_html(resnet))["tags"]:
        if tag == "select":
            current = options.setdefault(attrs["id"], [])
        elif tag == "option" and current is not None:
            current.append(attrs["value"])
    assert options["metric"] == ["macs", "flops", "latency", "params", "memory"]
    assert options["phase"] == ["forward", "backward", "total"]  # recompute and step join when measured
    assert "efficiency" in options["colour"]


def test_user_data_is_escaped(evil):
    page = render_html(evil, title=EVIL)
    assert page.count("<script") == 3 and page.count("</script>") == 3  # data, derived, code
    for markup in ("<img", "<svg", "alert(1)</", "\u2028"):
        assert markup not in page
    assert f"<title>{EVIL.replace('<', '&lt;').replace('>', '&gt;')}</title>" in page
    data = _json_block(page, "flopsight-data")  # and it reads back exactly
    names = [m["name"] for m in data["modules"]]
    assert EVIL in names and f"{EVIL}.proj" in names
    record = next(m for m in data["modules"] if m["name"] == EVIL)
    assert record["type_name"] == "Evil<svg onload=alert(3)>" and record["extra_repr"].startswith("<img src=x")


def test_embed_json_escapes_and_drops_non_finite():
    text = embed_json({"a": "<>&\u2028\u2029", "b": [float("inf"), 1.5]})
    assert text == '{"a":"\\u003c\\u003e\\u0026\\u2028\\u2029","b":[null,1.5]}'
    assert json.loads(text) == {"a": "<>&\u2028\u2029", "b": [None, 1.5]}


def test_arguments_are_checked(resnet):
    with pytest.raises(TypeError, match="title"):
        render_html(resnet, title=3)


def test_save_and_get_model_profile_write_html(tmp_path, resnet):
    resnet.save(tmp_path / "profile.html")
    assert (tmp_path / "profile.html").read_text(encoding="utf-8") == render_html(resnet)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    flopsight.get_model_profile(model, input_shape=(2, 4), print_profile=True, output_file=str(tmp_path / "ds.html"))
    page = (tmp_path / "ds.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and _json_block(page, "flopsight-data")["modules"][1]["name"] == "0"


# -- in a real browser ----------------------------------------------------------------------
CHROMIUM = find_chromium()
browser_test = pytest.mark.skipif(CHROMIUM is None,
                                  reason="no chromium binary on PATH (apt-get install chromium; .ci/run does)")


@pytest.fixture(scope="module")
def browser():
    with Chromium(CHROMIUM) as b:
        yield b


def _open(browser, tmp_path: Path, name: str, result, width: int = 1400, height: int = 1000, **options):
    path = tmp_path / f"{name}.html"
    result.save(path, **options)
    page = browser.new_page(width, height)
    page.navigate(path.as_uri())
    page.wait_until("document.documentElement.dataset.state === 'drawn'", timeout=60)
    return page


def _click_module(page, path: str) -> None:
    """A real mouse click at the middle of the module's rectangle in the chart."""
    page.evaluate("document.getElementById('icicle').scrollIntoView({block: 'center'})")
    rect = page.evaluate(f"flopsightReport.rectOf({json.dumps(path)})")
    assert rect is not None, f"{path!r} is not drawn"
    page.click(rect["x"] + rect["width"] / 2, rect["y"] + rect["height"] / 2)


def _text(page, element_id: str) -> str:
    return page.evaluate(f"document.getElementById({json.dumps(element_id)}).innerText")


def _keep_screenshot(page, tmp_path: Path, name: str) -> Path:
    """The whole page as PNG, under the test's tmp dir and build/test-artifacts/."""
    shot = tmp_path / f"{name}.png"
    shot.write_bytes(page.screenshot(full_page=True))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, ARTIFACTS / shot.name)
    return shot


def _chart_pixels(page) -> tuple[int, int]:
    """(pixels of the chart's canvas that are not its white background, all its pixels)."""
    return tuple(page.evaluate("""(() => {
        const c = document.getElementById('icicle');
        const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let drawn = 0;
        for (let i = 0; i < px.length; i += 4) if (px[i] < 250 || px[i + 1] < 250 || px[i + 2] < 250) drawn++;
        return [drawn, px.length / 4];
    })()"""))


@browser_test
def test_browser_loads_draws_and_shows_a_clicked_module(browser, tmp_path, resnet):
    page = _open(browser, tmp_path, "resnet18", resnet)
    assert page.problems() == []
    drawn, everything = _chart_pixels(page)
    assert everything > 0 and drawn > 0.5 * everything, "the icicle chart is not drawn"
    assert page.evaluate("flopsightReport.modules") == len(resnet.modules)
    assert macs_to_string(resnet.total.forward.macs) in _text(page, "cards")

    path = "layer1.0.conv1"
    _click_module(page, path)
    detail = _text(page, "detail")
    node = resnet.module(path)
    assert page.evaluate("document.getElementById('detail-name').textContent") == path
    assert macs_to_string(node.forward.macs) in detail  # "115.61 MMACs", as the text report writes it
    assert duration_to_string(node.forward.latency) in detail
    assert params_to_string(node.params) in detail
    assert "aten.convolution" in _text(page, "ops")
    assert page.problems() == []

    shot = _keep_screenshot(page, tmp_path, "html-report-resnet18")
    width, height, pixels = decode_png(shot.read_bytes())
    colours, not_background = colour_stats(pixels)
    assert width == 1400 and height > 1000
    assert colours > 200 and not_background > 0.2, (colours, not_background)


@browser_test
def test_browser_escaping_opens_no_dialog_and_shows_names_literally(browser, tmp_path, evil):
    page = _open(browser, tmp_path, "escaping", evil)
    assert page.events("Page.javascriptDialogOpening") == []
    assert page.problems() == []
    assert page.evaluate("document.querySelectorAll('script').length") == 3
    assert page.evaluate("document.querySelectorAll('img, svg').length") == 0
    assert EVIL in _text(page, "table")
    _click_module(page, EVIL)
    assert page.evaluate("document.getElementById('detail-name').textContent") == EVIL
    detail = _text(page, "detail")
    assert "Evil<svg onload=alert(3)>" in detail and '<img src=x onerror="alert(2)">' in detail
    assert page.events("Page.javascriptDialogOpening") == []
    _keep_screenshot(page, tmp_path, "html-report-escaping")


@browser_test
def test_browser_training_step_table_sort_and_search(browser, tmp_path, training):
    page = _open(browser, tmp_path, "training", training)
    assert page.problems() == []
    assert page.evaluate("!document.getElementById('anatomy-section').hidden")
    assert "backward" in _text(page, "anatomy")
    # the backward phase sizes the chart and fills the table
    page.evaluate("(() => { const s = document.getElementById('phase'); s.value = 'backward';"
                  " s.dispatchEvent(new Event('change')); })()")
    drawn, _ = _chart_pixels(page)
    assert drawn > 0
    # sort by MACs (descending): the root first, then the bigger Linear
    page.evaluate("[...document.querySelectorAll('#table-head span')]"
                  ".find(s => s.textContent.startsWith('MACs')).click()")
    order = page.evaluate("[...document.querySelectorAll('#table-body .vrow:not([hidden])')]"
                          ".sort((a, b) => a.getBoundingClientRect().top - b.getBoundingClientRect().top)"
                          ".map(r => r.children[0].textContent)")
    assert order[:2] == ["(root) Sequential", "0"]
    # search by name with the keyboard, Enter selects the first match
    page.evaluate("document.getElementById('search').focus()")
    page.send("Input.insertText", text="2")
    page.send("Input.dispatchKeyEvent", type="keyDown", key="Enter", code="Enter", windowsVirtualKeyCode=13)
    page.send("Input.dispatchKeyEvent", type="keyUp", key="Enter", code="Enter", windowsVirtualKeyCode=13)
    page.wait_until("document.getElementById('detail-name') && "
                    "document.getElementById('detail-name').textContent === '2'")
    detail = _text(page, "detail")
    assert macs_to_string(training.module("2").backward.macs) in detail
    assert "1 match" in _text(page, "search-count")
    assert page.problems() == []


@browser_test
def test_browser_per_rank_figures(browser, tmp_path, training):
    gathered = dataclasses.replace(training, ranks=(training, training))
    page = _open(browser, tmp_path, "ranks", gathered)
    assert page.problems() == []
    assert page.evaluate("document.querySelectorAll('#rank-bars .rankrow').length") == 2
    page.evaluate("flopsightReport.select('0')")
    detail = _text(page, "detail")
    assert "Per rank" in detail and "rank 1" in detail
    assert duration_to_string(training.module("0").forward.latency) in detail


@browser_test
def test_browser_names_failed_and_non_profiling_ranks(browser, tmp_path, training):
    gathered = dataclasses.replace(training, ranks=(training, None, None, training),
                                   rank_notes={1: "failed: RuntimeError raised in module '0' (Linear)",
                                               2: "not profiling"})
    page = _open(browser, tmp_path, "failed_ranks", gathered)
    assert page.problems() == []
    bars = _text(page, "rank-bars")
    assert "failed 1" in bars and "not profiling 2" in bars
    assert "failed: RuntimeError raised in module '0' (Linear)" in bars and "not profiling" in bars


@browser_test
def test_browser_table_is_virtualised(browser, tmp_path):
    """A few thousand modules: only the rows in view exist in the page."""
    model = nn.Sequential(*[nn.Sequential(*[nn.Linear(4, 4) for _ in range(20)]) for _ in range(100)])
    with torch.no_grad():
        result = flopsight.profile(model, torch.ones(1, 4), warm_up=0)
    page = _open(browser, tmp_path, "many", result)
    assert page.problems() == []
    assert page.evaluate("flopsightReport.modules") == 2101
    assert page.evaluate("document.querySelectorAll('#table-body .vrow').length") < 60
    page.evaluate("flopsightReport.select('99.19')")  # the last module: scrolled to, drawn on demand
    # in tree order the row shows the leaf, the whole path on hover
    assert page.evaluate("[...document.querySelectorAll('#table-body .vrow.selected')]"
                         ".map(r => [r.children[0].textContent, r.children[0].title])") == [["19", "99.19"]]
    assert page.problems() == []


@browser_test
def test_browser_numbers_are_formatted_as_flopsight_units(browser, tmp_path, evil):
    """The page's formatting is flopsight.renderers.numbers', exact ties (Python rounds half to even) and
    unit carries ("1 M", not "1000 K") included."""
    from flopsight.renderers.numbers import bytes_to_string, flops_to_string, number_to_string

    page = _open(browser, tmp_path, "numbers", evil)
    values = [0, 1, 5, 999, 1000, 1125, 1135, 2675, 999_499, 999_999, 1_234_567, 89_450_000_000, 12.5e12, 0.5,
              0.001125, 698.8e-6, 2.5e-6, 1e-7, 0.0225, 3 * 0.1, 115_605_504, 231_211_008, 2 ** 53 + 1]
    values += [k * 10 ** e + 5 * 10 ** (e - 3) for k in (1, 2, 3, 7) for e in range(3, 13)]  # ties at 2 decimals
    got = page.evaluate(f"(() => {{ const f = flopsightReport.format; return {json.dumps(values)}.map(v => "
                        "[f.number(v), f.macs(v), f.params(v), f.duration(v), f.bytes(v), f.rate(v)]); })()")
    want = [[number_to_string(v), macs_to_string(v), params_to_string(v), duration_to_string(v), bytes_to_string(v),
             # the page writes a rate FLOP/s, never FLOPS (which reads as a count of FLOPs)
             flops_to_string(round(v, 2)).removesuffix("FLOPS") + "FLOP/s"] for v in values]
    assert got == want


@browser_test
def test_browser_detail_panel_lists_a_modules_kernels(browser, tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    result = flopsight.profile(model, torch.ones(4, 16), kernels=True)
    page = _open(browser, tmp_path, "kernels", result)
    _click_module(page, "0")
    kernels = _text(page, "kernels")
    assert "CPU operators, self time" in kernels and "aten::addmm" in kernels
    assert "device time" in _text(page, "ops")  # the operator table's column
    assert page.problems() == []


@browser_test
def test_browser_operator_table_says_where_its_times_come_from(browser, tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    for name, options, label in [("timed", {}, "measured in the calls that timed the modules"),
                                 ("counting", {"backend": "python"}, "measured in the counting pass")]:
        result = flopsight.profile(model, torch.ones(4, 16), **options)
        page = _open(browser, tmp_path, name, result)
        _click_module(page, "0")
        ops = _text(page, "ops")
        assert label in ops and (("time (counting pass)" in ops) == (name == "counting")), name
        assert page.problems() == []


@browser_test
def test_browser_cards_give_the_gpus_busy_time_and_idle_share(browser, tmp_path):
    from flopsight.analysis.kernel_profile import device_busy
    from flopsight.capture.runtime.timing import FakeDeviceClock
    from flopsight.renderers.numbers import duration_to_string

    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    result = flopsight.profile(model, torch.ones(4, 16), warm_up=1, clock=FakeDeviceClock())
    page = _open(browser, tmp_path, "busy", result)
    cards = _text(page, "cards")
    busy = device_busy(result)
    assert "fwd GPU busy" in cards and "fwd GPU idle" in cards
    assert duration_to_string(busy.busy).replace(" ", "") in cards.replace(" ", "")
    assert page.problems() == []
    host = _open(browser, tmp_path, "host", flopsight.profile(model, torch.ones(4, 16), warm_up=1))
    assert "GPU idle" not in _text(host, "cards")  # a host clock's forward: no such card


@browser_test
def test_browser_says_what_it_shows_counts_rates_and_a_meta_device(browser, tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    with torch.device("meta"):
        on_meta = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU())
    cpu = flopsight.profile(model, torch.ones(4, 16))
    page = _open(browser, tmp_path, "cpu", cpu)
    cards = _text(page, "cards")
    # as written, not upper-cased: the count and the rate are different words
    assert "fwd FLOPs (count)" in cards and "fwd FLOP/s" in cards and "FWD FLOPS" not in cards
    assert page.evaluate("document.getElementById('meta-device')") is None
    meta = flopsight.profile(on_meta, torch.ones(4, 16, device="meta"))
    page = _open(browser, tmp_path, "meta", meta)
    assert "Profiled on the meta device" in _text(page, "meta-device")
    assert page.problems() == []


@browser_test
def test_browser_table_keeps_paths_that_differ_at_their_end_apart(browser, tmp_path):
    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.query, self.key, self.value = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x):
            return self.query(x) + self.key(x) + self.value(x)

    model = nn.Sequential()
    model.add_module("encoder", nn.Sequential())
    model.encoder.add_module("layer", nn.ModuleList([nn.Sequential()]))
    model.encoder.layer[0].add_module("attention", nn.Sequential())
    model.encoder.layer[0].attention.add_module("self", SelfAttention())
    model.forward = lambda x: model.encoder.layer[0].attention.self(x)
    result = flopsight.profile(model, torch.ones(2, 8))
    page = _open(browser, tmp_path, "paths", result, width=900)
    cells = page.evaluate("[...document.querySelectorAll('#table-body .vrow:not([hidden]) span:first-child')]"
                          ".map(c => [c.textContent, c.title])")
    shown = dict((title, text) for text, title in cells)
    # in tree order each row is its leaf, indented; the tooltip has the whole path
    assert ([shown[f"encoder.layer.0.attention.self.{n}"] for n in ("query", "key", "value")]
            == ["query", "key", "value"])
    page.evaluate("document.querySelectorAll('#table-head span')[3].click()")  # sort by a number column
    cells = page.evaluate("[...document.querySelectorAll('#table-body .vrow:not([hidden]) span:first-child')]"
                          ".map(c => [c.textContent, c.title])")
    ends = {title.rsplit('.', 1)[-1]: text
            for text, title in cells if title.startswith("encoder.layer.0.attention.self.")}
    # sorted: whole paths, elided in the middle when too long, each still ending in its own name
    assert all(ends[n].endswith(n) for n in ("query", "key", "value")), ends
    assert page.problems() == []


@browser_test
def test_browser_shows_a_generate_profiles_prefill_decode_and_encoder(browser, tmp_path):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=40, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_decoder_layers=1, num_heads=2,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)).eval()
    generate = {"max_new_tokens": 3, "min_new_tokens": 3, "do_sample": False}
    with torch.no_grad():
        result = flopsight.profile(model, torch.ones(1, 6, dtype=torch.long), generate, mode="generate", warm_up=0)
    g = derived(result)["generation"]
    assert g["new_tokens"] == 3 and g["decode"]["calls"] == 2 and len(g["decode_steps"]) == 2
    assert g["encoder"] is not None and g["encoder_paths"] == ["encoder"]
    page = _open(browser, tmp_path, "generate", result)
    text = _text(page, "generation")
    for word in ("prefill", "encoder", "decode", "per decode step", "per token", "between calls", "total",
                 "3 new tokens per sequence", "each decode step's latency"):
        assert word in text, word
    assert macs_to_string(result.generation.prefill.macs) in text
    assert page.problems() == []
    # a forward profile has no such section
    plain = _open(browser, tmp_path, "forward", flopsight.profile(nn.Linear(2, 2), torch.ones(1, 2)))
    assert plain.evaluate("document.getElementById('generation-section').hidden") is True


@browser_test
def test_browser_anatomy_shows_the_profilers_part_and_a_timed_steps_latencies(browser, tmp_path, training):
    # the counted step's spans, with the profiler's own time left in its backward, and the
    # latencies of a step timed at its phases' boundaries (the DeepSpeed engine's step before)
    spans = dict(training.spans)
    spans.update({"profiler.backward": [sum(spans["backward"]) / 2], "timed.iteration": [0.004],
                  "timed.forward": [0.001], "timed.backward": [0.002], "timed.step": [0.0005]})
    result = training.updated(spans=spans)
    assert result.iteration.anatomy.profiler > 0
    page = _open(browser, tmp_path, "profiler-part", result)
    assert page.problems() == []
    anatomy = _text(page, "anatomy")
    assert "profiler" in anatomy and page.evaluate("document.querySelectorAll('#anatomy .seg-profiler').length") == 2
    assert "Of the profiled step" in anatomy and "4 ms per iteration" in anatomy


@browser_test
def test_browser_anatomy_says_it_is_the_median_step_of_several(browser, tmp_path, training):
    # issue 37 item 3, one step, one time: several steps' anatomy is the median step's, whose
    # wall time the latencies give, and the page says so
    result = flopsight.combine_steps([training, training, training])
    assert derived(result)["iteration"]["median_of"] == 3
    assert result.iteration.anatomy.total == pytest.approx(result.iteration.latency)
    page = _open(browser, tmp_path, "median-step", result)
    assert page.problems() == []
    anatomy = _text(page, "anatomy")
    assert "Of the median of 3 profiled steps (" in anatomy and "step before" not in anatomy


@browser_test
def test_browser_parallel_job_panel(browser, tmp_path, training):
    def placed(rank: int):  # rank 0's and rank 1's results, on a mesh and in a pipeline
        meta = dataclasses.replace(training.metadata, rank=rank, coordinates={"dp": 0, "tp": rank},
                                   replicated_modules=(),  # split by tensor parallelism: the job's added work shown
                                   pipeline={"schedule": "Schedule1F1B", "micro_batches": 4, "stages": [rank],
                                             "num_stages": 2, "steps": 1})
        return dataclasses.replace(training, metadata=meta)

    gathered = dataclasses.replace(placed(0), ranks=(placed(0), placed(1)))
    page = _open(browser, tmp_path, "parallel", gathered)
    assert page.problems() == []
    assert page.evaluate("document.getElementById('parallel-section').hidden") is False
    assert page.evaluate("document.querySelectorAll('#job-table tbody tr').length") == 2
    assert "dp 0, tp 1" in _text(page, "job-table")
    assert "the parallel plan adds 0 FLOPs" in _text(page, "parallel")
    assert page.evaluate("document.querySelectorAll('#pipeline-table tbody tr').length") == 2
    assert "the schedule's ideal bubble 20%" in _text(page, "parallel")  # (2 - 1) / (4 + 2 - 1)
