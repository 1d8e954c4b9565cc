"""Test helpers: measure the cost of an arbitrary callable, on any device."""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import flopsight
from flopsight.formulas import REGISTRY, Cost, Registry
from flopsight.formulas.binding import Binder
from flopsight.result import ProfileResult
from flopsight.result.stats import Stats

#: torch 2.9's pipelining fails its first step on gloo with no profiler at all (a size mismatch
#: in its stages' first exchange, "8 vs 4"): the pipeline scenarios run from torch 2.10
PIPELINING_ON_GLOO = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 10)


class Tokens(torch.utils.data.Dataset):
    """A Trainer's data for :func:`tiny_gpt2`: 16 sequences of 16 token ids below 64, the same
    every run, each its own labels."""

    def __len__(self):
        return 16

    def __getitem__(self, i):
        ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def tiny_gpt2() -> nn.Module:
    """A 2-layer GPT-2, 32 wide, over 64 token ids (seed 0)."""
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32, bos_token_id=0,
                                     eos_token_id=0)
    return transformers.GPT2LMHeadModel(config)


@functools.cache
def gpt2_small() -> nn.Module:
    """GPT-2 small (the default GPT2Config, seed 0) in eval mode, built once per session:
    building it takes most of a test's time, and profiling leaves a model as it found it."""
    import transformers

    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval()


def run_profiled(fn: Callable, *args: Any, registry: Registry | None = None, **kwargs: Any) -> ProfileResult:
    """Profile ``fn(*args, **kwargs)`` with every op attributed to a bare root module.

    ``registry``: the formulas to count with (default: flopsight's global registry).
    """
    with flopsight.Profiler(registry=registry) as prof:  # no model: everything is the root's
        fn(*args, **kwargs)
    return prof.result


def measure(fn: Callable, *args: Any, registry: Registry | None = None, **kwargs: Any) -> Stats:
    """MACs/FLOPs of ``fn(*args, **kwargs)``."""
    return run_profiled(fn, *args, registry=registry, **kwargs).total.forward


def ops_of(
    fn: Callable, *args: Any, registry: Registry | None = None, **kwargs: Any
) -> dict[str, tuple[int, int, int]]:
    """op name -> (calls, macs, flops) for ``fn(*args, **kwargs)``."""
    result = run_profiled(fn, *args, registry=registry, **kwargs)
    return {name: (o.calls, o.macs, o.flops) for name, o in result.ops().items()}


def to_device(value: Any, device: str, _memo: dict | None = None) -> Any:
    """Tensors (also inside lists/tuples/dicts) moved to ``device``; modules *copied* there.

    A module is deep-copied before ``.to`` (which moves in place), so the caller's module
    stays where it was and can be measured again on another device. The modules of one
    call share a copy memo: a module passed twice (or with its submodule) is copied once.
    """
    memo = {} if _memo is None else _memo
    if isinstance(value, nn.Module):
        return copy.deepcopy(value, memo).to(device)
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        moved = [to_device(v, device, memo) for v in value]
        return type(value)(*moved) if hasattr(value, "_fields") else type(value)(moved)  # namedtuple or not
    if isinstance(value, dict):
        return {k: to_device(v, device, memo) for k, v in value.items()}
    return value


def measure_on(
    device: str, fn: Callable, *args: Any, registry: Registry | None = None, **kwargs: Any
) -> tuple[int, int]:
    """(macs, flops) of ``fn(*args, **kwargs)`` with every tensor/module argument moved to
    ``device``; ``fn`` itself too when it is a module (a copy: see :func:`to_device`)."""
    fn, args, kwargs = to_device((fn, args, kwargs), device)
    stats = measure(fn, *args, registry=registry, **kwargs)
    return stats.macs, stats.flops


def ops_on(
    device: str, fn: Callable, *args: Any, registry: Registry | None = None, **kwargs: Any
) -> dict[str, tuple[int, int, int]]:
    """:func:`ops_of` with every tensor/module argument (and a module ``fn``) moved to ``device``."""
    fn, args, kwargs = to_device((fn, args, kwargs), device)
    return ops_of(fn, *args, registry=registry, **kwargs)


def measure_cpu_meta(fn: Callable, *args: Any, registry: Registry | None = None, **kwargs: Any) -> tuple[int, int]:
    """(macs, flops) of ``fn(*args, **kwargs)`` on CPU, after checking that the meta device
    counts exactly the same (the device independence every formula promises)."""
    cpu = measure_on("cpu", fn, *args, registry=registry, **kwargs)
    meta = measure_on("meta", fn, *args, registry=registry, **kwargs)
    assert meta == cpu, f"meta counts {meta}, CPU {cpu}"
    return cpu


def formula_of(op: Any, registry: Registry | None = None) -> Callable[..., Cost]:
    """The formula registered for ``op`` (failing if there is none), to call directly, e.g.
    with meta tensors for kernels that run only on GPUs."""
    name, fn = (registry or REGISTRY).lookup(op)
    assert fn is not None, f"{name} is not registered"
    return fn


def meta(*shape: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """An empty tensor of ``shape`` on the meta device (shapes only: for formula calls)."""
    return torch.empty(*shape, dtype=dtype, device="meta")


class _Holder(nn.Module):
    """A root around one layer, so the layer is the module ``"layer"`` and the ``.sum()``
    of a training-step test stays at the root."""

    def __init__(self, layer: Callable):
        super().__init__()
        self.layer = layer if isinstance(layer, nn.Module) else _Call(layer)

    def forward(self, *args: Any) -> Any:
        return self.layer(*args)


class _Call(nn.Module):
    def __init__(self, fn: Callable):
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


def layer_backward(
    device: str, layer: Callable, *inputs: Any, registry: Registry | None = None
) -> tuple[tuple[int, int], dict[str, tuple[int, int, int]]]:
    """A user's training step ``layer(*inputs).sum().backward()`` on ``device``: the layer's
    backward ``(macs, flops)`` and its backward ops ``{name: (calls, macs, flops)}``
    (submodules included).

    ``layer`` (a module, copied there, or a function wrapped in one) keeps its parameters'
    ``requires_grad``; each tensor input is recreated on ``device`` as a leaf with the
    ``requires_grad`` it had.
    """
    model = _Holder(to_device(layer, device) if isinstance(layer, nn.Module) else layer)
    xs = [x.detach().to(device).requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x
          for x in inputs]  # fmt: skip
    with flopsight.Profiler(model, registry=registry) as prof:
        model(*xs).sum().backward()
    result = prof.result
    ops: dict[str, tuple[int, int, int]] = {}
    for stats in result.modules.values():  # the layer and its submodules
        if stats.name == "layer" or stats.name.startswith("layer."):
            for name, o in stats.ops.get("backward", {}).items():
                calls, macs, flops = ops.get(name, (0, 0, 0))
                ops[name] = (calls + o.calls, macs + o.macs, flops + o.flops)
    total = result.module("layer").backward
    return (total.macs, total.flops), ops


def with_metadata(result: ProfileResult, **changes: Any) -> ProfileResult:
    """``result`` with some metadata fields changed (what another run would have recorded)."""
    return dataclasses.replace(result, metadata=dataclasses.replace(result.metadata, **changes))


def schema_cost(op: Any, out: Any, *positional: Any, registry: Registry | None = None, **keywords: Any) -> Cost:
    """The cost of ``op(*positional, **keywords)`` returning ``out``, its arguments bound to the
    names of the first overload of ``op`` (a packet, or one overload) whose schema fits the call,
    as counting binds them (for kernels that run only on GPUs/MPS, or ops a mode sees at
    another level)."""
    registry = registry or REGISTRY
    overloads = [op] if isinstance(op, torch._ops.OpOverload) else [getattr(op, n) for n in op.overloads()]
    for overload in overloads:
        if Binder.of_op(overload).accepts(positional, keywords):
            return registry.resolve(overload).cost(out, positional, keywords)
    raise TypeError(f"no overload of {op} fits {len(positional)} positional arguments and {sorted(keywords)}")


def kernel_cost(op: Any, *args: Any, out: Any = None, registry: Registry | None = None,
                **kwargs: Any) -> tuple[int, int]:
    """(MACs, FLOPs) of the formula registered for ``op`` (an overload; a packet means its
    ``.default``), its arguments bound by the schema as at dispatch: for kernels that cannot run
    here (CUDA), called with meta tensors in schema order. The formula must fit the schema."""
    overload = op.default if isinstance(op, torch._ops.OpOverloadPacket) else op
    entry = (registry or REGISTRY).resolve(overload)
    assert entry.formula is not None and entry.error is None, (overload, entry.error)
    cost = entry.cost(out, args, kwargs)
    return cost.macs, cost.flops


def accumulate_op(backend: str | None, device: str = "cpu") -> str:
    """The op the autograd engine adds a tensor's two gradients with: out of place under a
    dispatch mode (torch's tensor-subclass branch) and on meta, in place in a plain run on a
    real device (what the native backend sees)."""
    return "aten.add_" if backend == "native" and device != "meta" else "aten.add"


def python_backend_only(backend: str | None) -> None:
    """Skip on the native backend: the case counts the branch torch takes under a dispatch mode."""
    import pytest
    from conftest import DISPATCH_MODE_BRANCH

    if backend == "native":
        pytest.skip(f"Python backend only: {DISPATCH_MODE_BRANCH}")


# -- what the running torch has ------------------------------------------------------------------
class AbsentOp:
    """An op or overload the running torch does not define (:func:`torch_op`): a test that
    needs it skips (:func:`require`), saying which torch lacks what."""

    def __init__(self, name: str):
        self.name = name

    def __getattr__(self, overload: str) -> AbsentOp:
        if overload.startswith("__"):
            raise AttributeError(overload)
        return AbsentOp(f"{self.name}.{overload}")

    def __repr__(self) -> str:
        return f"AbsentOp({self.name!r})"


def torch_op(path: str) -> Any:
    """``torch.ops.<path>`` (``"aten._scaled_mm.default"``), or an :class:`AbsentOp` naming it
    where this torch does not define it: for test tables built at import time."""
    node: Any = torch.ops
    for _i, part in enumerate(path.split(".")):
        try:
            node = getattr(node, part)
        except (AttributeError, RuntimeError):
            return AbsentOp(path)
    return node


def require(*needs: Any) -> None:
    """Skip the calling test where this torch lacks one of ``needs``: ops from :func:`torch_op`,
    or module names (``"torch.nn.attention.varlen"``)."""
    import importlib.util

    import pytest

    for need in needs:
        if isinstance(need, AbsentOp):
            pytest.skip(f"torch {torch.__version__} has no {need.name}")
        if isinstance(need, str) and importlib.util.find_spec(need) is None:
            pytest.skip(f"torch {torch.__version__} has no module {need}")


def has_kernel(name: str, key: str) -> bool:
    """Whether this torch has a kernel for op ``name`` (``"aten::foo"``) under dispatch key
    ``key`` (``"Meta"``, ``"CompositeImplicitAutograd"``): kernels come and go between releases."""
    return torch._C._dispatch_has_kernel_for_dispatch_key(name, key)


def require_meta_kernel(device: str, name: str) -> None:
    """Skip a meta-device case where this torch has no Meta kernel for op ``name``."""
    import pytest

    if device == "meta" and not has_kernel(name, "Meta"):
        pytest.skip(f"torch {torch.__version__} has no Meta kernel for {name}")


def close(a: int, b: int, rel: float = 0.05) -> bool:
    """``a`` and ``b`` within ``rel`` of the larger."""
    return abs(a - b) <= rel * max(a, b, 1)


def assert_memory_agrees(python: ProfileResult, native: ProfileResult) -> None:
    """The Python backend's memory figures (the check) and the native one's: the step and
    phase peaks and each module's peaks within 5%, the activations equal
    (docs/conventions/memory.md)."""
    assert close(python.memory.peak, native.memory.peak), (python.memory.peak, native.memory.peak)
    for phase, peak in python.memory.phase_peaks.items():
        assert close(peak, native.memory.phase_peaks[phase]), phase
    for path in python.modules:
        a, b = python.module(path).memory, native.module(path).memory
        assert a.activations == b.activations, path
        assert close(a.peak, b.peak) and close(a.peak_backward, b.peak_backward), (path, a, b)
