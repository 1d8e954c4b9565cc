"""Session fixtures computed in the background from the session's start: the launches of
ranks and interpreters that tests wait for.

On the 2-core test machine the in-process tests keep about one core busy, and a launch started
when its first test ran left that test waiting (15 to 45 s each). A fixture made with
:func:`early_fixture` is computed on a thread that ``tests/conftest.py`` starts with the session
(``start``) when a selected test needs it, and the tests that need one run last, once it is
likely done. A job that skips or fails raises in each test that uses it.

>>> @early_fixture
... def answer(tmp_path_factory):
...     return 42
>>> "answer" in JOBS
True
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

#: fixture name -> the job that computes its value from pytest's ``tmp_path_factory``
JOBS: dict[str, Callable[[Any], Any]] = {}
#: fixture name -> the job's future, once started
STARTED: dict[str, Future] = {}
#: name -> the code of an interpreter a test reads the output of (:func:`early_script`)
SCRIPTS: dict[str, str] = {}


def early_script(name: str, code: str) -> str:
    """Run ``code`` in an interpreter of its own in the background (``tests/conftest.py``'s
    ``scripts`` fixture holds its ``subprocess.CompletedProcess`` under ``name``), where a test
    would have waited for it; returns ``name``. Registered when its module is collected.

    >>> early_script("doctest", "print(1)") in SCRIPTS
    True
    >>> del SCRIPTS["doctest"]
    """
    SCRIPTS[name] = code
    return name


def run_scripts(workers: int = 2) -> dict[str, subprocess.CompletedProcess]:
    """Every registered script run, ``workers`` at a time: name -> its completed process."""
    def run(code: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)

    with ThreadPoolExecutor(workers) as pool:
        futures = {name: pool.submit(run, code) for name, code in SCRIPTS.items()}
    return {name: future.result() for name, future in futures.items()}


def early_fixture(job: Callable[[Any], Any]):
    """A session fixture named as ``job``, whose value is ``job(tmp_path_factory)``, computed in
    the background from the session's start (or when first requested, if not started)."""
    JOBS[job.__name__] = job

    @pytest.fixture(scope="session", name=job.__name__)
    def fixture(tmp_path_factory):
        if job.__name__ not in STARTED:
            return job(tmp_path_factory)
        return STARTED[job.__name__].result()

    fixture.__doc__ = job.__doc__
    return fixture


def start(names: Iterable[str], tmp_path_factory, workers: int = 2) -> None:
    """Start the jobs ``names`` (in ``JOBS``' order), ``workers`` at a time: two launches of two
    ranks each already fill this machine's two cores with the tests beside them."""
    wanted = set(names) - STARTED.keys()
    if not wanted:
        return
    # pytest makes the session's temporary folder on first use, and two threads making it at once
    # make two (a job's mktemp then fails): make it here, before any job runs
    tmp_path_factory.getbasetemp()
    pool = ThreadPoolExecutor(workers)
    for name in [n for n in JOBS if n in wanted]:
        STARTED[name] = pool.submit(JOBS[name], tmp_path_factory)
    pool.shutdown(wait=False)
