"""Registered ops that some supported torch does not define, and why that is expected.

flopsight's formula modules name their ops (``aten::cholesky``), and an op the running torch
lacks is skipped at registration (:meth:`Registry.builtins_loading
<flopsight.formulas.registry.Registry.builtins_loading>`). So that a misspelt name is never
skipped silently, every name that can be absent is listed here with the releases that have
it; ``torch_attn`` ops exist once ``torch.nn.attention.varlen`` (2.11 and newer) is imported.
The suite checks on every tested torch that the names skipped are exactly those this table
expects (``tests/test_torch_versions.py``).

``since`` is the first release that defines the op and ``until`` the first that no longer
does (None: no bound). Where a bound lies between two tested releases it is the later one
(the op is known to exist, or be gone, there).

>>> expected_absent("2.15.0") >= {"aten::cholesky"}
True
>>> "aten::cholesky" in expected_absent("2.13.0")
False
"""

from __future__ import annotations

import importlib.util
from typing import NamedTuple

__all__ = ["Availability", "ABSENT_ON_PURPOSE", "expected_absent", "release"]


class Availability(NamedTuple):
    since: str | None
    until: str | None
    why: str
    #: the module whose import defines the op (registered when it is imported), if any
    module: str | None = None


ABSENT_ON_PURPOSE: dict[str, Availability] = {
    "aten::cholesky": Availability(None, "2.15", "torch.cholesky, deprecated since 1.9, was removed in 2.15"),
    "aten::_flash_attention_forward_no_dropout_inplace": Availability(
        "2.13", None, "the in-place flash attention kernel is new in 2.12 or 2.13 (2.11 lacks it)"),
    "aten::_upsample_lanczos2d_aa": Availability("2.13", None, "Lanczos antialiased resize is new after 2.11"),
    "aten::_upsample_lanczos2d_aa_backward": Availability("2.13", None, "its backward, with it"),
    "aten::_foreach_mm": Availability("2.13", None, "foreach matmul is new after 2.11"),
    "aten::_foreach_clone": Availability("2.13", None, "foreach clone is new after 2.11"),
    "_c10d_functional::isend": Availability("2.13", None, "functional point-to-point ops are new after 2.11"),
    "_c10d_functional::irecv": Availability("2.13", None, "functional point-to-point ops are new after 2.11"),
    "_c10d_functional::batch_p2p_ops": Availability("2.13", None, "functional point-to-point ops are new after 2.11"),
    "aten::_foreach_powsum": Availability("2.11", None, "foreach sum of powers is new after 2.9"),
    "aten::_scaled_mm_v2": Availability("2.11", None, "the second scaled-matmul schema is new after 2.9"),
    "aten::_scaled_grouped_mm_v2": Availability(
        "2.11", None, "the second scaled grouped-matmul schema is new after 2.9"),
    "torch_attn::_varlen_attn_out": Availability(
        "2.13", None, "torch.nn.attention.varlen's out= variant is new after 2.11 (2.11 has _varlen_attn alone)",
        module="torch.nn.attention.varlen"),
}


def release(version: str) -> tuple[int, int]:
    """(major, minor) of a torch version string.

    >>> release("2.11.0+cu130"), release("2.15.0a0+git1234")
    ((2, 11), (2, 15))
    """
    major, minor = version.split("+")[0].split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()))


def expected_absent(version: str) -> set[str]:
    """The names of :data:`ABSENT_ON_PURPOSE` that torch ``version`` does not define, of those
    it could register: an op defined by a module the installed torch does not have
    (``torch.nn.attention.varlen`` before 2.11) is never registered, so never skipped."""
    v = release(version)
    return {name for name, a in ABSENT_ON_PURPOSE.items()
            if ((a.since is not None and v < release(a.since)) or (a.until is not None and v >= release(a.until)))
            and (a.module is None or importlib.util.find_spec(a.module) is not None)}
