"""The native recorder checked against the Python path, once per build, before it counts.

The recorder is compiled against the installed torch, but what it records rests on rules that
a release (or a build of it) can change: ``RecordFunction``'s layout, which ops are
CompositeImplicitAutograd and whether they decompose on a device, how autograd numbers the
nodes a backward and a recomputed block run. So a build is checked before it counts: a small
model (a forward with the composite ops that decompose, linear, matmul, conv2d, layer_norm and
gelu, a block recomputed under activation checkpointing, and the backward) is captured on both
backends, and every module's cost in every phase compared. Any difference keeps the recorder
out, and one line says why: counts are never wrong, at worst slower.

The verdict is kept in the build's folder (``self-check.txt``), under a key of what it rests on
beyond the build (flopsight's version and the capture code's files): later processes read it,
so the check costs one process per build, not every process. A verdict that cannot be written
(a read-only cache) is kept for the process.

>>> key()[:10]
'flopsight '
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from pathlib import Path
from typing import Literal

import torch

from ...._quiet import ignoring
from ...._version import __version__
from ....formulas import REGISTRY
from ....result.stats import ZERO_STATS
from ...charging.attribution import Attribution
from ...charging.counts import Counts
from ...model.modules import describe
from ...model.params import ModelParameters
from ...runtime.context import CaptureContext
from ...runtime.options import CaptureOptions
from ...runtime.timing import HostClock
from ..python import PythonBackend
from .backend import NativeBackend
from .build import cache_folder
from .ops import NativeCountingSource
from .recorder import RECORDER, UNCHECKED

__all__ = ["verdict", "disagreement", "key", "VERDICT_FILE"]

VERDICT_FILE = "self-check.txt"
_CAPTURE = Path(__file__).resolve().parents[2]  # flopsight/capture: the code the verdict rests on


def key() -> str:
    """What a verdict rests on beyond the build: flopsight's version and the capture code's
    files (their names, sizes and times: an edit checks again)."""
    digest = hashlib.sha256()
    for path in sorted(_CAPTURE.rglob("*.py")):
        st = path.stat()
        digest.update(f"{path.relative_to(_CAPTURE)} {st.st_size} {st.st_mtime_ns}\n".encode())
    return f"flopsight {__version__} {digest.hexdigest()[:16]}"


def verdict(module) -> str | None:
    """None when the loaded extension ``module`` counts as the Python path does, else what
    differed: the process's, else the build's kept verdict, else the check's (run now, kept,
    said in one line when it disagrees)."""
    if RECORDER.verdict is not UNCHECKED:
        return RECORDER.verdict
    path, wanted = cache_folder() / VERDICT_FILE, key()
    kept = _read(path, wanted)
    if kept is not False:
        RECORDER.verdict = kept
        return kept
    try:
        found = disagreement(module)
    except Exception as e:  # the check could not run: the recorder is not trusted either
        found = f"the check raised {type(e).__name__}: {e}"
    RECORDER.verdict = found
    _write(path, wanted, found)
    if found is not None:
        print(f"flopsight: the native backend disagrees with the Python path on torch {torch.__version__} "
              f"({found}); counting with the Python path", file=sys.stderr)
    return found


def _read(path: Path, wanted: str) -> str | None | Literal[False]:
    """The verdict kept at ``path`` under key ``wanted`` (None: agrees), False when none is."""
    try:
        kept_key, _, rest = path.read_text().partition("\n")
    except OSError:
        return False
    if kept_key != wanted:
        return False
    rest = rest.strip()
    return None if rest == "agrees" else rest.removeprefix("disagrees: ")


def _write(path: Path, key: str, found: str | None) -> None:
    text = f"{key}\n{'agrees' if found is None else 'disagrees: ' + found}\n"
    temporary = path.with_name(f"{path.name}.{os.getpid()}")
    with contextlib.suppress(OSError):  # a read-only cache: the process keeps it
        temporary.write_text(text)
        os.replace(temporary, path)  # whole, whoever reads it


def disagreement(module) -> str | None:
    """Capture the check's model on both backends (the native one with extension ``module``);
    None when every module's cost in every phase agrees, else the first difference."""
    counts = {}
    for backend in ("python", "native"):
        # whatever the caller's state (no_grad, inference mode, a default device): a training
        # step on the CPU, and the caller's random numbers left as they were
        # (ignoring, not catch_warnings: which warnings the user has seen is kept)
        with torch.random.fork_rng(devices=[]), torch.inference_mode(False), torch.enable_grad(), \
                torch.device("cpu"), ignoring():
            torch.manual_seed(0)
            model, x = _model(), torch.randn(2, 3, 6, 6)
            found = _captured(model, backend, module, lambda: model(x).sum().backward())
        counts[backend] = {key: (stats.macs, stats.flops) for key, ops in found.ops.items()
                           for stats in [sum(ops.values(), start=ZERO_STATS)]}
    python, native = counts["python"], counts["native"]
    for where in sorted(set(python) | set(native)):
        if python.get(where, (0, 0)) != native.get(where, (0, 0)):
            path, phase = where
            return (f"module {path or 'the root'!r}, {phase}: {native.get(where, (0, 0))[0]} MACs against "
                    f"{python.get(where, (0, 0))[0]}")
    return None


def _captured(model: torch.nn.Module, backend: str, module, run) -> Counts:
    """What ``backend``'s calls and ops alone count of ``run()`` on ``model``."""
    infos = describe(model)
    options = CaptureOptions(infos, backend=backend, timeline=False)
    ctx = CaptureContext.create(HostClock(), REGISTRY, options=options, params=ModelParameters(infos))
    ctx.attribution = Attribution(ctx)
    capture: PythonBackend | NativeBackend
    if backend == "python":
        capture = PythonBackend(ctx)
    else:
        capture = NativeBackend(ctx, module, NativeCountingSource(ctx, module), native_calls=True)
    ctx.backend = capture
    capture.start(ctx)
    try:
        run()
    finally:
        capture.stop(ctx)
    counts = next(part for part in capture.collect(ctx) if isinstance(part, Counts))
    ctx.release()
    return counts


def _model() -> torch.nn.Module:
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(8)
            self.proj = torch.nn.Linear(8, 8)

        def forward(self, x):
            return F.gelu(self.proj(self.norm(x)))

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)
            self.embed = torch.nn.Linear(16, 8)
            self.block = Block()
            self.recomputed = Block()
            self.head = torch.nn.Linear(8, 2)

        def forward(self, x):
            h = self.embed(self.conv(x).flatten(2))  # (2, 4, 8)
            h = self.block(h)
            h = checkpoint(self.recomputed, h, use_reentrant=False)
            scores = torch.softmax(h @ h.transpose(1, 2), dim=-1)  # a batched matmul
            return self.head(scores @ h)

    return Model()
