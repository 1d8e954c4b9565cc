"""Many ranks, one result: every rank's profile gathered on rank 0, without a collective.

Under ``torch.distributed`` each rank publishes its result (as the JSON it saves) in the
default process group's key-value store and rank 0 reads them back, waiting at most
``timeout`` seconds: a rank that never reached the profiled step is missing (``None``), and
nothing can hang on it. Profiles are matched across ranks by their order: the n-th profile a
rank gathers is the n-th of every other rank (the same program runs on every rank).

Each rank says when a profile starts (:func:`announce`, a count per rank in the store): rank 0
waits the whole ``timeout`` only for the ranks that started the profile it gathers, and about
:data:`UNANNOUNCED_WAIT` seconds for the others (profiling on rank 0 only, as DeepSpeed's docs
do, costs rank 0 no more). Profiles still match by order, so a program that profiles on every
rank should not also profile on rank 0 alone in between. A rank whose profiled call raised
sends what it knows of the failure (:func:`publish_failure`), so rank 0 does not wait for it
either; a rank whose result says its profiled span raised (in the model or in the code
around it: :func:`span_failure_text`) is noted as failed.

>>> gather_ranks(object(), timeout=1.0)   # outside torch.distributed: nothing to gather
([], {})
"""

from __future__ import annotations

import datetime
import json
import time
import warnings
from typing import Any

import torch

from ..._torch_private import default_store
from ..calls import failure_text

__all__ = ["gather_ranks", "announce", "publish_failure", "span_failure_text", "check_gather_timeout",
           "DEFAULT_GATHER_TIMEOUT", "UNANNOUNCED_WAIT"]

#: seconds rank 0 waits for the other ranks' results
DEFAULT_GATHER_TIMEOUT = 60.0

#: seconds rank 0 waits for a rank that has not said it profiles (its first profile may
#: start a little later than rank 0's)
UNANNOUNCED_WAIT = 2.0

_count = 0  # profiles gathered by this process so far: the key of the next one
_announces = 0  # profiles this process announced (see announce)
_ANNOUNCE = "flopsight/profiling/rank"
_WARN_AFTER = 5.0  # seconds of waiting before rank 0 says what it is waiting for


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


def announce() -> None:
    """Say that a profile starts on this rank (it will gather): rank 0 waits for the ranks
    that did. A count in the store, per rank: its n-th profile was announced when the count
    reached n."""
    global _announces
    found = _store_and_rank()
    if found is None:
        return
    store, rank, _ = found
    _announces += 1
    store.add(f"{_ANNOUNCE}{rank}", 1)


def _next_profile(store, rank: int) -> int:
    """The number of the profile this rank gathers now. One that gathers without having
    started here (a result built by hand) still counts as announced."""
    global _count, _announces
    _count += 1
    if _announces < _count:
        store.add(f"{_ANNOUNCE}{rank}", _count - _announces)
        _announces = _count
    return _count


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
        store.set(f"flopsight/profile{n}/rank{rank}", json.dumps({"failed": failure_text(exc)}))


def span_failure_text(exc: BaseException) -> str:
    """What a failed :class:`~flopsight.Profiler` span records: the module that raised
    (:func:`~flopsight.capture.calls.failure_text`), else the exception and its message, raised
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
        store.set(f"{prefix}{rank}", json.dumps(result.to_dict()))
        return [], {}
    from ...result.profile_result import ProfileResult

    results: list = [result] + [None] * (world - 1)
    notes: dict[int, str] = {}
    started = time.monotonic()
    deadline = started + timeout
    warn_at = started + min(_WARN_AFTER, timeout)
    for r in range(1, world):
        key = f"{prefix}{r}"
        # one round trip to the store when the result is there already (the usual case)
        there = store.check([key])
        if not there and not _started(store, f"{_ANNOUNCE}{r}", n, min(UNANNOUNCED_WAIT, deadline - time.monotonic())):
            notes[r] = "not profiling"
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
            data = json.loads(store.get(key))
            store.delete_key(key)
            if "failed" in data:
                notes[r] = f"failed: {data['failed']}"
                continue
            results[r] = ProfileResult.from_dict(data)
            if results[r].metadata.error:
                notes[r] = f"failed: {results[r].metadata.error}"
    return results, notes


def _started(store, key: str, n: int, seconds: float) -> bool:
    """Whether the rank counting its profiles under ``key`` has started its ``n``-th, waiting
    up to ``seconds`` for it (a rank's first profile may start a little after rank 0's)."""
    give_up = time.monotonic() + seconds
    while store.add(key, 0) < n:
        if time.monotonic() >= give_up:
            return False
        time.sleep(0.02)
    return True


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
