"""JSON: everything a result holds, in the versioned schema of ``docs/schema.md``.

Keys keep their order and floats their ``repr``, so save, load, save is byte-identical.

>>> import json, torch, flopsight
>>> result = flopsight.profile(torch.nn.Linear(4, 2), torch.ones(1, 4), clock=flopsight.FakeClock())
>>> json.loads(render_json(result))["schema_version"] == flopsight.SCHEMA_VERSION
True
"""

from __future__ import annotations

import json

__all__ = ["render_json"]


def render_json(result, *, indent: int | None = 1) -> str:
    """``result.to_dict()`` as JSON text (ends with a newline)."""
    return json.dumps(result.to_dict(), indent=indent) + "\n"
