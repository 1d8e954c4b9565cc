"""The HTML report of a model with ~15,000 modules: render time, page size, and in headless
Chromium the load-to-drawn time and the time the page takes to answer a few interactions.

    python benchmarks/html_report.py                 # 50 stages x 10 blocks x 29 Linear/ReLU
    python benchmarks/html_report.py --stages 5      # a smaller one

The model is plain torch (nested nn.Sequential of small Linears and ReLUs), profiled on CPU
with tiny inputs, one forward and backward pass. Chromium is Debian's package
(``apt-get install chromium``), driven through ``tests/headless_chromium.py``. Figures are
printed, never asserted (tests never assert on wall-clock time).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
from torch import nn

import flopsight
from flopsight.renderers.html_renderer import render_html

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from headless_chromium import Chromium, find_chromium  # noqa: E402


def build(stages: int, blocks: int, leaves: int, width: int = 8) -> nn.Module:
    """stages x blocks x leaves Linear/ReLU modules under two levels of nn.Sequential."""
    def block() -> nn.Sequential:
        return nn.Sequential(*[nn.Linear(width, width) if k % 2 == 0 else nn.ReLU() for k in range(leaves)])

    return nn.Sequential(*[nn.Sequential(*[block() for _ in range(blocks)]) for _ in range(stages)])


# what the page does for each interaction, its script timed in the page with performance.now()
# (the chart redraws and the table refreshes synchronously; the browser's paint comes after)
INTERACTIONS = {
    "size by latency": "(() => { const s = document.getElementById('metric'); s.value = 'latency'; "
                       "s.dispatchEvent(new Event('change')); })()",
    "phase backward": "(() => { const s = document.getElementById('phase'); s.value = 'backward'; "
                      "s.dispatchEvent(new Event('change')); })()",
    "colour by type": "(() => { const s = document.getElementById('colour'); s.value = 'type'; "
                      "s.dispatchEvent(new Event('change')); })()",
    "search '.7.'": "(() => { const s = document.getElementById('search'); s.value = '.7.'; "
                    "s.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter'})); })()",
    "clear search": "(() => { const s = document.getElementById('search'); s.value = ''; "
                    "s.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape'})); })()",
    "sort by FLOPs": "[...document.querySelectorAll('#table-head span')]"
                     ".find(s => s.textContent.startsWith('FLOPs')).click()",
    "select a module": "flopsightReport.select('42.7.13')",
    "select the root": "flopsightReport.select('')",
    "zoom into a stage": "flopsightReport.zoom('3')",
}


def timed_in_page(page, expression: str) -> float:
    """Seconds ``expression`` ran in the page, its synchronous redraws included."""
    return page.evaluate(f"(() => {{ const t = performance.now(); {expression}; "
                         f"return (performance.now() - t) / 1000; }})()")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", type=int, default=50)
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--leaves", type=int, default=29)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))

    model = build(args.stages, args.blocks, args.leaves)
    x = torch.ones(1, 8, requires_grad=True)
    start = time.perf_counter()
    with flopsight.Profiler(model) as prof:
        model(x).sum().backward()
    result = prof.result
    print(f"model: {len(result.modules)} modules, profiled (forward + backward) in {time.perf_counter() - start:.2f} s")

    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        page_text = render_html(result)
        times.append(time.perf_counter() - start)
    json_start = time.perf_counter()
    result.render("json")
    json_time = time.perf_counter() - json_start
    print(f"render_html: median {statistics.median(times):.3f} s of {args.repeats} "
          f"(render json: {json_time:.3f} s); page {len(page_text.encode()) / 1e6:.1f} MB")

    binary = find_chromium()
    if binary is None:
        print("no chromium binary on PATH: browser figures skipped (apt-get install chromium)")
        return 0
    with tempfile.TemporaryDirectory() as tmp, Chromium(binary, timeout=120) as browser:
        path = os.path.join(tmp, "profile.html")
        with open(path, "w", encoding="utf-8") as f:
            f.write(page_text)
        loads, drawn_at = [], []
        for _ in range(args.repeats):
            page = browser.new_page(1400, 1000)
            start = time.perf_counter()
            page.navigate("file://" + path, timeout=120)
            page.wait_until("document.documentElement.dataset.state === 'drawn'", timeout=120, interval=0.005)
            loads.append(time.perf_counter() - start)
            drawn_at.append(page.evaluate("flopsightReport.drawnAt") / 1000)
            problems = page.problems()
            if problems:
                print("page problems:", problems)
            browser.send("Target.closeTarget", targetId=page.target)
        print(f"chromium {browser.version['product']}: navigate to drawn median {statistics.median(loads):.3f} s, "
              f"in-page first draw at {statistics.median(drawn_at):.3f} s after navigation start")

        page = browser.new_page(1400, 1000)
        page.navigate("file://" + path, timeout=120)
        page.wait_until("document.documentElement.dataset.state === 'drawn'", timeout=120)
        print("interactions (in-page script time, median of 3):")
        for name, expression in INTERACTIONS.items():
            runs = [timed_in_page(page, expression) for _ in range(3)]
            print(f"  {name:<20} {1000 * statistics.median(runs):7.1f} ms")
        rows = page.evaluate("document.querySelectorAll('#table-body .vrow').length")
        print(f"  rows in the DOM: {rows} for {page.evaluate('flopsightReport.modules')} modules; "
              f"page problems: {page.problems() or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
