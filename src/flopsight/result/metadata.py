"""What a result records about the run besides the measurements: typed records.

>>> m = Metadata(model="Linear", device="cpu", timing=Timing("separate", "perf_counter"),
...              parallel={"world": 2, "dp": 2}, inputs={"args": ["int64[4, 128]"], "kwargs": {}})
>>> Metadata.from_dict(m.to_dict()) == m
True
>>> m.timing.method, m.world_size, m.parallel.dp, m.inputs.args[0].shape
('separate', 1, 2, (4, 128))
>>> Metadata.from_dict({"device": "cuda:0"}).device_name    # results saved before it was recorded
''
>>> Metadata.from_dict(Metadata(model="Net", model_class="mypkg.nets.Net").to_dict()).model_class
'mypkg.nets.Net'
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, NamedTuple

__all__ = ["Metadata", "Timing", "Parallelism", "PARALLEL_KEYS", "Inputs", "TensorSpec"]

#: the sizes a run records, and the ZeRO stage
PARALLEL_KEYS = ("world", "dp", "tp", "pp", "sp", "ep", "zero_stage")


def _size(key: str) -> property:
    return property(lambda self: self._sizes.get(key), doc=f"the {key} size as recorded (None when not known)")


class Parallelism(Mapping):
    """How a run was parallelised: the world, data-, tensor-, pipeline- and sequence-parallel
    sizes and the ZeRO stage that were detected or given, as a read-only mapping of the keys
    known (in the order they were found) and as attributes (None where not known).

    >>> p = Parallelism({"world": 8, "tp": 2})
    >>> p.tp, p.pp, dict(p), p == {"world": 8, "tp": 2}
    (2, None, {'world': 8, 'tp': 2}, True)
    """

    __slots__ = ("_sizes",)

    def __init__(self, sizes: Mapping[str, int]):
        unknown = [k for k in sizes if k not in PARALLEL_KEYS]
        if unknown:
            raise ValueError(f"parallel: unknown key {unknown[0]!r}; known keys: {', '.join(PARALLEL_KEYS)}")
        self._sizes = {k: int(v) for k, v in sizes.items()}

    def __getitem__(self, key: str) -> int:
        return self._sizes[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._sizes)

    def __len__(self) -> int:
        return len(self._sizes)

    def __repr__(self) -> str:
        return f"Parallelism({self._sizes!r})"

    # equal to the dict it holds, so not hashable; typeshed's idiom (object declares __hash__ a method)
    __hash__: ClassVar[None] = None  # type: ignore[assignment]

    world, dp, tp, pp, sp, ep, zero_stage = (_size(key) for key in PARALLEL_KEYS)

    def to_dict(self) -> dict[str, int]:
        return dict(self._sizes)


_TENSOR = re.compile(r"(\w+)\[(\d+(?:, \d+)*)?\]")


class TensorSpec(NamedTuple):
    """A tensor argument as a result records it: its dtype's name and its shape; written
    ``float32[2, 3]`` in files.

    >>> TensorSpec.parse("int64[4, 128]"), str(TensorSpec("float32", ()))
    (TensorSpec(dtype='int64', shape=(4, 128)), 'float32[]')
    """

    dtype: str
    shape: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.dtype}{list(self.shape)}"

    @classmethod
    def parse(cls, text: str) -> TensorSpec | None:
        """The spec ``text`` writes, or None when it is not one."""
        m = _TENSOR.fullmatch(text)
        if m is None:
            return None
        return cls(m.group(1), tuple(int(x) for x in (m.group(2) or "").split(", ") if x))


def _typed(value: Any) -> Any:
    """A recorded argument with its tensors as TensorSpecs (lists as tuples)."""
    if isinstance(value, str):
        return TensorSpec.parse(value) or value
    if isinstance(value, (list, tuple)):
        return tuple(_typed(v) for v in value)
    if isinstance(value, Mapping):
        return {str(k): _typed(v) for k, v in value.items()}
    return value


def _plain(value: Any) -> Any:
    """What :func:`_typed` reads: JSON-ready (tensors as their text)."""
    if isinstance(value, TensorSpec):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


class Inputs(Mapping):
    """The profiled call's arguments as recorded: ``args`` and ``kwargs`` with each tensor a
    :class:`TensorSpec` (lists as tuples; numbers, strings, None and type names as they
    were). As a mapping it reads as it is written in files (``inputs["args"]``: tensors as
    their text), and it equals that dict.

    >>> inputs = Inputs({"args": ["float32[2, 3]"], "kwargs": {"mask": None}})
    >>> inputs.args, inputs["args"]
    ((TensorSpec(dtype='float32', shape=(2, 3)),), ['float32[2, 3]'])
    """

    __slots__ = ("_written", "_typed")

    def __init__(self, recorded: Mapping[str, Any]):
        self._written = {"args": _plain(recorded.get("args", [])), "kwargs": _plain(recorded.get("kwargs", {}))}
        self._typed: tuple | None = None  # (args, kwargs), read when first asked for

    def _read(self) -> tuple:
        if self._typed is None:
            self._typed = (_typed(self._written["args"]), _typed(self._written["kwargs"]))
        return self._typed

    @property
    def args(self) -> tuple:
        return self._read()[0]

    @property
    def kwargs(self) -> dict:
        return self._read()[1]

    def __getitem__(self, key: str) -> Any:
        return self._written[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._written)

    def __len__(self) -> int:
        return 2

    def __repr__(self) -> str:
        return f"Inputs({self._written!r})"

    # equal to the dict it holds, so not hashable; typeshed's idiom (object declares __hash__ a method)
    __hash__: ClassVar[None] = None  # type: ignore[assignment]

    def to_dict(self) -> dict[str, Any]:
        return {"args": _plain(self._written["args"]), "kwargs": _plain(self._written["kwargs"])}


#: the timing methods' names in files written before they took ``profile(timing=...)``'s words
_OLD_TIMING_NAMES = {"separate-pass": "separate", "overhead-subtracted": "subtract", "single-pass": "single"}


@dataclass(frozen=True)
class Timing:
    """How latencies were measured.

    ``method``, in the words of ``profile(timing=...)``: ``separate`` (counted in one pass,
    timed in another with module hooks only), ``subtract`` (one pass, the profiler's own
    measured time taken out), ``single`` (one pass, nothing taken out) or ``device`` (a
    forward on CUDA: each module's time is its kernels' device time, from a pass recording
    them, and the forward's that of uninstrumented calls) or ``phases`` (a span on CUDA:
    the phases, forward, backward, step and the iteration, timed with CUDA events at their
    boundaries only; the module calls inside them and the ops on the host). ``clock``: ``perf_counter``,
    ``cuda_events``, ``fake`` or ``fake_device``. Older files name them
    ``separate-pass``, ``overhead-subtracted`` and ``single-pass``: read as these.
    ``ops``: the pass the operators' own times come from: ``timed``, the one that timed the
    modules (an operator's time never exceeds its module's), or ``counting``, a counting pass
    run apart from it (``""`` in older files: the counting pass).
    """

    method: str = ""
    clock: str = ""
    compiled: str | None = None  # set when a torch.compile'd model was timed as a whole
    ops: str = ""


@dataclass(frozen=True)
class Metadata:
    """The run: versions, model, device, inputs, mode and how it was timed."""

    flopsight_version: str = ""
    torch_version: str = ""
    python_version: str = ""
    model: str = ""  # the model's class name
    #: the model's class with its module, ``package.module.QualName`` (``flopsight diff`` tells two
    #: classes of one name apart by it); "" in old results
    model_class: str = ""
    device: str = "cpu"
    device_type: str = "cpu"
    #: the accelerator's name as torch gives it (``torch.cuda.get_device_name``: "NVIDIA H100
    #: 80GB HBM3"), what the peak table is looked up by; "" for the CPU, meta, and old results
    device_name: str = ""
    dtype: str = ""
    #: ``torch.get_float32_matmul_precision()`` during the run ("highest", "high", "medium"):
    #: "high" and "medium" let CUDA run float32 matmuls in tf32 ("" in old results)
    float32_matmul_precision: str = ""
    #: the dtype autocast ran the model's eligible ops in on its device ("" without autocast)
    autocast_dtype: str = ""
    #: how cuDNN runs float32 convolutions: "tf32" (torch's default) or "ieee" ("" in old results)
    cudnn_conv_precision: str = ""
    world_size: int = 1
    rank: int = 0
    #: world, data-, tensor-, pipeline-, sequence-parallel sizes and ZeRO stage, where known
    #: (a dict is accepted and kept as a :class:`Parallelism`)
    parallel: Parallelism | None = None
    #: where tensor (sequence, expert) parallelism splits the model's parameters (the tree's
    #: params are this rank's shards): every parameter once at its full size, as one process
    #: holds them, and those every such rank holds whole (counted in each rank's); else None
    params_of_model: int | None = None
    params_replicated: int | None = None
    #: the paths of the modules tensor parallelism left whole (see ``split_params``): every
    #: rank of the model-parallel group runs their work; None where the model is not split
    replicated_modules: tuple[str, ...] | None = None
    #: this rank's coordinate along each parallel dimension it was found on ("dp", "tp", "pp":
    #: its first pipeline stage, ...), else None
    coordinates: dict | None = None
    #: the pipeline schedule a stage of the model ran in (``torch.distributed.pipelining``):
    #: ``schedule``, ``micro_batches`` per step, ``stages`` (this rank's indices),
    #: ``num_stages``, ``steps``; else None
    pipeline: dict | None = None
    #: shapes and dtypes of the profiled call's arguments (a dict of ``args`` and ``kwargs``
    #: is accepted and kept as :class:`Inputs`)
    inputs: Inputs | None = None
    batch_size: int | None = None  # first dimension of the first input
    batch_size_given: int | None = None  # Profiler(batch_size=...): overrides the inputs'
    mode: str = "custom"  # "forward", "generate", or "custom" (a Profiler span)
    method: str | None = None  # the method profile() called
    warm_up: int | None = None
    attention: str = "dense"  # see flopsight.formulas.attention.ATTENTION_CONVENTIONS
    timing: Timing = field(default_factory=Timing)
    error: str | None = None  # set when the profiled call raised
    #: set when the process ended while the profile ran: what it measured until then, and why
    #: it is incomplete ("the process ended after 3 of 8 profiled steps")
    incomplete: str | None = None
    #: the paths of the modules that ran ``torch.compile``d ("" for the model itself): each is
    #: timed as one region (its kernels charged to it), its counts from the eager module
    compiled: tuple[str, ...] = ()
    #: which path counted the ops: "native" (the C++ recorder) or "python" (the dispatch
    #: mode); "" in old results and where nothing was counted
    backend: str = ""
    #: why the Python path counted although the native one was asked for (or was the default)
    backend_note: str | None = None
    #: the operators the native backend handed to Python with their values, each call costed on
    #: them: those whose formulas read values (attention's masks under ``attention="effective"``,
    #: a user's ``reads_values`` formula) and those a signature cannot describe (nested, sparse
    #: tensors); a formula that read none on a call's values costs its later calls by signature
    on_values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.parallel is not None and not isinstance(self.parallel, Parallelism):
            object.__setattr__(self, "parallel", Parallelism(self.parallel))
        if self.inputs is not None and not isinstance(self.inputs, Inputs):
            object.__setattr__(self, "inputs", Inputs(self.inputs))
        if not isinstance(self.compiled, tuple):
            object.__setattr__(self, "compiled", tuple(self.compiled))
        if not isinstance(self.on_values, tuple):
            object.__setattr__(self, "on_values", tuple(self.on_values))
        if self.replicated_modules is not None and not isinstance(self.replicated_modules, tuple):
            object.__setattr__(self, "replicated_modules", tuple(self.replicated_modules))

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["timing"] = asdict(self.timing)
        d["parallel"] = self.parallel.to_dict() if self.parallel is not None else None
        d["inputs"] = self.inputs.to_dict() if self.inputs is not None else None
        d["compiled"] = list(self.compiled)
        d["on_values"] = list(self.on_values)
        d["replicated_modules"] = list(self.replicated_modules) if self.replicated_modules is not None else None
        for name in ("incomplete", "params_of_model", "params_replicated", "replicated_modules", "coordinates",
                     "pipeline"):
            if d[name] is None:  # written where set only: other results read as before
                del d[name]
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Metadata:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"metadata: unknown field(s) {', '.join(unknown)}")
        values = dict(data)
        timing = dict(values.get("timing", {}))
        timing["method"] = _OLD_TIMING_NAMES.get(timing.get("method", ""), timing.get("method", ""))
        values["timing"] = Timing(**timing)
        return cls(**values)
