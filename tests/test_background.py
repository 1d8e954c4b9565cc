"""The process's background thread (flopsight/_background.py): started once, before the step
that hands it a detached profile's finish; the interpreter's exit waits for its work."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import torch
from torch import nn

import flopsight
from flopsight._background import BACKGROUND


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


def test_work_runs_in_turn_on_one_thread_started_by_ready():
    BACKGROUND.ready()
    names, order = [], []
    futures = [BACKGROUND.submit(lambda i=i: (names.append(threading.current_thread().name), order.append(i)))
               for i in range(5)]
    for f in futures:
        f.result()
    assert order == [0, 1, 2, 3, 4]
    assert len(set(names)) == 1 and names[0].startswith("flopsight-background")


def test_a_detached_profile_finishes_on_the_background_thread():
    model = nn.Linear(4, 2)
    prof = flopsight.Profiler(model).start()
    model(torch.ones(3, 4))
    seen = []
    prof.stop_detached(lambda result: seen.append((threading.current_thread().name, result.total.forward.macs)))
    assert prof.result.total.forward.macs == 3 * 4 * 2  # waits for the finish: 3 rows x 4 x 2
    assert seen == [(seen[0][0], 24)] and seen[0][0].startswith("flopsight-background")


def test_the_interpreters_exit_waits_for_the_work_handed_over():
    done = run("""
        import time
        from flopsight._background import BACKGROUND
        BACKGROUND.submit(lambda: (time.sleep(0.3), print("finished", flush=True)))
        print("script ends", flush=True)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["script", "ends", "finished"]


def test_work_handed_over_while_the_interpreter_shuts_down_runs_at_once():
    done = run("""
        import atexit
        from flopsight._background import BACKGROUND
        BACKGROUND.ready()
        # atexit handlers run after the thread was let go: the work runs on the caller's thread
        atexit.register(lambda: print(BACKGROUND.submit(lambda: "ran at exit").result(), flush=True))
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ran at exit"


def test_a_forked_child_gets_a_thread_of_its_own():
    done = run("""
        import os
        from flopsight._background import BACKGROUND
        BACKGROUND.ready()  # the parent's thread: not in the child
        pid = os.fork()
        if pid == 0:
            print(BACKGROUND.submit(lambda: os.getpid()).result() == os.getpid(), flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
