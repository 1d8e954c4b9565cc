"""Build and load the native recorder (``recorder.cpp``), once per torch, Python and platform.

It is compiled from the installed source with the machine's C++ compiler through torch's
extension tooling and ninja, never downloaded, into a user cache folder
(``$FLOPSIGHT_CACHE``, else ``$XDG_CACHE_HOME/flopsight``, else ``~/.cache/flopsight``) under
a name that carries torch's version, the Python tag, the platform, the source's hash and the
compiler's identity: a build is reused only where it is valid (this API is outside torch's
stable ABI), and a new torch, source or compiler builds (and checks, :mod:`.self_check`) anew.
Loading a cached build takes a few hundredths of a second; a first build, a minute or so.

When there is no compiler or the build fails, :func:`build` raises :class:`BuildFailed` (the
recorder, :mod:`.recorder`, says so in one line, once per process, and the caller counts with
the Python path). A failed build is kept in its folder (``build-failed.txt``: the compiler's
first error), so other processes do not try it again until the source, torch or the compiler
changes.

>>> cache_folder().name.startswith("torch-")
True
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import platform
import shutil
import sys
from pathlib import Path

import torch

from ...._quiet import ignoring

__all__ = ["build", "cache_folder", "BuildFailed", "SOURCE"]

SOURCE = Path(__file__).with_name("recorder.cpp")


class BuildFailed(RuntimeError):
    """The native recorder could not be built or loaded here."""


def cache_folder() -> Path:
    """Where the build for this torch, Python, platform, source and compiler lives."""
    root = os.environ.get("FLOPSIGHT_CACHE")
    if root:
        base = Path(root)
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "flopsight"
    source_hash = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    compiler_hash = hashlib.sha256(_compiler_identity(_compiler()).encode()).hexdigest()[:8]
    tag = f"torch-{torch.__version__}-{sys.implementation.cache_tag}-{platform.machine()}-{compiler_hash}-{source_hash}"
    return base / "native" / tag.replace("+", "_")


def _compiler() -> str:
    return os.environ.get("CXX", "c++")  # what torch's tooling compiles with


def _ninja_on_path() -> None:
    """torch's tooling runs ``ninja`` from PATH: a pip-installed ninja is in the environment's
    bin folder (or the ninja package's), which PATH lacks when the venv is not activated."""
    folders = [str(Path(sys.executable).parent)]
    try:
        import ninja  # the pip package: its binary's folder

        folders.append(ninja.BIN_DIR)
    except (ImportError, AttributeError):
        pass
    path = os.environ.get("PATH", "")
    missing = [f for f in folders if f not in path.split(os.pathsep)]
    if missing:
        os.environ["PATH"] = os.pathsep.join([path, *missing]) if path else os.pathsep.join(missing)


def build(quiet: bool):
    """The extension, compiled here if this source, torch, Python and compiler have no build yet
    (:class:`BuildFailed` where it cannot be: no compiler, a compiler error, a build that failed
    before)."""
    folder = cache_folder()
    folder.mkdir(parents=True, exist_ok=True)
    name = "flopsight_native_" + folder.name.rsplit("-", 1)[-1]
    library = next((p for suffix in (".so", ".pyd") for p in folder.glob(f"{name}*{suffix}")), None)
    built = library is not None
    if library is not None:
        # the folder's name carries the source's hash: a library there is this source's build.
        # Loaded directly: torch's tooling would run ninja and the compiler to check it (slower,
        # and each of its subprocesses makes Python forget which warnings it already showed)
        with contextlib.suppress(ImportError, OSError):  # a build cut short: torch's tooling redoes it
            return _import(name, library)
    compiler = _compiler()
    if not built and shutil.which(compiler) is None:
        raise BuildFailed(f"no C++ compiler: {compiler!r} is not on PATH")
    failed = folder / _FAILED
    earlier = _earlier_failure(failed)
    if earlier is not None:
        raise BuildFailed(f"{earlier}; a build failed here before and is not tried again until the source, torch "
                          f"or the compiler changes: delete {failed} to retry")
    from torch.utils import cpp_extension  # (imports setuptools: 60 ms a process that only loads)

    _ninja_on_path()
    if not quiet and not built:
        print(f"flopsight: building the native counting backend into {folder} (once for this torch, "
              "Python and platform; about half a minute)", file=sys.stderr)
    try:
        with ignoring():  # torch's compiler-version notices
            return cpp_extension.load(
                name=name,
                sources=[str(SOURCE)],
                extra_cflags=["-O2", "-DNDEBUG"],  # RecordFunction's layout differs without NDEBUG
                build_directory=str(folder),
                verbose=False,
            )
    except Exception as e:
        reason = _first_error(str(e))
        with contextlib.suppress(OSError):  # a read-only cache: the next process tries again
            failed.write_text(f"{reason}\n")
        raise BuildFailed(reason) from e


#: in a build folder: why its build failed
_FAILED = "build-failed.txt"


def _compiler_identity(compiler: str) -> str:
    """The compiler binary's path, size and time: what a new compiler (or an upgrade) changes."""
    path = os.path.realpath(shutil.which(compiler) or compiler)
    try:
        st = os.stat(path)
        return f"{path} {st.st_size} {int(st.st_mtime)}"
    except OSError:
        return path


def _earlier_failure(failed: Path) -> str | None:
    """Why this source failed to build with this torch and this compiler (the folder's), if it has."""
    try:
        return failed.read_text().strip() or "the build failed"
    except OSError:
        return None


def _first_error(text: str) -> str:
    r"""The compiler's first ``error:`` line in a failed build's output, else its last line.

    >>> _first_error("[1/2] c++ ...\nrecorder.cpp:10:5: error: 'x' was not declared\nninja: build stopped")
    "recorder.cpp:10:5: error: 'x' was not declared"
    """
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]
    return (errors or lines or ["the build failed"])[0 if errors else -1]


def _import(name: str, library: Path):
    spec = importlib.util.spec_from_file_location(name, library)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {library}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
