"""The README's screenshot of the HTML report: ResNet-18 (``python -m flopsight``'s model).

    python benchmarks/report_screenshot.py            # writes docs/images/report.png

Profiles ``flopsight.cli.zoo.models.build("resnet18", 1)`` as ``python -m flopsight`` does, saves the
report, opens it in headless Chromium (Debian's ``chromium``), clicks a module in the chart
so the detail panel is filled, and saves a screenshot of the whole page. Latencies are the
medians of ``--repeat`` timed passes on one thread, so a busy machine's noise colours the chart less.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import torch

import flopsight
from flopsight.cli.zoo.models import build

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "tests"))
from headless_chromium import Chromium  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=os.path.join(ROOT, "docs", "images", "report.png"))
    parser.add_argument("--select", default="layer3.0.conv2", help="module clicked in the chart")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5, help="timed passes: latencies are their medians")
    parser.add_argument("--threads", type=int, default=1, help="torch's intra-op threads")
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)  # one: a machine shared with other work slows two threads' barriers most
    model, inputs = build("resnet18", 1)
    with torch.no_grad():
        result = flopsight.profile(model, inputs, warm_up=1, repeat=args.repeat)
    with tempfile.TemporaryDirectory() as tmp, Chromium() as browser:
        path = os.path.join(tmp, "profile.html")
        result.save(path)
        page = browser.new_page(args.width, args.height)
        page.navigate("file://" + path)
        page.wait_until("document.documentElement.dataset.state === 'drawn'")
        rect = page.evaluate(f"flopsightReport.rectOf({args.select!r})")
        page.click(rect["x"] + rect["width"] / 2, rect["y"] + rect["height"] / 2)
        page.send("Input.dispatchMouseEvent", type="mouseMoved", x=1, y=1)  # the chart's tooltip hidden
        page.evaluate("window.scrollTo(0, 0)")
        if page.problems():
            raise SystemExit(f"the page reported problems: {page.problems()}")
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output, "wb") as f:
            f.write(page.screenshot(full_page=True))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
