"""TorchScript models (``torch.jit.script`` / ``torch.jit.trace``): what capture can see.

The TorchScript interpreter runs aten ops through the dispatcher, so the counting mode
sees every op and the totals are exact. Module hooks are another matter: a ScriptModule
refuses hooks of its own (``register_forward_pre_hook`` raises), and its submodules run
inside the interpreter, not through ``nn.Module.__call__``, so the global module hooks
fire for the scripted module that Python called and for none below it. Every op of a
scripted model is therefore attributed to it (the innermost module whose hooks fired);
its submodules are listed, with their parameters, as never called.

>>> import torch, warnings
>>> with warnings.catch_warnings():  # torch 2.13 deprecates TorchScript
...     warnings.simplefilter("ignore", DeprecationWarning)
...     scripted = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(4, 2)))
>>> is_scripted(scripted), type_name(scripted), type_name(torch.nn.ReLU())
(True, 'Sequential', 'ReLU')
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["is_scripted", "type_name"]


def is_scripted(module: nn.Module) -> bool:
    """True for a scripted or traced module (and each of its submodules)."""
    return isinstance(module, torch.jit.ScriptModule)


def type_name(module: nn.Module) -> str:
    """The class name to report: the original class of a scripted or traced module
    (``Linear``, not ``RecursiveScriptModule`` or ``TracedModule``)."""
    if is_scripted(module):
        name = getattr(module, "original_name", None)
        if isinstance(name, str) and name:
            return name
    return type(module).__name__
