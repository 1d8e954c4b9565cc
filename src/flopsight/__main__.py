"""``python -m flopsight`` (and the ``flopsight`` command): see :mod:`flopsight.cli`.

    python -m flopsight                                   # ResNet-18, batch 1, full report
    python -m flopsight profile llama-3-70b --seq-len 2048
    python -m flopsight list
    python -m flopsight diff a.json b.json --fail-on "flops>+1%"
"""

from __future__ import annotations

import sys

from .cli.main import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
