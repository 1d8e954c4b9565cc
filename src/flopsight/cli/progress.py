"""A one-line progress bar on stderr, for the stages of a command-line run.

Drawn only when the stream is a terminal (and redrawn at most ten times a second), so
pipes, files, CI logs and tests see nothing. A run is a fixed list of stages (build,
warm-up, profile, render); a stage may count steps (passes, decode steps) when it
knows how many. No dependency: tqdm is not needed for one line.

>>> import io
>>> with Progress(["build", "profile"], stream=io.StringIO()) as bar:   # not a terminal: silent
...     with bar.stage("build"):
...         pass
>>> bar.enabled
False
>>> stream = io.StringIO()
>>> with Progress(["build", "profile"], stream=stream, enabled=True, clock=lambda: 0.0) as bar:
...     with bar.stage("build"):
...         pass
...     with bar.stage("profile", total=4):
...         bar.advance()
...         print(bar.line())
[############--------] 2/2 profile 1/4  0.0s
>>> stream.getvalue().endswith("\\r\\x1b[K")   # the line is erased at the end
True
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import TextIO

__all__ = ["Progress"]

WIDTH = 20  # characters of the bar itself
CLEAR = "\r\x1b[K"  # carriage return, erase to the end of the line


class Progress:
    """Stages of a run, drawn as ``[####------] 2/4 profile 3/5  12.3s`` on ``stream``
    (default: stderr) when ``enabled`` (default: when ``stream`` is a terminal)."""

    def __init__(self, stages: list[str], *, stream: TextIO | None = None, enabled: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, interval: float = 0.1):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = _is_terminal(self.stream) if enabled is None else enabled
        self.stages = list(stages)
        self.clock = clock
        self.interval = interval
        self.start = clock()
        self._index = 0
        self._name = ""
        self._done = 0
        self._total: int | None = None
        self._drawn_at: float | None = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextlib.contextmanager
    def stage(self, name: str, total: int | None = None) -> Iterator[Progress]:
        """Show ``name`` (the next of the stages) while the block runs; ``total`` steps,
        counted by :meth:`advance`, when known."""
        if name in self.stages:
            self._index = self.stages.index(name)
        self._name, self._done, self._total = name, 0, total
        self._draw(force=True)
        yield self
        self._index += 1

    def expect(self, total: int) -> None:
        """Set the current stage's total steps, once known (``--repeat auto`` plans its
        timed calls after the stage has begun)."""
        self._total = total
        self._draw(force=True)

    def advance(self, steps: int = 1) -> None:
        """Count ``steps`` more of the current stage (capped at its total)."""
        self._done += steps
        if self._total is not None:
            self._done = min(self._done, self._total)
        self._draw()

    def note(self, message: str) -> None:
        """Print ``flopsight: note: message`` on the stream, terminal or not, on a line of
        its own (the bar is drawn again at its next step)."""
        self.close()
        print(f"flopsight: note: {message}", file=self.stream, flush=True)

    def close(self) -> None:
        """Erase the line, so what is printed next starts on a clean one."""
        if self.enabled and self._drawn_at is not None:
            self.stream.write(CLEAR)
            self.stream.flush()
            self._drawn_at = None

    def line(self) -> str:
        """The line as it is drawn now (without the leading carriage return)."""
        stages = max(len(self.stages), 1)
        filled = WIDTH * min(self._index, stages) // stages
        if self._total:
            filled += WIDTH * self._done // (self._total * stages)
        bar = "#" * filled + "-" * (WIDTH - filled)
        steps = f" {self._done}/{self._total}" if self._total else ""
        elapsed = self.clock() - self.start
        return f"[{bar}] {min(self._index + 1, stages)}/{stages} {self._name}{steps}  {elapsed:.1f}s"

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if not force and self._drawn_at is not None and now - self._drawn_at < self.interval:
            return
        self.stream.write(CLEAR + self.line())
        self.stream.flush()
        self._drawn_at = now


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
