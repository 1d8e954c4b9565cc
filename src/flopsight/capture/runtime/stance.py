"""torch.compile's ``force_eager`` stance while any counting session runs (:data:`EAGER_STANCE`).

Under a dispatch mode dynamo compiles nothing, and eager flex_attention's
``torch.compile(fullgraph=True)`` raises for compiling nothing unless the stance is not the
default; a compiled region inside a natively counted span would run kernels no aten op
records. So while a counting session runs, code that can compile runs eagerly. The stance is
set only where something may compile (:func:`~flopsight._torch_private.may_compile`): where
nothing has imported dynamo, nothing can compile, and a profile does not import it (a second or
more of the first profile in a process).

Sessions may stop in any order (two attached profilers sharing a step), so the stance is
counted, not nested: it is set by the first start that finds compilation possible and restored
by the last stop. The stance is the process's, and profilers on two threads may start at once:
counted under a lock.

>>> EAGER_STANCE.acquire(); EAGER_STANCE.release()
"""

from __future__ import annotations

import threading

from ..._process import PROCESS
from ..._torch_private import force_eager, may_compile

__all__ = ["EAGER_STANCE", "EagerStance"]


class EagerStance:
    """See the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self._users = 0
        self._stance = None  # the stance's context manager while it is set

    def acquire(self) -> None:
        with self._lock:
            self._users += 1
            if self._stance is None and may_compile():
                self._stance = force_eager()

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._stance is not None:
                stance, self._stance = self._stance, None
                stance.__exit__(None, None, None)


#: the stance every counting source holds while it runs
EAGER_STANCE: EagerStance = PROCESS.own("stance", EagerStance)
