"""The package a user installs: ``python -m build`` makes an sdist and a wheel that carry the
native recorder's C++ source and the HTML report's assets, and the wheel, installed into a
fresh virtualenv beside torch, profiles a model from there, its native backend read from the
installed source. No build artefact is tracked by git.

The test builds without an isolated environment (the suite's setuptools: ``build`` and
``setuptools`` are test extras) and reuses the suite's native build (its cache folder is keyed
by the source's hash, so the installed copy's source must be there to find it): a few seconds.
``.ci/package`` does the whole of it as a user would: an isolated build, the one-time compile
of the native backend into an empty cache, the command line.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

import flopsight

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "flopsight"
#: what the package reads at run time that is not Python: the native recorder's source and the HTML page's parts
DATA = ("capture/backends/native/recorder.cpp", "renderers/assets/report.html", "renderers/assets/report.css",
        "renderers/assets/report.js")
#: what a build leaves behind, never to be committed (a wheel was once, at the root)
ARTEFACTS = (".whl", ".tar.gz", ".egg", ".so", ".pyd", ".dylib", ".o", ".pyc")


def _git_files() -> list[str]:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an unpacked sdist)")
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"git does not list the checkout: {e}")
    return [name for name in listed.stdout.decode().split("\0") if name]


def test_no_build_artefact_is_tracked_and_gitignore_covers_the_build_folders():
    tracked = [name for name in _git_files() if name.endswith(ARTEFACTS)]
    assert not tracked, f"build artefacts tracked by git: {tracked}; git rm --cached them"
    ignored = set((ROOT / ".gitignore").read_text().split())
    assert {"dist/", "build/", "*.egg-info/"} <= ignored


def test_the_package_data_lists_every_file_read_at_run_time():
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11's")
    # what pyproject ships beside the Python files is exactly what the code opens
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = {f"{package.removeprefix('flopsight.').replace('.', '/')}/{name}"
               for package, names in package_data.items() for name in names}
    assert shipped == set(DATA)
    from flopsight.capture.backends.native.build import SOURCE

    # the recorder is compiled from the source beside the module, wherever the package is installed
    assert SOURCE == Path(flopsight.capture.backends.native.build.__file__).with_name("recorder.cpp")


def _native_here() -> bool:
    from flopsight.capture.backends.native.recorder import RECORDER

    return RECORDER.load(quiet=True) is not None


#: run by the installed wheel's interpreter: where flopsight came from and what it counted
_PROFILE = """
import sys, torch, flopsight
model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
result = flopsight.profile(model, torch.ones(2, 8), backend=sys.argv[1])
print(flopsight.__file__)
print(result.metadata.backend, result.total.forward.macs)
print(len(result.render("html")) > 0)
"""


def test_the_wheel_installs_into_a_fresh_venv_and_profiles_a_model(tmp_path):
    pytest.importorskip("build", reason="python -m build: a test extra")
    dist = tmp_path / "dist"
    # the sdist, then the wheel built from it (as pip would from the sdist); the suite's setuptools
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)],
                   check=True, capture_output=True, text=True)
    (sdist,), (wheel,) = dist.glob("flopsight-*.tar.gz"), dist.glob("flopsight-*.whl")
    with tarfile.open(sdist) as archive:
        in_sdist = archive.getnames()
    top = in_sdist[0].split("/")[0]
    assert {f"{top}/src/flopsight/{name}" for name in DATA} <= set(in_sdist)
    assert f"{top}/README.md" in in_sdist
    assert not [n for n in in_sdist if n.endswith(ARTEFACTS) or "/tests/" in n]  # the tests need the repository
    in_wheel = zipfile.ZipFile(wheel).namelist()
    assert {f"flopsight/{name}" for name in DATA} <= set(in_wheel)

    # a fresh venv that sees this interpreter's torch (its site-packages, whose editable
    # install of the repository is not read from there) and nothing of the repository
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    venv_site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip()
    Path(venv_site, "torch-beside.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True, capture_output=True, text=True)

    backend = "native" if _native_here() else "python"
    ran = subprocess.run([str(python), "-c", _PROFILE, backend], cwd=tmp_path, check=True, capture_output=True,
                         text=True)
    where, counted, html = ran.stdout.split("\n")[:3]
    assert Path(where).is_relative_to(venv) and not Path(where).is_relative_to(ROOT)
    assert counted == f"{backend} 64"  # the Linear: 2 x 8 x 4 = 64 MACs
    assert html == "True"  # the page's assets are read from the installed package
    # the command line's entry point
    version = subprocess.run([str(venv / "bin" / "flopsight"), "--version"], cwd=tmp_path, check=True,
                             capture_output=True, text=True)
    assert flopsight.__version__ in version.stdout
