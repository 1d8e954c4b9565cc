"""HTML: one self-contained interactive page (see ``docs/html.md``).

The page embeds the JSON the JSON renderer writes (``result.to_dict()``) and a small
*derived* block (step anatomy, rank figures, efficiency: :func:`flopsight.analysis.derived.derived`);
its CSS and script come from ``assets/`` and are inlined, so the file opens offline. The
script builds the tree view, draws and formats: it measures nothing.

Module names, type names and reprs are user data: the JSON sits in
``<script type="application/json">`` with ``<``, ``>``, ``&`` and U+2028/U+2029 escaped,
the script writes it into the page with ``textContent`` only, and a Content-Security-Policy
lets no script run but the page's own (by its hash) and nothing load from the network.

>>> import torch, flopsight
>>> model = torch.nn.Sequential()
>>> model.add_module("</script><b>", torch.nn.Linear(2, 2))
>>> page = render_html(flopsight.profile(model, torch.ones(1, 2)), title="a <demo>")
>>> page.startswith("<!DOCTYPE html>"), "</script><b>" in page, "<title>a &lt;demo&gt;</title>" in page
(True, False, True)
>>> "\\\\u003c/script\\\\u003e\\\\u003cb\\\\u003e" in page     # the name, escaped inside the JSON
True
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import re
from functools import cache
from importlib import resources
from typing import Any

from ..analysis.report import Report
from ..analysis.report_options import ReportOptions
from .json_renderer import json_data

__all__ = ["render_html", "format_html", "embed_json"]

# What JSON may hold that would end a <script> element or break the script that reads it:
# "</script>" or "<!--" (needs "<"), and U+2028/U+2029 (line ends in older JavaScript).
_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_UNSAFE_RE = re.compile("[<>&\u2028\u2029]")
_SLOT_RE = re.compile(r"<!--flopsight:(\w+)-->")


def render_html(result, **options: Any) -> str:
    """``result`` as one self-contained HTML page; ``title`` defaults to the model's name.
    ``peak`` is what :func:`flopsight.analysis.efficiency.efficiency` takes (FLOP/s, a device
    name from flopsight's table, ``"cpu"`` or a ``Peak``; None: the recorded device's).
    ``options`` are :class:`~flopsight.analysis.report_options.ReportOptions`'."""
    return format_html(Report(result, ReportOptions.of(**options)))


def format_html(report: Report) -> str:
    """The page of a report (the format table's entry): the result's own JSON and the
    figures derived from it (:attr:`~flopsight.analysis.report.Report.page_figures`)."""
    result, title = report.result, report.options.title
    data = json_data(result)  # the JSON renderer's document (times null on the meta device)
    page_title = title if title is not None else f"flopsight: {result.metadata.model or 'profile'}"
    css, script = _asset("report.css"), _asset("report.js")
    slots = {
        "title": html.escape(page_title),
        "csp": _content_security_policy(script, css),
        "css": css,
        "data": embed_json(data),
        "derived": embed_json(report.page_figures),
        "js": script,
    }
    # one pass over the template, so nothing a slot brings in is read as a slot
    return _SLOT_RE.sub(lambda m: slots[m.group(1)], _asset("report.html"))


def embed_json(value: Any) -> str:
    """``value`` as JSON that is safe inside ``<script type="application/json">``: no
    character of it can close the element, and non-finite floats become null (``JSON.parse``
    reads no NaN).

    >>> embed_json({"name": "</script>&", "x": float("nan")})
    '{"name":"\\\\u003c/script\\\\u003e\\\\u0026","x":null}'
    """
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError:  # a NaN or an infinity somewhere: rare, so only then walk it all
        text = json.dumps(_finite(value), separators=(",", ":"), ensure_ascii=False)
    return _UNSAFE_RE.sub(lambda m: _UNSAFE[m.group(0)], text)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _content_security_policy(script: str, css: str) -> str:
    """Only the page's own script and style (by hash) may run, and nothing may be fetched:
    a second line of defence behind the escaping, and the proof the page needs no network."""
    def digest(text: str) -> str:
        return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"

    return (f"default-src 'none'; script-src {digest(script)}; style-src {digest(css)}; "
            "img-src data:; base-uri 'none'; form-action 'none'")


@cache
def _asset(name: str) -> str:
    """A static asset of the page; the script and style must not close their element."""
    # one part per joinpath: Traversable takes several only from Python 3.11
    text = resources.files(__package__).joinpath("assets").joinpath(name).read_text(encoding="utf-8")
    if name != "report.html" and re.search(r"</(script|style)", text, re.IGNORECASE):
        raise AssertionError(f"assets/{name} would close its inline element")
    return text
