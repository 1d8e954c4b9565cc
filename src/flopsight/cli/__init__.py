"""The ``flopsight`` command: :mod:`.main` parses and dispatches; ``profile`` resolves a model
(:mod:`.models`), builds it (:mod:`.build`, :mod:`.meta`) and runs it (:mod:`.run`);
``diff`` compares two saved profiles (:mod:`.diff`); the built-in models are in :mod:`.zoo`."""

from .main import main

__all__ = ["main"]


def __getattr__(name: str):
    """A submodule, imported the first time it is named (see :mod:`flopsight._lazy`)."""
    from .._lazy import submodule

    return submodule(__name__, name)
