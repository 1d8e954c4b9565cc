"""When a collective completes that says so to no one: a ``Work`` with no future, whose caller's
``wait()`` returns, and a functional collective waited for inside the op that first uses it.

Most c10d ``Work`` handles tell their completion through a future (the collectives source
stamps it from the backend's thread). Some have none: gloo's reduce-scatter into one tensor
(``reduce_scatter_tensor``, which ZeRO-3 and FSDP2 call) runs an all-reduce into a copy and
only its ``wait()`` cuts this rank's part out of it. Its op returns at once; the rank then waits
in ``wait()`` for the others and the transfer. So while a capture watches such handles, the
``Work`` class's ``wait`` is routed through :func:`_waited`, which stamps each watched handle's
completion as its wait returns (a synchronous call waits inside ``torch.distributed``, an
asynchronous one where its caller waits). The class's own ``wait`` is put back when the last
watcher stops (:meth:`WorkWaits.close`), and by :func:`flopsight._process.reset`.

A functional collective (tensor parallelism's all-reduces) returns an ``AsyncCollectiveTensor``;
the op that first uses one waits for it inside its own dispatch, where neither a dispatch mode
nor the native recorder sees the ``wait_tensor`` (the op hides its parts). While a capture
listens (:class:`TensorWaits`), ``_functional_collectives.wait_tensor``, which that wait calls,
is routed through a function that tells the listeners each wait's tensor and host interval
(:data:`TENSOR_WAITS`); put back when the last listener stops.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..._process import PROCESS
from ..._torch_private import functional_collectives, python_work, work_class
from .routes import Routes

__all__ = ["WAITS", "WorkWaits", "TENSOR_WAITS", "TensorWaits"]


class WorkWaits:
    """The process's watched handles (id of the Python ``Work`` -> the handle, kept alive so
    the caller gets this same object, and what to call when its wait returns), the watchers
    open, and the ``wait`` the class held before."""

    def __init__(self) -> None:
        self.watching: dict[int, tuple[object, list[Callable[[], None]]]] = {}
        self.open_count = 0
        self.saved: Callable | None = None

    def open(self) -> None:
        """One more watcher: the class's ``wait`` is routed while any is open."""
        cls = work_class()
        if cls is None:
            return
        if self.open_count == 0:
            saved = cls.__dict__["wait"]

            def wait(work, *args, **kwargs):
                try:
                    return saved(work, *args, **kwargs)
                finally:
                    _waited(self, work)

            self.saved = saved
            cls.wait = wait
        self.open_count += 1

    def close(self, watched: list[tuple[int, Callable[[], None]]]) -> None:
        """A watcher stops: what it ``watched`` (from :meth:`watch`) is watched for it no more
        (another open watcher's callbacks on the same handle stay); the last one puts the
        class's ``wait`` back."""
        for key, callback in watched:
            entry = self.watching.get(key)
            if entry is not None and callback in entry[1]:
                entry[1].remove(callback)
                if not entry[1]:
                    del self.watching[key]
        if self.open_count:
            self.open_count -= 1
            if self.open_count == 0:
                self.reset()

    def watch(self, work, callback: Callable[[], None]) -> tuple[int, Callable[[], None]] | None:
        """Call ``callback()`` when the wait on the handle of ``work`` (the script object a
        collective op returned) returns; what to hand :meth:`close`, or None if it is not a
        ``Work`` or no watcher is open."""
        handle = python_work(work)
        if handle is None or self.saved is None:
            return None
        key = id(handle)
        self.watching.setdefault(key, (handle, []))[1].append(callback)
        return key, callback

    def reset(self) -> None:
        cls = work_class()
        if self.saved is not None and cls is not None:
            cls.wait = self.saved
        self.saved, self.open_count = None, 0
        self.watching.clear()


def _waited(waits: WorkWaits, work) -> None:
    """``work.wait()`` returned (or raised: either way it is over): its watchers' callbacks."""
    entry = waits.watching.pop(id(work), None)
    if entry is not None and entry[0] is work:
        for callback in entry[1]:
            callback()


#: the process's watched handles
WAITS: WorkWaits = PROCESS.own("work waits", WorkWaits)


class TensorWaits(Routes):
    """The listeners to functional collectives' waits (its sources: each called with the tensor
    waited for and the wait's host start and end, ``time.perf_counter`` seconds), and the
    module's own ``wait_tensor`` while they listen (see :class:`.Routes`)."""

    def install(self) -> None:
        module = functional_collectives()
        if module is not None:
            self.route(module, "wait_tensor", self._heard)

    def _heard(self, own):
        listeners = self.sources

        def wait_tensor(tensor):
            t0 = time.perf_counter()
            try:
                return own(tensor)
            finally:
                t1 = time.perf_counter()
                for heard in tuple(listeners):
                    heard(tensor, t0, t1)

        return wait_tensor


#: the process's listeners to functional collectives' waits
TENSOR_WAITS: TensorWaits = PROCESS.own("tensor waits", TensorWaits)
