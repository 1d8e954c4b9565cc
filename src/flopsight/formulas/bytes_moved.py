"""Bytes moved by one op: what it reads from its tensor arguments plus what it writes.

The roofline needs, besides an op's FLOPs, the bytes it moves between memory and the
chip. flopsight counts the ideal traffic of the op as called, from shapes alone (the same on
CPU, CUDA and meta; see ``docs/conventions/bytes.md``):

* **read**: every tensor argument (lists of tensors included), each element once: a
  dimension with stride 0 (``expand``, a broadcast bias) is read once, not per copy;
* **written**: every tensor the op returns, or, for an op that returns nothing and writes
  its arguments (``_foreach_add_``), the arguments it writes;
* **views** (ops returning an alias of an input without writing it: ``view``, ``t``,
  ``transpose``, ``expand``, ``select`` ...) move nothing, and uninitialised creation
  (``empty*``) writes nothing;
* families that touch only part of an argument: gathers (``embedding``, ``index_select``,
  ``gather``, ``index``) read the rows they gather (their output's size) and the indices;
  ``copy_`` reads its source and writes its destination; ``fill_``/``zero_`` only write.

>>> import torch
>>> moved = io_bytes_of(torch.ops.aten.addmm.default)
>>> bias, x, w = torch.ones(8), torch.ones(3, 4), torch.ones(8, 4).t()
>>> moved(torch.ones(3, 8), (bias, x, w), {})   # (8 + 12 + 32) read + 24 written, 4 bytes each
304
>>> io_bytes_of(torch.ops.aten.t.default) is None   # a view
True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .binding import Binder

__all__ = ["io_bytes_of", "tensor_bytes_read", "tensors_bytes"]

_Tensor = torch.Tensor
_STRIDED = torch.strided


def tensor_bytes_read(t: _Tensor) -> int:
    """Bytes of ``t``'s distinct elements: a stride-0 (broadcast) dimension counts once.

    >>> tensor_bytes_read(torch.ones(4).expand(3, 4)), tensor_bytes_read(torch.ones(3, 4))
    (16, 48)
    """
    if t.layout is not _STRIDED or t.is_nested:
        return _stored_bytes(t)
    if t.is_contiguous():  # most tensors: every element is distinct (one C call)
        return t.nbytes
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        if stride:
            n *= size
    return int(n) * t.element_size()


def _stored_bytes(t: _Tensor) -> int:
    """A sparse tensor's stored values and indices; a nested (jagged) one's packed values
    (read without dispatching: its sizes are symbolic)."""
    try:
        if t.is_nested:  # jagged: its packed values; the older strided kind: its buffer
            values = getattr(t, "_values", None)
            return values.nbytes if isinstance(values, _Tensor) else t.untyped_storage().nbytes()
        parts = [t._values(), t._indices()] if t.layout is torch.sparse_coo else [t.values()]
    except Exception:
        return 0
    return sum(p.nbytes for p in parts if isinstance(p, _Tensor))


def tensors_bytes(value: Any) -> int:
    """:func:`tensor_bytes_read` summed over a tensor or a (nested) list or tuple of them."""
    if isinstance(value, _Tensor):
        return tensor_bytes_read(value)
    if isinstance(value, (list, tuple)):
        return sum(tensors_bytes(v) for v in value)
    return 0


def _default(out, args, kwargs) -> int:
    # runs for most ops while counting: tensors (the common case) inline, lists recursed
    total = tensor_bytes_read(out) if isinstance(out, _Tensor) else tensors_bytes(out)
    for a in args:
        if isinstance(a, _Tensor):
            total += tensor_bytes_read(a)
        elif isinstance(a, (list, tuple)):
            total += tensors_bytes(a)
    if kwargs:
        for a in kwargs.values():
            total += tensors_bytes(a)
    return total


def _writes_arguments(written: tuple[str, ...], bind: Callable) -> Callable:
    """An op that returns nothing: it reads all its arguments and writes those named ``written``."""
    def moved(out, args, kwargs) -> int:
        bound = bind(args, kwargs)
        return _default(out, args, kwargs) + sum(tensors_bytes(bound.get(name)) for name in written)
    return moved


def _write_only(out, args, kwargs) -> int:
    return tensors_bytes(out)


def _nothing(out, args, kwargs) -> int:
    return 0


#: ops that read no argument: they only write their result (``fill_``, creation of values)
_WRITE_ONLY = frozenset(
    "fill_ zero_ zeros zeros_like ones ones_like full full_like new_zeros new_ones new_full".split())
#: uninitialised creation: nothing read, nothing written
_NOTHING = frozenset("empty empty_like empty_strided new_empty new_empty_strided".split())


# -- families that read part of an argument: ``fn(out, **arguments)``, by name like a formula ----
def _gather(out, /, index=None, **_) -> int:
    """Reads the indices (a tensor or a list of them) and as many source elements as it writes."""
    return 2 * tensors_bytes(out) + tensors_bytes(index)


def _gather_indices(out, /, indices=None, **_) -> int:  # the same, where the schema says ``indices``
    return _gather(out, indices)


def _copy(out, /, src=None, **_) -> int:  # copy_(self, src): reads src, writes self
    return tensors_bytes(src) + tensors_bytes(out)


#: op packet name -> how it moves bytes, for the families the default misjudges
_FAMILIES: dict[str, Callable] = {
    "embedding": _gather_indices,
    "index_select": _gather,
    "gather": _gather,
    "take": _gather,
    "index": _gather_indices,  # index(self, indices): a list of index tensors
    "_unsafe_index": _gather_indices,
    "copy_": _copy,
}


def _by_name(family: Callable, binder: Binder) -> Callable:
    """``family`` as ``moved(out, args, kwargs)``: the call's arguments bound to the schema's
    names by ``binder`` (built once per overload)."""
    bind = binder.bind

    def moved(out, args, kwargs) -> int:
        return family(out, **bind(args, kwargs))
    return moved


def io_bytes_of(op) -> Callable | None:
    """``moved(out, args, kwargs) -> bytes`` for an op overload, or None for an op that moves
    nothing (a view). Decided once per overload, from its schema."""
    schema = op._schema
    returns = schema.returns
    if returns and all(r.alias_info is not None and not r.alias_info.is_write for r in returns):
        return None  # returns views of its inputs
    name = op.overloadpacket.__name__
    if name in _WRITE_ONLY:
        return _write_only
    if name in _NOTHING:
        return _nothing
    family = _FAMILIES.get(name)
    if family is not None:
        return _by_name(family, Binder.of_op(op))
    if not returns:
        binder = Binder.of_op(op)
        # out= buffers are left out: the binder drops them, and the default counts them once
        written = tuple(a.name for a in schema.arguments
                        if a.alias_info is not None and a.alias_info.is_write and a.name not in binder.drop)
        if written:
            return _writes_arguments(written, binder.bind)
    return _default
