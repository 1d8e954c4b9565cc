"""What one capture session is asked for (:class:`CaptureOptions`): the front-ends' options as
the capture reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from torch import nn

from .modules import ModuleInfo

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
    #: which path counts: "auto", "native" or "python" (see :mod:`.native`)
    backend: str = "python"
    #: also record kernels per module with torch.profiler (see :mod:`.kernels`)
    kernels: bool = False
