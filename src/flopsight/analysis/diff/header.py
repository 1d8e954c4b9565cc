"""What each side of a diff ran: the header a diff opens with, and what differs between the sides.

A diff of two profiles is a like-for-like change only when they ran the same model on the same
inputs, dtype and device, counted by the same backend with the same torch and flopsight. The
header puts both sides' run next to each other (:data:`RUN_FIELDS`, read from
``result.metadata``); :func:`differences` names the fields that differ, and :func:`same_model`
decides whether module paths may be compared at all.

>>> from flopsight.result.metadata import Metadata
>>> a = Metadata(model="Net", model_class="app.Net", dtype="float32", device="cpu",
...              inputs={"args": ["float32[2, 8]"], "kwargs": {"mask": None}})
>>> run_fields(a)["inputs"], run_fields(a)["model"]
('float32[2, 8], mask=None', 'Net')
>>> b = Metadata(model="Net", model_class="app.Net", dtype="float32", device="cpu",
...              inputs={"args": ["float32[4, 8]"], "kwargs": {"mask": None}})
>>> differences(a, b), same_model(a, b)
(['inputs'], True)
"""

from __future__ import annotations

from typing import Any

from ...result.metadata import Metadata

__all__ = ["RUN_FIELDS", "run_fields", "differences", "unrecorded", "same_model", "model_names"]

#: What the header shows of each side's run, in its order.
RUN_FIELDS = ("model", "inputs", "dtype", "device", "backend", "torch", "flopsight")


def _value_text(value: Any) -> str:
    """A recorded argument as it reads: tensors as ``float32[2, 3]``, lists in brackets."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_value_text(v)}" for k, v in value.items()) + "}"
    return str(value)


def _inputs_text(meta: Metadata) -> str:
    """The call's arguments in one line (``""``: not recorded, e.g. a span of no single call)."""
    if meta.inputs is None:
        return ""
    args = [_value_text(v) for v in meta.inputs["args"]]
    kwargs = [f"{k}={_value_text(v)}" for k, v in meta.inputs["kwargs"].items()]
    return ", ".join(args + kwargs) or "(none)"


def run_fields(meta: Metadata) -> dict[str, str]:
    """One side's run, field by field of :data:`RUN_FIELDS` (``""`` where the file does not record it)."""
    dtype = meta.dtype + (f", autocast {meta.autocast_dtype}" if meta.dtype and meta.autocast_dtype else "")
    device = meta.device + (f" ({meta.device_name})" if meta.device_name else "")
    return {"model": meta.model, "inputs": _inputs_text(meta), "dtype": dtype, "device": device,
            "backend": meta.backend, "torch": meta.torch_version, "flopsight": meta.flopsight_version}


def same_model(a: Metadata, b: Metadata) -> bool:
    """Whether both ran the same model class: by its module and name where both record it (two
    scripts' ``Net`` are different models), else by its name; a side that records neither
    (an older or hand-built result) is taken to be the same."""
    if a.model_class and b.model_class:
        return a.model_class == b.model_class
    return not a.model or not b.model or a.model == b.model


def model_names(a: Metadata, b: Metadata) -> tuple[str, str]:
    """The two models as the header names them: the class names, or with their modules where
    the names alone are the same."""
    if a.model == b.model and a.model_class and b.model_class and a.model_class != b.model_class:
        return a.model_class, b.model_class
    return a.model, b.model


def differences(a: Metadata, b: Metadata) -> list[str]:
    """The fields of :data:`RUN_FIELDS` in which the two runs differ, where both record them."""
    fa, fb = run_fields(a), run_fields(b)
    out = []
    for name in RUN_FIELDS:
        if name == "model":
            if not same_model(a, b):
                out.append(name)
        elif fa[name] and fb[name] and fa[name] != fb[name]:
            out.append(name)
    return out


def unrecorded(meta: Metadata) -> list[str]:
    """The fields of :data:`RUN_FIELDS` a result does not record (saved by an older flopsight,
    or built without a model call)."""
    fields = run_fields(meta)
    return [name for name in RUN_FIELDS if not fields[name]]
