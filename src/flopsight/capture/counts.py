"""What the counting backends collect (:class:`Counts`), and what both hold while they run
(:data:`EAGER_STANCE`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch

from ..result.stats import Stats
from .context import CaptureContext

__all__ = ["Counts", "collect_counts", "EAGER_STANCE"]


@dataclass
class Counts:
    """What was counted (by the counting source and the sources that count calls whole):
    per (path, phase), per op, its cost (latency: the op's own time) and the bytes it moved;
    the ops without a formula and their calls; [MACs, FLOPs] of each top-level forward call."""

    ops: dict[tuple[str, str], dict[str, Stats]] = field(default_factory=dict)
    bytes_moved: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    unsupported: dict[str, int] = field(default_factory=dict)
    tops: list[list[int]] = field(default_factory=list)
    #: which path counted the ops: "python" (the dispatch mode) or "native" (the recorder),
    #: and why not native when it was not
    backend: str = "python"
    backend_note: str | None = None
    #: the operators the native backend costed on their values, in Python (see Metadata.on_values)
    on_values: tuple[str, ...] = ()


def collect_counts(ctx: CaptureContext, backend: str, note: str | None = None, on_values=()) -> Counts:
    """What the context's tally holds, as the counting source's part of a raw capture."""
    tally = ctx.tally
    return Counts(tally.resolve(ctx.clock.seconds, ctx.clock.scale), tally.bytes_moved(),
                  dict(tally.unsupported), [list(t) for t in tally.tops], backend, note, tuple(sorted(on_values)))


class _EagerStance:
    """torch.compile's ``force_eager`` stance while any counting source runs.

    Under a dispatch mode dynamo compiles nothing, and eager flex_attention's
    ``torch.compile(fullgraph=True)`` raises for compiling nothing unless the stance is not
    the default. Sessions may stop in any order (two attached profilers sharing a step), so
    the stance is counted, not nested: the first start sets it, the last stop restores it. The
    stance is the process's and profilers on two threads may start at once: counted under a lock
    (two first starts would each set it, and the last stop restore the other's ``force_eager``).
    """

    def __init__(self) -> None:
        self._users = 0
        self._stance = None
        self._lock = threading.Lock()

    def acquire(self) -> None:
        with self._lock:
            if self._users == 0:
                self._stance = torch.compiler.set_stance("force_eager")  # sets it now; exit restores
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0:
                stance, self._stance = self._stance, None
                stance.__exit__(None, None, None)


#: the stance every counting source (this one, the native one) holds while it runs
EAGER_STANCE = _EagerStance()
