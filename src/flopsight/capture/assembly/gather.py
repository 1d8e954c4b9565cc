"""Many ranks, one result: every rank's profile gathered on rank 0, without a collective.

Under ``torch.distributed`` each rank publishes its result (the plain data its JSON holds,
pickled: :func:`encode`) in the default process group's key-value store and rank 0 reads them back, waiting at most
``timeout`` seconds: a rank that never reached the profiled step is missing (``None``), and
nothing can hang on it. Profiles are matched across ranks by their order: the n-th profile a
rank gathers is the n-th of every other rank (the same program runs on every rank).

Each rank says when a profile starts (:func:`announce`, a count per rank in the store): rank 0
waits the whole ``timeout`` for the ranks that started the profile it gathers. For the others
it reads their count: a rank that started the previous profile (the ranks profile in step, one
of them a little late) is waited for :data:`PEER_WAIT` seconds to start this one; a rank that
never started one, :data:`FIRST_WAIT` seconds at rank 0's first profile (a rank's first may
start a little later) and not at all after it; any other, not at all. So profiling on rank 0
alone, as DeepSpeed's docs do, costs rank 0 a few store reads, and its first profile a few
hundredths of a second more. A rank that starts a profile after rank 0 has given up on it is
noted "not profiling"; rank 0 warns at its next gather, and drops the result the rank left.
Profiles still match by order. A rank whose profiled call raised sends
what it knows of the failure (:func:`publish_failure`), so rank 0 does not wait for it either;
a rank whose result says its profiled span raised (in the model or in the code around it:
:func:`span_failure_text`) is noted as failed.

>>> gather_ranks(object(), timeout=1.0)   # outside torch.distributed: nothing to gather
([], {})
"""

from __future__ import annotations

import datetime
import gc
import io
import pickle
import time
import warnings
from typing import Any

import torch

from ..._process import PROCESS
from ..._torch_private import default_store
from ..charging.calls import failure_text

__all__ = ["gather_ranks", "announce", "publish_failure", "span_failure_text", "check_gather_timeout",
           "DEFAULT_GATHER_TIMEOUT", "FIRST_WAIT", "PEER_WAIT", "GATHERING"]

#: seconds rank 0 waits for the other ranks' results
DEFAULT_GATHER_TIMEOUT = 60.0

#: seconds rank 0 waits, at its first profile, for the ranks that never said they started one
#: (all together): the first profile of a rank may start a little later than rank 0's
FIRST_WAIT = 0.02
#: seconds rank 0 waits for a rank that started the previous profile to start this one
PEER_WAIT = 2.0

_ANNOUNCE = "flopsight/profiling/rank"


class Gathering:
    """What this process counts for gathering (:data:`GATHERING`): its profiles gathered and
    announced so far, and, on rank 0, the ranks it gave up on (rank -> the profile's number)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.gathered = 0  # profiles gathered by this process so far: the key of the next one
        self.announced = 0  # profiles this process announced (see announce)
        self.given_up: dict[int, int] = {}
        self.warn_after = 5.0  # seconds of waiting before rank 0 says what it is waiting for


#: the process's gathering counters
GATHERING: Gathering = PROCESS.own("gathering", Gathering)


def check_gather_timeout(timeout: Any) -> float:
    """``timeout`` as seconds (a positive number), or an error naming ``gather_timeout``."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"gather_timeout: expected a positive number of seconds, got {timeout!r}")
    return float(timeout)


def _store_and_rank():
    """(the default process group's store, this rank, the world size), or None outside
    torch.distributed."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return None
    store = default_store()
    if store is None:
        return None
    return store, dist.get_rank(), dist.get_world_size()


def announce(gather_timeout: float | None = DEFAULT_GATHER_TIMEOUT) -> None:
    """Say that a profile starts on this rank, one that will be gathered (``gather_timeout``
    not None; one that gathers nothing must not count, or rank 0 would wait for a rank that
    profiles for itself): rank 0 waits for the ranks that did. A count in the store, per rank:
    its n-th profile was announced when the count reached n. Rank 0's own count is read by no
    one: it is kept here only (no round trip to the store at the start of its profile)."""
    if gather_timeout is None:
        return
    found = _store_and_rank()
    if found is None:
        return
    store, rank, _ = found
    GATHERING.announced += 1
    if rank != 0:
        store.add(f"{_ANNOUNCE}{rank}", 1)


def _next_profile(store, rank: int) -> int:
    """The number of the profile this rank gathers now. One that gathers without having
    started here (a result built by hand) still counts as announced."""
    counts = GATHERING
    counts.gathered += 1
    if counts.announced < counts.gathered:
        if rank != 0:
            store.add(f"{_ANNOUNCE}{rank}", counts.gathered - counts.announced)
        counts.announced = counts.gathered
    return counts.gathered


def publish_failure(exc: BaseException) -> None:
    """This rank's profiled call raised ``exc``: tell rank 0 instead of a result. On rank 0
    itself nothing is gathered, but the profile is counted, so its next one still matches the
    other ranks' by order; outside torch.distributed, nothing to do."""
    found = _store_and_rank()
    if found is None:
        return
    store, rank, _ = found
    n = _next_profile(store, rank)
    if rank != 0:
        store.set(f"flopsight/profile{n}/rank{rank}", encode({"failed": failure_text(exc)}))


def span_failure_text(exc: BaseException) -> str:
    """What a failed :class:`~flopsight.Profiler` span records: the module that raised
    (:func:`~flopsight.capture.charging.calls.failure_text`), else the exception and its message, raised
    by the code around the model.

    >>> span_failure_text(ValueError("bad batch"))
    'ValueError raised in the profiled span, outside the model: bad batch'
    >>> span_failure_text(KeyboardInterrupt())
    'KeyboardInterrupt raised in the profiled span, outside the model'
    """
    text = failure_text(exc)
    if text != type(exc).__name__:  # a module of the model raised it: named already
        return text
    message = " ".join(str(exc).split())
    if len(message) > 120:
        message = message[:117] + "..."
    return f"{text} raised in the profiled span, outside the model" + (f": {message}" if message else "")


def gather_ranks(result, timeout: float = DEFAULT_GATHER_TIMEOUT) -> tuple[list, dict[int, str]]:
    """On rank 0: (every rank's result, index = rank, ``None`` for a rank that sent none, and
    ``result`` at index 0; why a rank has no usable result, by rank: ``"failed: ..."`` or
    ``"not profiling"``). On other ranks, and in one process: ``([], {})`` (the others only
    publish theirs)."""
    found = _store_and_rank()
    if found is None:
        return [], {}
    store, rank, world = found
    n = _next_profile(store, rank)
    prefix = f"flopsight/profile{n}/rank"
    if rank != 0:
        store.set(f"{prefix}{rank}", encode(result.to_dict()))
        return [], {}
    from ...result.profile_result import ProfileResult

    _late_starts(store, world)
    results: list = [result] + [None] * (world - 1)
    notes: dict[int, str] = {}
    started = time.monotonic()
    deadline = started + timeout
    warn_at = started + min(GATHERING.warn_after, timeout)
    for r in range(1, world):
        key = f"{prefix}{r}"
        # one round trip to the store when the result is there already (the usual case)
        there = store.check([key])
        if not there and not _started(store, f"{_ANNOUNCE}{r}", n, started, timeout):
            notes[r] = "not profiling"
            GATHERING.given_up[r] = n
            continue
        while not there and not _arrived(store, key, min(warn_at, deadline) - time.monotonic()):
            now = time.monotonic()
            if now >= deadline:
                break
            if now >= warn_at:
                warn_at = deadline
                missing = [str(m) for m in range(r, world) if not store.check([f"{prefix}{m}"])]
                warnings.warn(
                    f"flopsight: rank 0 is waiting for the results of rank(s) {', '.join(missing)} "
                    f"(at most gather_timeout={timeout:g} s); profiling on one rank only? pass gather_timeout=None",
                    UserWarning,
                    stacklevel=3,
                )
        else:
            with _gc_paused():  # a result is thousands of objects that all live on
                data = decode(store.get(key))
                store.delete_key(key)
                if "failed" in data:
                    notes[r] = f"failed: {data['failed']}"
                    continue
                results[r] = ProfileResult.from_dict(data)
            if results[r].metadata.error:
                notes[r] = f"failed: {results[r].metadata.error}"
    return results, notes


def encode(data: Any) -> bytes:
    """What a rank publishes: ``data`` (a result's :meth:`~.ProfileResult.to_dict`, plain
    dicts, lists, strings and numbers) pickled, which writes and reads it several times
    faster than JSON (a 2-rank step's result: 1.0 ms against 2.5 ms to write, 0.4 ms against
    1.2 ms to read).

    >>> decode(encode({"failed": "x", "n": [1, 2.5, None]}))
    {'failed': 'x', 'n': [1, 2.5, None]}
    """
    return pickle.dumps(data, protocol=4)


class _PlainData(pickle.Unpickler):
    """Reads plain data only: a pickle that names any class or function is refused, so
    what is in the store runs no code on rank 0."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"flopsight: a rank's result names {module}.{name}: not plain data")


def decode(payload: bytes) -> Any:
    """What :func:`encode` wrote.

    >>> decode(pickle.dumps(print))
    Traceback (most recent call last):
    ...
    _pickle.UnpicklingError: flopsight: a rank's result names builtins.print: not plain data
    """
    return _PlainData(io.BytesIO(payload)).load()


class _gc_paused:
    """The cyclic garbage collector off meanwhile (as it was after): rebuilding a result
    makes thousands of objects that all live on, which set off collections of the whole
    process's objects for nothing (3 ms of a 4.4 ms rebuild, measured)."""

    def __enter__(self) -> None:
        self._was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._was:
            gc.enable()


def _late_starts(store, world: int) -> None:
    """Rank 0: the ranks it gave up on that have started that profile since (they profile too,
    only later than rank 0 waited): said once, their result dropped from the store."""
    late = []
    for r, n in list(GATHERING.given_up.items()):
        if store.add(f"{_ANNOUNCE}{r}", 0) >= n:
            late.append(str(r))
            del GATHERING.given_up[r]
            key = f"flopsight/profile{n}/rank{r}"
            if store.check([key]):
                store.delete_key(key)
    if late:
        warnings.warn(f"flopsight: rank(s) {', '.join(late)} started a profile after rank 0 had given up on them "
                      "(rank 0 took them for ranks that do not profile): profile every rank in step (a barrier before "
                      "the profile), or on rank 0 alone", UserWarning, stacklevel=4)


def _started(store, key: str, n: int, since: float, timeout: float) -> bool:
    """Whether the rank counting its profiles under ``key`` has started its ``n``-th, waiting
    for it from monotonic time ``since`` as long as its count allows (see the module docstring)."""
    count = store.add(key, 0)
    if count >= n:
        return True
    wait = FIRST_WAIT if n == 1 else PEER_WAIT if count == n - 1 else 0.0
    give_up = since + min(wait, timeout)
    while time.monotonic() < give_up:
        time.sleep(0.002)
        if store.add(key, 0) >= n:
            return True
    return False


def _arrived(store, key: str, seconds: float) -> bool:
    """Whether ``key`` is in ``store``, waiting up to ``seconds`` for it: the store answers
    as soon as it is set, so rank 0 reads each result the moment it arrives."""
    if store.check([key]):
        return True
    if seconds <= 0:
        return False
    try:
        store.wait([key], datetime.timedelta(seconds=seconds))
    except RuntimeError:  # DistStoreError: not set within ``seconds``
        return False
    return True
