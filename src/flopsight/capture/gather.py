"""Many ranks, one result: every rank's profile gathered on rank 0, without a collective.

Under ``torch.distributed`` each rank publishes its result (as the JSON it saves) in the
default process group's key-value store and rank 0 reads them back, waiting at most
``timeout`` seconds: a rank that raised or never reached the profiled step is missing
(``None``), and nothing can hang on it. Profiles are matched across ranks by their order:
the n-th profile a rank gathers is the n-th of every other rank (the same program runs
on every rank).

>>> gather_ranks(object(), timeout=1.0)   # outside torch.distributed: nothing to gather
[]
"""

from __future__ import annotations

import datetime
import json
import time
import warnings
from typing import Any

import torch

from .._torch_private import default_store

__all__ = ["gather_ranks", "check_gather_timeout", "DEFAULT_GATHER_TIMEOUT"]

#: seconds rank 0 waits for the other ranks' results
DEFAULT_GATHER_TIMEOUT = 60.0

_count = 0  # profiles gathered by this process so far: the key of the next one
_WARN_AFTER = 5.0  # seconds of waiting before rank 0 says what it is waiting for


def check_gather_timeout(timeout: Any) -> float:
    """``timeout`` as seconds (a positive number), or an error naming ``gather_timeout``."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"gather_timeout: expected a positive number of seconds, got {timeout!r}")
    return float(timeout)


def gather_ranks(result, timeout: float = DEFAULT_GATHER_TIMEOUT) -> list:
    """On rank 0: every rank's result (index = rank; ``None`` for a rank that did not send
    one within ``timeout`` seconds), ``result`` at index 0. On other ranks, and in one
    process: ``[]`` (the others only publish theirs)."""
    global _count
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return []
    store = default_store()
    if store is None:
        return []
    _count += 1
    prefix = f"flopsight/profile{_count}/rank"
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank != 0:
        store.set(f"{prefix}{rank}", json.dumps(result.to_dict()))
        return []
    from ..result.profile_result import ProfileResult

    results: list = [result] + [None] * (world - 1)
    started = time.monotonic()
    deadline = started + timeout
    warn_at = started + min(_WARN_AFTER, timeout)
    for r in range(1, world):
        key = f"{prefix}{r}"
        while not _arrived(store, key, min(warn_at, deadline) - time.monotonic()):
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
            results[r] = ProfileResult.from_dict(json.loads(store.get(key)))
            store.delete_key(key)
    return results


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
