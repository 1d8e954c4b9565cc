"""Run a test script on several real ranks with torchrun (gloo on this machine).

>>> callable(torchrun), callable(launch_scenarios)
(True, True)
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(script: Path, *args: str, nproc: int = 2, timeout: float = 180) -> subprocess.CompletedProcess:
    """``torchrun --nproc_per_node nproc script args...`` with flopsight's sources on the path;
    raises with every rank's output if the run fails."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    # --standalone: torchrun picks its own free port and holds it (a port chosen here could be
    # taken by another run before the ranks bind it)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           str(script), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"torchrun {script.name} failed ({proc.returncode}):\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc


def deepspeed_start(script: Path, *args: str, cwd: Path, timeout: float = 600):
    """Start ``DS_ACCELERATOR=cpu deepspeed --num_gpus 2 script args...`` in ``cwd``, with
    flopsight's sources on the path; returns ``wait()``, which gives its
    ``subprocess.CompletedProcess`` (launches may run side by side)."""
    launcher = Path(sys.executable).with_name("deepspeed")
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    # DeepSpeed's CPU ranks compile their shared-memory all-reduce (deepspeed_shm_comm, about
    # 30 s here) into torch's extension folder; in the shared ~/.cache each virtualenv's build
    # replaces the last one's (their include paths differ) and two at once wait on each other's
    # lock: one folder per virtualenv builds it once
    env.setdefault("TORCH_EXTENSIONS_DIR", str(Path(sys.prefix) / "torch_extensions"))

    def launch(port: int) -> subprocess.Popen:
        return subprocess.Popen([str(launcher), "--num_gpus", "2", "--master_port", str(port), str(script), *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)

    port = free_port()
    process = launch(port)

    def wait() -> subprocess.CompletedProcess:
        nonlocal port, process
        # DeepSpeed's launcher cannot pick a port itself (torchrun --standalone can): a free one
        # is chosen here, and the launch tried again on another if something took it in between
        for tries in range(3):
            try:
                out, err = process.communicate(timeout=timeout)
            finally:
                # DeepSpeed's CPU all-reduce leaves a shared-memory buffer per rank (69 MB) behind
                for path in Path("/dev/shm").glob(f"deepspeed_*_{port}_*"):
                    path.unlink(missing_ok=True)
            if "EADDRINUSE" not in out + err or tries == 2:
                return subprocess.CompletedProcess(process.args, process.returncode, out, err)
            port = free_port()
            process = launch(port)
        raise AssertionError("unreachable")

    return wait


def deepspeed_launch(script: Path, *args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """``DS_ACCELERATOR=cpu deepspeed --num_gpus 2 script args...`` in ``cwd`` (see
    :func:`deepspeed_start`); raises with the output if the run fails."""
    proc = deepspeed_start(script, *args, cwd=cwd, timeout=timeout)()
    if proc.returncode != 0:
        raise AssertionError(f"deepspeed {script.name} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n"
                             f"{proc.stderr[-4000:]}")
    return proc


#: the scenarios of tests/multirank/scenarios.py each launcher runs, in this order:
#: - "gather" last: it ends profiling on rank 0 alone, which offsets how later profiles match
#:   across ranks (flopsight.capture.assembly.gather matches them by their order);
#: - "compare" first: DeepSpeed's own profiler counts every linear layer twice in a process
#:   that has run a ZeRO-3 engine (ZeRO-3 leaves its patched linear behind), and "compare"
#:   holds that profiler's lines against flopsight's.
LAUNCHES = {"gloo": ("collectives", "backends", "hf", "lightning", "attach", "span_error", "parallel", "parallel_plans",
                     "gather"),
            "deepspeed": ("compare", "engine", "zero_stages", "ds_parallel"),
            # four ranks: a 2 x 2 mesh, four pipeline stages
            "gloo4": ("parallel4",)}
#: scenarios left out where a package is missing (their test modules skip then)
NEEDS = {"hf": "transformers", "lightning": "lightning"}


def launch_scenarios(tmp_path_factory, launcher: str):
    """Start 2 ranks with ``launcher`` ("gloo": torchrun; "deepspeed": DeepSpeed's; "gloo4":
    torchrun with 4 ranks) once, and run
    every scenario of ``LAUNCHES[launcher]`` on them; return the folder that holds a folder of
    files per scenario. Skips the test where torch.distributed (or DeepSpeed) is missing. Meant
    for a session fixture (tests/conftest.py): one launch serves every test module."""
    import pytest
    import torch

    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available")
    if launcher == "deepspeed":
        pytest.importorskip("deepspeed")
    out = tmp_path_factory.mktemp(f"{launcher}_scenarios")
    script = Path(__file__).with_name("scenarios.py")
    import importlib.util

    names = [name for name in LAUNCHES[launcher] if name not in NEEDS or importlib.util.find_spec(NEEDS[name])]
    args = (launcher, str(out), *names)
    if launcher == "deepspeed":
        deepspeed_launch(script, *args, cwd=out)
    else:
        torchrun(script, *args, nproc=4 if launcher == "gloo4" else 2, timeout=300)
    return out


def rank_results(folder: Path, ranks: int = 2):
    """``result(name)``: every rank's result a scenario saved as ``folder/<name>.rank<r>.json``."""
    import flopsight

    return lambda name: [flopsight.load(folder / f"{name}.rank{r}.json") for r in range(ranks)]
