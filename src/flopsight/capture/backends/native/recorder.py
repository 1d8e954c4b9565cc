"""The native recorder of this process (:data:`RECORDER`): the one object that owns the loaded
extension (``recorder.cpp``, compiled by :mod:`.build`), how many sessions use it (its C++
callbacks and module hooks are process-wide: one session at a time), whether it counts as the
Python path does (the self-check's verdict, kept beside the build: :mod:`.self_check`), and what
the process has learnt from it (operator and signature tables, kept across sessions).

>>> RECORDER.busy
False
"""

from __future__ import annotations

import enum
import sys
import threading
import time
import weakref
from typing import Any, Final

from ...._process import PROCESS
from ...._torch_private import dtensor_class, fake_mode_now
from .build import build

__all__ = ["RECORDER", "Recorder", "Tables", "UNCHECKED", "host_offset", "see_through_dtensors"]


class _Unchecked(enum.Enum):
    """The type of :data:`UNCHECKED` (one member: a type checker narrows ``is UNCHECKED``)."""

    UNCHECKED = "unchecked"


#: the calibration of a stamp's cost (Recorder.stamp_cost): ops per run, runs of each kind (the
#: least kept); 500 ops vary by about 7% from process to process here
STAMP_COST_OPS, STAMP_COST_TRIES = 500, 3

#: the verdict of a recorder not checked yet in this process
UNCHECKED: Final = _Unchecked.UNCHECKED


class Tables:
    """What this process has learnt from the recorder, kept across sessions: its operators
    (id -> (name, overload)), the operator names it was configured with, and per registry
    (formulas differ) each operator's entry and each signature's cost (``.native.ops`` fills them)."""

    def __init__(self) -> None:
        #: (value ops, costed ops, unit ops, claimed ops) the recorder was configured with
        self.names: tuple | None = None
        self.ops: list[tuple[str, str]] = []
        self.registries: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        #: torch.dtype by ScalarType index (signatures name dtypes by index)
        self.dtypes: list = []
        #: registry -> (its version, the units the recorder counts whole)
        self.aten_units: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        #: the ids of the op overloads a session claimed -> their sorted names
        self.claimed: dict[tuple[int, ...], tuple[str, ...]] = {}


class Recorder:
    """See the module docstring. ``load`` builds (once per build folder) and loads the
    extension; ``acquire``/``release`` count the sessions using it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # loading
        #: a native session's check that none runs, and its start, as one step
        self.starting = threading.Lock()
        #: charging records: the tables it reads and fills are shared by every session (a
        #: stopped one may charge on another thread while the next one runs)
        self.charging = threading.RLock()
        self._module: Any = None
        self._error: str | None = None
        self.reset()

    def reset(self) -> None:
        """As a fresh process has it, but for the extension: a loaded library stays loaded."""
        self.in_use = 0
        self._stamp_cost: float | None = None
        #: the self-check's verdict for this process: None agrees, else what differed (.self_check)
        self.verdict: str | None | _Unchecked = UNCHECKED
        self.tables = Tables()
        #: the stopped sessions' counting sources that hold records not charged yet
        self.uncharged: weakref.WeakSet = weakref.WeakSet()
        if self._module is None:
            self._error = None

    # -- the extension -------------------------------------------------------------------
    def load(self, quiet: bool = False) -> Any:
        """The extension, built on first use; None (after one line on stderr, unless
        ``quiet``) when it cannot be built here. The outcome is kept for the process."""
        with self._lock:
            if self._module is not None or self._error is not None:
                return self._module
            try:
                self._module = build(quiet)
            except BaseException as e:  # no compiler, no ninja, a failed build: the Python path counts
                if isinstance(e, KeyboardInterrupt):
                    raise
                reason = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
                self._error = reason
                if not quiet:
                    print(f"flopsight: the native backend is not available ({reason[:600]}); "
                          "counting with the Python path", file=sys.stderr)
            return self._module

    @property
    def loaded(self) -> Any:
        """The extension if this process has loaded it already (never builds), else None."""
        return self._module

    @property
    def failure(self) -> str | None:
        """Why the extension is not available (None: it is, or no build was tried)."""
        return self._error

    def stamp_cost(self) -> float:
        """Seconds one op's stamps cost it in a timed pass (:mod:`.stamps`), measured once per
        process on the loaded extension (recorder.cpp's ``stamp_cost``: about 7 ms), while no
        session runs."""
        if self._stamp_cost is None:
            self._stamp_cost = self._module.stamp_cost(STAMP_COST_OPS, STAMP_COST_TRIES)
        return self._stamp_cost

    # -- sessions ------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        """Whether a native session (counting or timing) runs: the recorder serves one at a time."""
        return self.in_use > 0

    def acquire(self) -> None:
        self.in_use += 1

    def release(self) -> None:
        self.in_use -= 1


def host_offset(recorder: Any) -> float:
    """Seconds to add to a recorder stamp (ns * 1e-9) to put it on the host clock."""
    return time.perf_counter() - recorder.clock_ns() * 1e-9


def see_through_dtensors(recorder: Any) -> None:
    """Before a start: the ops on DTensors are not recorded, the ops DTensor runs on this
    rank's shards are, as the dispatch mode sees them (recorder.cpp's "tensor parallelism")."""
    dtensor = dtensor_class()
    recorder.set_transparent(dtensor, dtensor is not None and fake_mode_now() is None)


#: the process's native recorder
RECORDER: Recorder = PROCESS.own("recorder", Recorder)
