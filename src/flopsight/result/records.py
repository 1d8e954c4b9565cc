"""The records a result stores: one :class:`ModuleStats` per module path and one
:class:`ModelCall` per top-level forward call; and :class:`Profile`, what the views derived
from a result (:mod:`.iteration`, :mod:`.generation`) read of it.

>>> from flopsight.result.stats import Stats
>>> record = ModuleStats("fc", "Linear", 1, "", (), 10, 10, phases={"forward": Stats(8, 16, 0.5, 1)})
>>> ModuleStats.from_dict(record.to_dict()) == record
True
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple, Protocol

from .communication import Collective
from .kernels import Kernel, KernelSummary, kernels_from_dict, kernels_to_dict
from .memory import ModuleMemory
from .metadata import Metadata
from .stats import Stats, stats_from_dict

__all__ = ["ModuleStats", "ModelCall", "LayerSizes", "Profile", "REDISTRIBUTE"]

#: the prefix of an op's name in a module's op table when a DTensor redistribution ran it (a
#: shard cut, padded or scaled for a change of placement): work tensor parallelism adds
REDISTRIBUTE = "redistribute:"


class LayerSizes(NamedTuple):
    """The sizes of a linear or embedding layer, as capture read them off the module: a
    ``"linear"`` map of ``inputs`` to ``outputs`` features (``nn.Linear``'s ``in_features``
    and ``out_features``, transformers' ``Conv1D``'s ``nx`` and ``nf``), an ``"embedding"``
    table of ``inputs`` rows (its vocabulary) of ``outputs`` values (``nn.Embedding``'s
    ``num_embeddings`` and ``embedding_dim``).

    Files do not repeat them: those layers write them in their ``extra_repr``, which
    :meth:`from_extra_repr` reads back when a result is loaded.

    >>> LayerSizes.from_extra_repr("Linear", "in_features=768, out_features=3072, bias=True")
    LayerSizes(kind='linear', inputs=768, outputs=3072)
    >>> LayerSizes.from_extra_repr("Embedding", "50257, 768, padding_idx=0")
    LayerSizes(kind='embedding', inputs=50257, outputs=768)
    """

    kind: str
    inputs: int
    outputs: int

    @classmethod
    def from_extra_repr(cls, type_name: str, extra_repr: str) -> LayerSizes | None:
        """The sizes ``extra_repr`` states: ``in_features=I, out_features=O`` (a Linear),
        ``nf=O, nx=I`` (a Conv1D), or, for a type named ``...Embedding``, ``V, D, ...``."""
        m = _LINEAR.search(extra_repr)
        if m:
            return cls("linear", int(m.group(1)), int(m.group(2)))
        m = _CONV1D.search(extra_repr)
        if m:
            return cls("linear", int(m.group(2)), int(m.group(1)))
        if type_name.endswith("Embedding"):
            sizes = _INT.findall(extra_repr.split("padding_idx")[0])
            if len(sizes) >= 2:
                return cls("embedding", int(sizes[0]), int(sizes[1]))
        return None


_LINEAR = re.compile(r"in_features=(\d+), out_features=(\d+)")
_CONV1D = re.compile(r"nf=(\d+), nx=(\d+)")
_INT = re.compile(r"\d+")


class ModuleStats(NamedTuple):
    """What was measured for one module path, its own code only (an immutable record).

    ``name`` is the state_dict-style path (``""`` for the root); ``phases`` maps each phase
    that ran to the module's self cost; ``ops`` maps each phase to operator name -> cost.
    ``aliases`` are other attribute names of the same module object under the same parent
    (``self.b = self.a``): one module, reported once.
    """

    name: str
    type_name: str
    depth: int
    parent: str | None
    children: tuple[str, ...]
    params: int
    params_trainable: int
    extra_repr: str = ""
    shared_with: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    ignored: bool = False
    phases: dict[str, Stats] = {}  # shared default: records are never written to
    ops: dict[str, dict[str, Stats]] = {}
    #: its own saved activations and peaks in bytes (None when memory was not tracked)
    memory: ModuleMemory | None = None
    #: per phase, per op: bytes its own ops read and wrote (``docs/conventions/bytes.md``)
    bytes_moved: dict[str, dict[str, int]] = {}
    #: a linear or embedding layer's sizes (None for other modules; not written to files:
    #: its ``extra_repr`` says them)
    layer: LayerSizes | None = None
    #: per phase, its own kernels (``kernels=True``): name -> :class:`~.kernels.Kernel`,
    #: most time first; and per phase, per operator of ``ops``, its kernels' device seconds
    kernels: dict[str, dict[str, Kernel]] = {}
    op_kernel_time: dict[str, dict[str, float]] = {}
    #: of ``params``, those a module outside its subtree holds too (a tied weight, a module at
    #: two paths): counted in each module that holds them, once in the model's total
    params_shared: int = 0

    @property
    def kernel_time(self) -> dict[str, float]:
        """Per phase, the device seconds of its own kernels (``kernels=True``)."""
        return {phase: sum(k.seconds for k in kernels.values()) for phase, kernels in self.kernels.items()}

    def to_dict(self) -> dict[str, Any]:
        d = self._asdict()
        d["children"], d["shared_with"], d["aliases"] = list(self.children), list(self.shared_with), list(self.aliases)
        d["phases"] = {ph: s._asdict() for ph, s in self.phases.items()}
        d["ops"] = {ph: {name: s._asdict() for name, s in ops.items()} for ph, ops in self.ops.items()}
        d["memory"] = asdict(self.memory) if self.memory is not None else {}
        d["bytes_moved"] = {ph: dict(ops) for ph, ops in self.bytes_moved.items()}
        # written only where kernels were recorded (kernels=True): not on every module of every file
        del d["kernels"], d["op_kernel_time"]
        if self.kernels:
            d["kernels"] = {ph: kernels_to_dict(k) for ph, k in self.kernels.items()}
            d["op_kernel_time"] = {ph: dict(ops) for ph, ops in self.op_kernel_time.items()}
        del d["layer"]
        if not self.params_shared:  # written only where weights are shared: not on every module of every file
            del d["params_shared"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModuleStats:
        d = dict(d)
        for key in ("children", "shared_with", "aliases"):
            d[key] = tuple(d.get(key, ()))
        d["phases"] = {ph: stats_from_dict(s) for ph, s in d.get("phases", {}).items()}
        d["ops"] = {ph: {n: stats_from_dict(s) for n, s in ops.items()} for ph, ops in d.get("ops", {}).items()}
        d["memory"] = ModuleMemory(**d["memory"]) if d.get("memory") else None
        d["bytes_moved"] = {ph: dict(ops) for ph, ops in d.get("bytes_moved", {}).items()}
        d["kernels"] = {ph: kernels_from_dict(k) for ph, k in d.get("kernels", {}).items()}
        older = d.pop("op_device_time", {})  # its name in files written before
        d["op_kernel_time"] = {ph: dict(ops) for ph, ops in d.get("op_kernel_time", older).items()}
        d["layer"] = LayerSizes.from_extra_repr(d.get("type_name", ""), d.get("extra_repr", ""))
        return cls(**d)


@dataclass(frozen=True)
class ModelCall:
    """One top-level forward call: of the model itself (``path == ""``; generate() makes one
    per token), or of a submodule called from outside the model (generate() runs an
    encoder-decoder's encoder that way). ``batch_size`` is read from the model's inputs."""

    path: str
    stats: Stats
    batch_size: int | None = None


class Profile(Protocol):
    """What the views of a profile read of it (:class:`~.profile_result.ProfileResult` is one)."""

    # properties, read-only: a frozen dataclass (ProfileResult) has no settable attributes
    @property
    def modules(self) -> Mapping[str, ModuleStats]: ...

    @property
    def metadata(self) -> Metadata: ...

    @property
    def spans(self) -> dict[str, list[float]]: ...

    @property
    def calls(self) -> list[ModelCall]: ...

    @property
    def kernels(self) -> KernelSummary | None: ...

    @property
    def root_calls(self) -> list[ModelCall]: ...

    def phase_total(self, phase: str) -> Stats: ...

    def collectives(self, phase: str | None = None) -> list[Collective]: ...
