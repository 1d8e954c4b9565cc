"""A small client for headless Chromium over the DevTools protocol, for the HTML report's tests
and benchmarks: the system's chromium (Debian's package), driven through
``--remote-debugging-pipe`` (NUL-separated JSON on file descriptors 3 and 4), so it needs
no port, no websocket library and never downloads a browser. Also a pure-Python PNG reader
(zlib and the five PNG row filters) to check a screenshot is a drawn page.

    with Chromium() as browser:
        page = browser.new_page(width=1280, height=900)
        page.navigate("file:///tmp/profile.html")
        page.evaluate("document.title")

>>> png = encode_png(2, 1, [(255, 255, 255), (10, 20, 30)])
>>> decode_png(png)
(2, 1, [(255, 255, 255, 255), (10, 20, 30, 255)])
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import struct
import subprocess
import tempfile
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

__all__ = ["find_chromium", "Chromium", "Page", "CDPError", "decode_png", "encode_png", "colour_stats"]

_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def find_chromium() -> str | None:
    """The Chromium binary: ``$FLOPSIGHT_CHROMIUM`` if set, else the first of the usual names
    on ``PATH``; None when there is none."""
    given = os.environ.get("FLOPSIGHT_CHROMIUM")
    if given:
        return given if os.path.exists(given) else shutil.which(given)
    for name in _NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def _high_pipe() -> tuple[int, int]:
    """A pipe whose two ends are numbered 10 or more (never 3 or 4)."""
    ends = os.pipe()
    high = tuple(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in ends)
    for fd in ends:
        os.close(fd)
    return high


class CDPError(RuntimeError):
    """A DevTools command failed, or the browser did not answer in time."""


class Chromium:
    """A headless Chromium process and its DevTools pipe (a context manager)."""

    def __init__(self, binary: str | None = None, timeout: float = 30.0):
        self.binary = binary or find_chromium()
        if not self.binary:
            raise FileNotFoundError("no chromium binary on PATH (apt-get install chromium)")
        self.timeout = timeout
        self._profile = tempfile.mkdtemp(prefix="flopsight-chromium-")
        self._lock = threading.Condition()
        self._replies: dict[int, dict] = {}
        self.events: list[dict] = []  #: every event, in arrival order (each has "method", maybe "sessionId")
        self._next_id = 0
        self._closed = False
        to_browser_r, self._to_browser = _high_pipe()
        self._from_browser, from_browser_w = _high_pipe()
        flags = [
            "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--mute-audio", "--hide-scrollbars",
            "--force-device-scale-factor=1", f"--user-data-dir={self._profile}", "about:blank",
        ]
        # the browser reads commands on fd 3 and writes replies on fd 4: bash (dash takes no fd
        # above 9) moves our pipe ends, numbered 10 and up so they clobber neither, there
        script = f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w} {to_browser_r}<&- {from_browser_w}>&-'
        self.process = subprocess.Popen(["bash", "-c", script, self.binary, *flags],
                                        pass_fds=(to_browser_r, from_browser_w),
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.version = self.send("Browser.getVersion")

    # -- the pipe -----------------------------------------------------------------------
    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._from_browser, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._lock:
                    self._closed = True
                    self._lock.notify_all()
                return
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            with self._lock:
                for raw in messages:
                    message = json.loads(raw)
                    if "id" in message:
                        self._replies[message["id"]] = message
                    else:
                        self.events.append(message)
                self._lock.notify_all()

    def send(self, method: str, session: str | None = None, timeout: float | None = None, **params: Any) -> dict:
        """Run one DevTools command (on ``session``'s target, else the browser) and return its result."""
        with self._lock:
            self._next_id += 1
            ident = self._next_id
        message = {"id": ident, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        with self._lock:
            while ident not in self._replies:
                if self._closed:
                    raise CDPError(f"{method}: the browser exited ({self._stderr_tail()})")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CDPError(f"{method}: no answer in {timeout or self.timeout} s")
                self._lock.wait(left)
            reply = self._replies.pop(ident)
        if "error" in reply:
            raise CDPError(f"{method}: {reply['error'].get('message')} {reply['error'].get('data', '')}".strip())
        return reply.get("result", {})

    def wait_for(self, predicate: Callable[[dict], bool], timeout: float | None = None, start: int = 0) -> dict:
        """The first event from index ``start`` on for which ``predicate`` holds (waits for it)."""
        deadline = time.monotonic() + (timeout or self.timeout)
        seen = start
        with self._lock:
            while True:
                for event in self.events[seen:]:
                    if predicate(event):
                        return event
                seen = len(self.events)
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    raise CDPError("the awaited DevTools event did not come")
                self._lock.wait(left)

    def _stderr_tail(self) -> str:
        return "see its stderr" if self.process.poll() is None else f"exit code {self.process.returncode}"

    # -- pages --------------------------------------------------------------------------
    def new_page(self, width: int = 1280, height: int = 900) -> Page:
        """A new tab of ``width`` x ``height`` CSS pixels, with its console, exceptions and
        dialogs recorded from the start."""
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        page = Page(self, session, target)
        for domain in ("Page", "Runtime", "Log"):
            page.send(f"{domain}.enable")
        page.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        return page

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.send("Browser.close", timeout=5)
            except CDPError:
                pass
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.process.stderr:
            self.process.stderr.close()
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Page:
    """One tab: commands go to its session; its events are read from the browser's list."""

    def __init__(self, browser: Chromium, session: str, target: str):
        self.browser, self.session, self.target = browser, session, target

    def send(self, method: str, timeout: float | None = None, **params: Any) -> dict:
        return self.browser.send(method, session=self.session, timeout=timeout, **params)

    def events(self, *methods: str) -> list[dict]:
        """This page's events named ``methods`` so far."""
        return [e for e in self.browser.events if e.get("sessionId") == self.session and e["method"] in methods]

    def problems(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions and log errors (CSP violations
        included), as text; empty for a clean page."""
        found = []
        for e in self.events("Runtime.exceptionThrown", "Runtime.consoleAPICalled", "Log.entryAdded"):
            p = e["params"]
            if e["method"] == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                found.append(f"exception: {d.get('exception', {}).get('description') or d.get('text')}")
            elif e["method"] == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert", "warning"):
                found.append(f"console.{p['type']}: "
                             + " ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
            elif e["method"] == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
                found.append(f"log {p['entry']['level']}: {p['entry']['text']}")
        return found

    def navigate(self, url: str, timeout: float | None = None) -> float:
        """Load ``url`` and wait for its load event; the seconds it took."""
        start_index = len(self.browser.events)
        start = time.perf_counter()
        reply = self.send("Page.navigate", url=url)
        if reply.get("errorText"):
            raise CDPError(f"Page.navigate: {reply['errorText']}")
        self.browser.wait_for(lambda e: e.get("sessionId") == self.session and e["method"] == "Page.loadEventFired",
                              timeout=timeout, start=start_index)
        return time.perf_counter() - start

    def evaluate(self, expression: str, timeout: float | None = None) -> Any:
        """``expression``'s value (promises awaited); raises :class:`CDPError` if it throws."""
        reply = self.send("Runtime.evaluate", timeout=timeout, expression=expression, returnByValue=True,
                          awaitPromise=True)
        if "exceptionDetails" in reply:
            d = reply["exceptionDetails"]
            raise CDPError(f"evaluate: {d.get('exception', {}).get('description') or d.get('text')}")
        return reply["result"].get("value")

    def wait_until(self, expression: str, timeout: float = 30.0, interval: float = 0.02) -> Any:
        """Poll ``expression`` until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise CDPError(f"{expression!r} still falsy after {timeout} s")
            time.sleep(interval)

    def click(self, x: float, y: float) -> None:
        """A real left click at viewport coordinates (``x``, ``y``): press and release."""
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            extra = {} if kind == "mouseMoved" else {"button": "left", "clickCount": 1}
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, **extra)

    def screenshot(self, full_page: bool = False) -> bytes:
        """The page as PNG bytes: the viewport, or the whole page with ``full_page``."""
        return base64.b64decode(self.send("Page.captureScreenshot", format="png",
                                          captureBeyondViewport=full_page)["data"])


# -- PNG ------------------------------------------------------------------------------------
def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def decode_png(data: bytes) -> tuple[int, int, list[tuple[int, ...]]]:
    """(width, height, RGBA pixels row by row) of an 8-bit RGB or RGBA PNG, not interlaced."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in (2, 6) or interlace:
        raise ValueError(f"unsupported PNG: bit depth {depth}, colour type {colour}, interlace {interlace}")
    channels = 4 if colour == 6 else 3
    stride = width * channels
    raw = zlib.decompress(b"".join(idat))
    previous = bytearray(stride)
    pixels: list[tuple[int, ...]] = []
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        if kind == 1:
            for i in range(channels, stride):
                line[i] = (line[i] + line[i - channels]) & 255
        elif kind == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, previous))
        elif kind == 3:
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                line[i] = (line[i] + ((left + previous[i]) >> 1)) & 255
        elif kind == 4:
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                upper_left = previous[i - channels] if i >= channels else 0
                line[i] = (line[i] + _paeth(left, previous[i], upper_left)) & 255
        elif kind != 0:
            raise ValueError(f"bad PNG filter {kind}")
        rows = zip(*(iter(line),) * channels)
        pixels.extend(rows if channels == 4 else ((r, g, b, 255) for r, g, b in rows))
        previous = line
    return width, height, pixels


def encode_png(width: int, height: int, pixels: list[tuple[int, int, int]]) -> bytes:
    """An 8-bit RGB PNG of ``pixels`` (row by row), unfiltered: for tests of the reader."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    rows = b"".join(b"\0" + bytes(v for p in pixels[y * width:(y + 1) * width] for v in p) for y in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def colour_stats(pixels: list[tuple[int, ...]]) -> tuple[int, float]:
    """(distinct colours, share of pixels that differ from the most common one)."""
    counts: dict[tuple[int, ...], int] = {}
    for p in pixels:
        counts[p] = counts.get(p, 0) + 1
    background = max(counts.values()) if counts else 0
    return len(counts), (1 - background / len(pixels)) if pixels else 0.0
