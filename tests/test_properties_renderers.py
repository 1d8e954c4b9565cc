"""Property tests: random strings as module names, class names and file names, through the
CSV, Markdown and HTML writers: each escapes them as its format needs and they parse back.

CSV: Python's csv reader gives back every module's path and type (a cell a spreadsheet would
take for a formula starts with ``'``). Markdown: every table row keeps its cells (``|`` escaped),
no name brings a tag (``<``, ``>``, ``&`` as entities) or a line end, and the cells unescape to
the names (Markdown trims a cell's spaces and joins its lines). HTML: the page has the same tags
whatever the names, and its embedded JSON gives back every name. Sizes: HYPOTHESIS_PROFILE
(tests/conftest.py).
"""

from __future__ import annotations

import csv
import functools
import html.parser
import io
import json
import re

import torch
from hypothesis import given, note
from hypothesis import strategies as st
from torch import nn

import flopsight

#: names that have broken writers before, or that a careless one would let through
NASTY = ["</script>", "<!--", "<b>x</b>", "=cmd()", "+1", "-1", "@SUM(A1)", "'=x", "a|b", "`x`", "&amp;", "\\|",
         "\u2028", "\u2029", "\r", "\n", "a\r\nb", "\t", " x ", "\x00", "\"q\"", "a,b", "ü日本", "\U0001f600"]
text = st.text(st.characters(codec="utf-8"), min_size=1, max_size=10)
names = st.one_of(st.sampled_from(NASTY), text)
_TAKEN = set(dir(nn.Sequential()))  # add_module refuses the names of attributes


def _module_name(name: str) -> bool:
    return "." not in name and name not in _TAKEN


module_names = names.filter(_module_name)


class _Chain(nn.Sequential):
    """Runs its children in order (subclassed under a drawn name)."""


def _cls(base: type, name: str) -> type:
    return type(name.replace("\x00", "0"), (base,), {})  # the one character a class name cannot hold


@st.composite
def trees(draw, names=names, depth: int = 0):
    """A module of a drawn class: a Linear(2, 2), or a chain of 1 to 3 such trees under drawn names."""
    if depth >= 2 or draw(st.booleans()):
        return _cls(nn.Linear, draw(names))(2, 2)
    chain = _cls(_Chain, draw(names))()
    for name in draw(st.lists(names.filter(_module_name), min_size=1, max_size=3, unique=True)):
        chain.add_module(name, draw(trees(names, depth + 1)))
    return chain


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


@functools.cache
def _profiled(model: nn.Module):
    with torch.no_grad():
        return flopsight.profile(model, torch.ones(1, 2), clock=flopsight.FakeClock(step=1e-3))


def expected(model: nn.Module) -> list[tuple[str, str]]:
    """(path, class name) of every module, pre-order."""
    return [(path, type(m).__name__) for path, m in model.named_modules(remove_duplicate=False)]


# -- CSV --------------------------------------------------------------------------------------------


def _uncell(cell: str) -> str:
    """A CSV text cell as written: a leading ``'`` protects a formula-like value, or one that
    starts with ``'`` itself."""
    return cell[1:] if cell.startswith("'") and cell[1:].startswith(_FORMULA_START + ("'",)) else cell


@given(trees(names))
def test_csv_cells_parse_back_to_the_names(model):
    result = _profiled(model)
    for fmt in ("csv", "ops_csv"):
        rows = list(csv.reader(io.StringIO(result.render(fmt), newline="")))
        header, rows = rows[0], rows[1:]
        assert all(len(row) == len(header) for row in rows), fmt
        for row in rows:
            for cell in (row[header.index("module")], row[header.index("type")]):
                assert not cell.startswith(_FORMULA_START), f"{fmt}: {cell!r} would be read as a formula"
        got = [(_uncell(r[header.index("module")]), _uncell(r[header.index("type")])) for r in rows
               if r[header.index("phase")] == "forward"]
        want = [(p.replace("\x00", "\ufffd"), t.replace("\x00", "\ufffd")) for p, t in expected(model)]
        if fmt == "csv":
            assert got == want
        else:  # the ops table: each module's own ops, so the Linears only
            linears = {(p, t) for p, t in expected(model) if isinstance(model.get_submodule(p), nn.Linear)}
            assert set(got) == {(p.replace("\x00", "\ufffd"), t.replace("\x00", "\ufffd")) for p, t in linears}


# -- Markdown ---------------------------------------------------------------------------------------
_UNESCAPE = re.compile(r"\\([|`])|&(lt|gt|amp);")
_ENTITIES = {"lt": "<", "gt": ">", "amp": "&"}


def _cells(row: str) -> list[str]:
    """A GFM table row's cells: split on ``|`` not escaped by a backslash, trimmed, unescaped."""
    inner = row.strip()[1:-1]
    parts = re.split(r"(?<!\\)\|", inner)
    return [_UNESCAPE.sub(lambda m: m.group(1) or _ENTITIES[m.group(2)], p.strip()) for p in parts]


def _shown(name: str) -> str:
    """How Markdown shows a name in a cell or a heading: its line ends joined, its ends trimmed."""
    return re.sub(r"\r\n|\r|\n", " ", name).strip()


@given(trees(names))
def test_markdown_tables_hold_the_names_escaped(model):
    page = _profiled(model).render("md", top=100)
    lines = page.split("\n")  # Markdown's line ends are \n, \r\n and \r: none may come from a name
    assert "\r" not in page, "a name brought a line end into the Markdown"
    title = lines[0]
    assert title.startswith("### flopsight: ") and "<" not in title and ">" not in title
    assert _cells(f"|{title[len('### flopsight: '):title.rindex(' (')]}|") == [_shown(type(model).__name__)]
    want = [(_shown(p), _shown(t)) for p, t in expected(model)[1:]]  # the root is left out
    tables = [i for i, line in enumerate(lines) if line.startswith("#### Top ") and "modules" in line]
    assert len(tables) == (1 if want else 0)
    rows = []
    for line in lines[tables[0] + 4:] if tables else ():
        if not line:
            break
        cells = _cells(line)
        assert len(cells) == 7, f"a name broke the row {line!r}"
        assert "<" not in line and ">" not in line, f"a name brought a tag into {line!r}"
        rows.append((cells[0], cells[1]))
    assert sorted(rows) == sorted(want)


# -- HTML -------------------------------------------------------------------------------------------
class _Page(html.parser.HTMLParser):
    """The tags of a page, its title and its JSON script elements."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.title, self.json, self._in = [], "", [], None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, tuple(attrs) if tag != "meta" else tuple(a for a in attrs if a[0] != "content")))
        self._in = "json" if tag == "script" and ("type", "application/json") in attrs else tag
        if self._in == "json":
            self.json.append("")

    def handle_endtag(self, tag):
        self.tags.append(("/" + tag, ()))
        self._in = None

    def handle_data(self, data):
        if self._in == "title":
            self.title += data
        elif self._in == "json":
            self.json[-1] += data


def _parsed(page: str) -> _Page:
    parser = _Page()
    parser.feed(page)
    parser.close()
    return parser


@functools.lru_cache(maxsize=1)
def _plain_tags() -> list:
    return _parsed(_profiled(nn.Sequential(nn.Linear(2, 2))).render("html")).tags


@given(trees())
def test_html_page_embeds_the_names_and_no_tags(model):
    page = _parsed(_profiled(model).render("html"))
    assert page.tags == _plain_tags(), "a name changed the page's elements"
    assert page.title == f"flopsight: {type(model).__name__}"
    data = json.loads(page.json[0])
    assert [(m["name"], m["type_name"]) for m in data["modules"]] == expected(model)


# -- file names -------------------------------------------------------------------------------------
file_names = st.text(st.characters(codec="utf-8", exclude_characters="/\x00"), min_size=1, max_size=20).filter(
    lambda s: len(s.encode()) <= 200 and s not in (".", ".."))


@given(file_names, st.sampled_from([".csv", ".md", ".html"]))
def test_reports_saved_under_any_file_name_read_back(tmp_path_factory, stem, ending):
    result = _profiled(nn.Sequential(nn.Linear(2, 2)))
    path = tmp_path_factory.mktemp("out") / (stem + ending)
    note(f"path: {path!r}")
    result.save(path)
    assert path.read_text(encoding="utf-8") == result.render({".csv": "csv", ".md": "md", ".html": "html"}[ending])


# -- the writers' former failures (found by the properties above), as plain cases ---------------------------
def _named(*names: str) -> nn.Module:
    model = nn.Sequential()
    for name in names:
        model.add_module(name, nn.Linear(2, 2))
    return model


def test_csv_quotes_a_carriage_return_in_a_name():
    rows = list(csv.reader(io.StringIO(_profiled(_named("a\rb")).render("csv"), newline="")))
    assert [row[1] for row in rows[1:]] == ["", "a\rb"]


def test_csv_writes_a_nul_in_a_name_as_the_replacement_character():
    # Python 3.10's csv writer raises for a NUL ("need to escape"): the name is written with U+FFFD
    rows = list(csv.reader(io.StringIO(_profiled(_named("a\x00b")).render("csv"), newline="")))
    assert [row[1] for row in rows[1:]] == ["", "a\ufffdb"]


def test_csv_tells_a_quote_started_name_from_a_protected_formula():
    rows = list(csv.reader(io.StringIO(_profiled(_named("=x", "'=x")).render("csv"), newline="")))
    assert [_uncell(rows[2][1]), _uncell(rows[3][1])] == ["=x", "'=x"]


def test_markdown_joins_a_carriage_return_in_a_name():
    assert "\r" not in _profiled(_named("a\rb")).render("md")
