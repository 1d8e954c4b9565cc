"""What one capture session is asked for (:class:`CaptureOptions`): what the front-ends'
options (:class:`flopsight.ProfileOptions`) say of a capture, and what differs per session (the
modules, whether it counts, a timeline, where ops outside the model go).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from ..model.modules import ModuleInfo

__all__ = ["CaptureOptions"]


def _never(module: nn.Module) -> bool:
    return False


@dataclass(frozen=True)
class CaptureOptions:
    """What one session is asked to capture.

    ``infos``: the model's modules (:func:`~.modules.describe`); ``count``: count ops (else
    module spans only, for a timing pass); ``memory``: track memory too; ``timeline``:
    resolve the timeline (a counting pass timed by a separate pass skips it, unless it has
    collectives to hand over); ``outside_to_root``: ops outside every module call are the
    root's (a profiled call of the model's own method) rather than not the model's (user
    code around it); ``optimizer``: only this optimizer's ``step()`` is the step phase
    (default: any); ``ignore``: modules whose calls are not tracked (their costs go to the
    parent).
    """

    infos: dict[str, ModuleInfo]
    count: bool = True
    memory: bool = False
    timeline: bool = True
    outside_to_root: bool = False
    optimizer: Any = None
    ignore: Callable[[nn.Module], bool] = _never
    #: which path counts: "auto", "native" or "python" (see :mod:`.backends`), as the public
    #: option resolves it when none is given
    backend: str = "auto"
    #: also record kernels per module with torch.profiler (see :mod:`.kernels`)
    kernels: bool = False
    #: a timing session (``count=False``) times the operators too, where the native recorder
    #: can stamp them (:mod:`..backends.native.stamps`)
    op_times: bool = False

    #: the fields a front-end's options give (the rest differ per session)
    FROM_OPTIONS = ("memory", "optimizer", "ignore", "backend", "kernels")

    @classmethod
    def of(cls, options: Any, infos: dict[str, ModuleInfo], **session: Any) -> CaptureOptions:
        """The capture of ``infos`` that ``options`` (a :class:`flopsight.ProfileOptions`) asks
        for, with the session's own fields (``count``, ``timeline``, ``outside_to_root``, and
        ``kernels`` where a pass decides it)."""
        given = {name: getattr(options, name) for name in cls.FROM_OPTIONS}
        return cls(infos, **{**given, **session})
