"""Building what the command line names: the model, on the device and in the dtype the
options ask for, and the inputs it is called with.

:func:`pick_device` decides where (the meta device when the parameters would not fit in
memory, counted on meta before anything is allocated); :func:`build` builds the model and
its inputs: a zoo or config model with the inputs of its kind, a factory's model with its
own inputs or, when it returned none, inputs made from ``--input-shape`` or its config.
An option a model cannot use raises :class:`~flopsight.cli.models.UsageError`.

>>> import argparse
>>> from flopsight.cli.models import resolve
>>> args = argparse.Namespace(device="meta", dtype=None, batch_size=2, seq_len=8, input_shape=None, mode="forward")
>>> model, call_args, call_kwargs = build(args, resolve("resnet-18"), "meta", None, Progress([]))
>>> next(model.parameters()).device.type, tuple(call_args[0].shape)
('meta', (2, 3, 224, 224))
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

import torch

from ..capture.model.modules import walk
from ..capture.model.recursion import room_for
from ..renderers.numbers import bytes_to_string, params_to_string
from . import zoo
from .meta import prepare_for_meta
from .models import (
    Target,
    UsageError,
    available_memory,
    call_factory,
    choose_device,
    default_dtype,
    split_factory_output,
)
from .progress import Progress

__all__ = ["DTYPES", "pick_device", "build", "build_factory", "default_call", "check_input_shape",
           "explain_input_shape"]

#: what --dtype may name
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_device(args: argparse.Namespace, target: Target, progress: Progress) -> tuple[str, Any]:
    """The device to build on, and the model already built on meta when that is the one
    (counting the parameters on meta is how the memory need is known before building)."""
    if args.device is not None:
        return args.device, None
    if target.kind == "factory":  # unknown until called: built where the factory puts it
        return "cpu", None
    dtype = _dtype(args)
    with torch.device("meta"), default_dtype(dtype):
        on_meta = target.build_model()
    params = zoo.param_count(on_meta)
    available = available_memory()
    device, need = choose_device(params, dtype, args.mode, available)
    if device != "meta" or available is None:  # (meta only where the memory available is known)
        return device, None
    what = "weights, gradients and AdamW state" if args.mode == "train" else "weights"
    if args.mode == "generate":
        raise UsageError("--mode", f"{target.label}'s {params_to_string(params)} parameters need about "
                                   f"{bytes_to_string(need)} of {_dtype_name(args)} {what}, more than the "
                                   f"{bytes_to_string(available)} available, and generate() cannot run on the meta "
                                   "device; use --mode forward or train, or a smaller model")
    progress.note(f"{target.label}'s {params_to_string(params)} parameters need about {bytes_to_string(need)} of "
                    f"{_dtype_name(args)} {what}, more than the {bytes_to_string(available)} of memory available: "
                    "profiling on the meta device (exact counts; latencies are not the hardware's; "
                    "--device cpu to run it anyway)")
    return "meta", on_meta


def _dtype(args: argparse.Namespace) -> torch.dtype:
    return DTYPES[_dtype_name(args)]


def _dtype_name(args: argparse.Namespace) -> str:
    return args.dtype or "float32"


def _given(args: argparse.Namespace) -> dict[str, Any]:
    """The options a factory may take, as the user set them (its defaults otherwise)."""
    given = {"batch_size": args.batch_size, "seq_len": args.seq_len, "input_shape": args.input_shape,
             "dtype": DTYPES[args.dtype] if args.dtype else None, "device": args.device}
    return {k: v for k, v in given.items() if v is not None}


def _moved(value: Any, device: str | None, dtype: torch.dtype | None) -> Any:
    """``value``'s tensors on ``device``, floating ones in ``dtype`` (None: left as they are)."""
    if isinstance(value, torch.Tensor):
        value = value.to(device) if device else value
        return value.to(dtype) if dtype is not None and value.is_floating_point() else value
    if isinstance(value, (list, tuple)):
        return type(value)(_moved(v, device, dtype) for v in value)
    if isinstance(value, dict):
        return {k: _moved(v, device, dtype) for k, v in value.items()}
    return value


def build_factory(args: argparse.Namespace, target: Target,
                  progress: Progress) -> tuple[torch.nn.Module, tuple[tuple, dict] | None]:
    """Call the factory (on ``--device``, in ``--dtype`` when given) and split what it returns."""
    given = _given(args)
    place = torch.device(args.device) if args.device else contextlib.nullcontext()
    if target.factory is None:  # (resolve sets it on every factory target)
        raise ValueError(f"{target.label}: not a factory")
    with place, default_dtype(given.get("dtype")):
        out, unused = call_factory(target.factory, given)
    model, call = split_factory_output(out)
    dtype = given.get("dtype")
    if args.device or dtype is not None:
        model = model.to(device=args.device, dtype=dtype) if dtype is not None else model.to(args.device)
        call = _moved(call, args.device, dtype) if call is not None else None
    ignored = [k for k in unused if k in ("batch_size", "seq_len", "input_shape") and call is not None]
    if ignored:
        progress.note(f"the factory's own inputs were used; it takes no {', '.join(ignored)} parameter, "
                        f"so {', '.join('--' + k.replace('_', '-') for k in ignored)} did not apply")
    return model, call


def default_call(args: argparse.Namespace, kind: str, config: Any, device: str, seq_len: int,
                 dtype: torch.dtype) -> tuple[tuple, dict]:
    """The inputs a model of ``kind`` is called with, from the command line's options."""
    specs = zoo.input_specs(kind, config, batch_size=args.batch_size or 1, seq_len=seq_len,
                            input_shape=args.input_shape, generate=args.mode == "generate")
    return zoo.make_inputs(specs, device=device, dtype=dtype)


def _sizes(shape: tuple[int, ...]) -> str:
    return ",".join(map(str, shape))


def _batch_left_in(args: argparse.Namespace, shape: tuple[int, ...]) -> str:
    """The error for an ``--input-shape`` that begins with the batch size."""
    more = f" --batch-size {shape[0]}" if args.batch_size is None and shape[0] != 1 else ""
    return (f"one sample's shape, without the batch dimension: got {_sizes(shape)}, which begins with a batch of "
            f"{shape[0]}; use --input-shape {_sizes(shape[1:])}{more}")


def check_input_shape(args: argparse.Namespace, target: Target) -> None:
    """Before building, where the model's inputs are known (a zoo or config model that takes
    images): ``--input-shape`` must have one image's sizes, the batch left out."""
    if args.input_shape is None or target.kind == "factory" or target.input_kind not in ("image", "tensor",
                                                                                        "text+image"):
        return
    expected = zoo.image_shape(target.config)  # no config (a plain-torch zoo model): 3x224x224
    given = args.input_shape
    if len(given) == len(expected) + 1:
        raise UsageError("--input-shape", _batch_left_in(args, given))
    if len(given) != len(expected):
        raise UsageError("--input-shape", f"{target.label} takes one image's {len(expected)} sizes, (channels, height, "
                                          f"width) such as {_sizes(expected)}, got {_sizes(given)}")


def explain_input_shape(args: argparse.Namespace, model: torch.nn.Module, call_args: tuple) -> None:
    """The model failed on inputs made from ``--input-shape``: raise :class:`UsageError` when
    the shape begins with the batch size and the model runs on the shape without it (one plain
    call, no autograd, training flags put back), so the error says what to change."""
    shape = args.input_shape
    batch = args.batch_size or 1
    if shape is None or len(shape) < 2 or shape[0] != batch or len(call_args) != 1:
        return
    given = call_args[0]
    if not isinstance(given, torch.Tensor) or tuple(given.shape) != (batch, *shape):
        return  # not the input --input-shape made (a factory's own, a config model's)
    trial = torch.ones((batch, *shape[1:]), dtype=given.dtype, device=given.device)
    flags = [(m, m.training) for m in walk(model)]
    try:
        with torch.no_grad():
            model.eval()(trial)
    except Exception:
        return  # the batch was not what failed: the model's own error stands
    finally:
        for m, flag in flags:
            m.training = flag
    raise UsageError("--input-shape", _batch_left_in(args, shape))


def build(args: argparse.Namespace, target: Target, device: str, on_meta: Any,
          progress: Progress) -> tuple[torch.nn.Module, tuple, dict]:
    """The model and the (args, kwargs) it is called with."""
    check_input_shape(args, target)
    if target.kind == "factory":
        model, call = build_factory(args, target, progress)
        if call is None:
            with room_for(model):  # model.parameters() recurses in torch: room for a deep model
                call = _inputs_for_bare_model(args, model)
    else:
        kind = target.input_kind
        if kind is None:  # (None for a factory only)
            raise ValueError(f"{target.label}: a factory's inputs are its own")
        if on_meta is not None:
            model = on_meta
        else:
            with torch.device(device), default_dtype(_dtype(args)):
                model = target.build_model()
        call = default_call(args, kind, target.config, device, args.seq_len or target.default_seq_len,
                            _dtype(args))  # --mode train adds labels as it runs (run.with_labels)
    if device == "meta":
        with room_for(model):
            prepare_for_meta(model)
    if args.mode == "generate" and not callable(getattr(model, "generate", None)):
        raise UsageError("--mode", f"{type(model).__name__} has no generate(); use --mode forward or train")
    return model, call[0], call[1]


def _inputs_for_bare_model(args: argparse.Namespace, model: torch.nn.Module) -> tuple[tuple, dict]:
    """Inputs for a factory's model that came alone: ``--input-shape``, else what its
    transformers config says it takes."""
    first = next((p for p in model.parameters() if p.is_floating_point()), torch.empty(0))
    where, dtype = args.device or str(first.device), first.dtype  # where and in what the factory made it
    if args.input_shape is not None:
        return default_call(args, "tensor", None, where, 1, dtype)
    config = getattr(model, "config", None)
    try:
        kind = zoo.input_kind(config) if config is not None else None
    except ValueError:
        kind = None
    if kind is None:
        raise UsageError("--input-shape", "the factory returned a model without inputs; give one sample's shape "
                                          "(e.g. --input-shape 3,224,224) or return (model, inputs)")
    return default_call(args, kind, config, where, args.seq_len or 128, dtype)
