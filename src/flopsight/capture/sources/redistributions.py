"""The work DTensor's redistributions run: what tensor parallelism adds to the model's own.

A change of placement (an op's input resharded for it, ``DTensor.redistribute``, their
backward) runs through ``redistribute_local_tensor``: its collectives, and the local ops that
cut, pad or scale a shard (a replicated bias becomes a partial sum by a division by the group
size). While a capture listens, that function is routed through one that marks the span
(:meth:`~..runtime.context.CaptureContext.redistributing`): the ops in it that cost FLOPs are
charged under ``redistribute:<op>`` (:data:`~...result.records.REDISTRIBUTE`), the work
parallelism adds, named apart. The functions are put back when the last capture stops, and by
:func:`flopsight._process.reset`.
"""

from __future__ import annotations

from ..._process import PROCESS
from ..._torch_private import redistribute_bindings
from .routes import Routes

__all__ = ["Redistributions", "REDISTRIBUTIONS"]


class Redistributions:
    """A capture's source: marks its context while DTensor redistributes (see the module)."""

    def __init__(self, ctx) -> None:
        self._ctx = ctx

    def start(self, ctx) -> None:
        REDISTRIBUTIONS.open(self)

    def stop(self, ctx) -> None:
        REDISTRIBUTIONS.close(self)

    def enter(self) -> None:
        self._ctx.redistributing(1)

    def exit(self) -> None:
        self._ctx.redistributing(-1)

    def collect(self, ctx) -> None:
        return None


class RedistributePatches(Routes):
    """The process's routed ``redistribute_local_tensor`` bindings and the sources listening
    (see :class:`.Routes`)."""

    def install(self) -> None:
        for module, name in redistribute_bindings():
            self.route(module, name, self._marking)

    def _marking(self, own):
        sources = self.sources

        def redistribute_local_tensor(*args, **kwargs):
            listening = tuple(sources)
            for source in listening:
                source.enter()
            try:
                return own(*args, **kwargs)
            finally:
                for source in listening:
                    source.exit()

        return redistribute_local_tensor


#: the process's routed redistributions
REDISTRIBUTIONS: RedistributePatches = PROCESS.own("redistributions", RedistributePatches)
