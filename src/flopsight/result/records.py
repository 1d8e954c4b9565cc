"""The records a result stores: one :class:`ModuleStats` per module path and one
:class:`ModelCall` per top-level forward call; and :class:`Profile`, what the views derived
from a result (:mod:`.iteration`, :mod:`.generation`) read of it.

>>> from flopsight.result.stats import Stats
>>> record = ModuleStats("fc", "Linear", 1, "", (), 10, 10, phases={"forward": Stats(8, 16, 0.5, 1)})
>>> ModuleStats.from_dict(record.to_dict()) == record
True
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, NamedTuple, Protocol

from .communication import Collective
from .memory import ModuleMemory
from .metadata import Metadata
from .stats import Stats

__all__ = ["ModuleStats", "ModelCall", "Profile"]


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

    def to_dict(self) -> dict[str, Any]:
        d = self._asdict()
        d["children"], d["shared_with"], d["aliases"] = list(self.children), list(self.shared_with), list(self.aliases)
        d["phases"] = {ph: s._asdict() for ph, s in self.phases.items()}
        d["ops"] = {ph: {name: s._asdict() for name, s in ops.items()} for ph, ops in self.ops.items()}
        d["memory"] = asdict(self.memory) if self.memory is not None else {}
        d["bytes_moved"] = {ph: dict(ops) for ph, ops in self.bytes_moved.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModuleStats":
        d = dict(d)
        for key in ("children", "shared_with", "aliases"):
            d[key] = tuple(d.get(key, ()))
        d["phases"] = {ph: Stats(**s) for ph, s in d.get("phases", {}).items()}
        d["ops"] = {ph: {n: Stats(**s) for n, s in ops.items()} for ph, ops in d.get("ops", {}).items()}
        d["memory"] = ModuleMemory(**d["memory"]) if d.get("memory") else None
        d["bytes_moved"] = {ph: dict(ops) for ph, ops in d.get("bytes_moved", {}).items()}
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

    modules: Mapping[str, ModuleStats]
    metadata: Metadata
    spans: dict[str, list[float]]
    calls: list[ModelCall]

    @property
    def root_calls(self) -> list[ModelCall]: ...

    def phase_total(self, phase: str) -> Stats: ...

    def collectives(self, phase: str | None = None) -> list[Collective]: ...
