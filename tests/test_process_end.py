"""A process may end at any point of a profile: it ends with the status it would have had
without flopsight, with no fatal error and no stall, and what a profile that writes a report
measured until then is saved there, marked incomplete.

Each way of ending is a real process (forked from one interpreter, the DeepSpeed launches
beside them): the script's end, an uncaught exception, ``sys.exit``, ``SIGTERM`` and ``SIGINT``, with
a :class:`flopsight.Profiler` left running on either backend; :func:`flopsight.attach` with an
``output_file`` cut short by an exception, by ``SIGTERM`` and by training that ends before its
``steps``; and the DeepSpeed engine drop-in on 2 ranks, one of which raises, or whose
``steps`` training never reaches (tests/multirank/engine_end_worker.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from background import early_fixture

from flopsight.capture.backends.native.recorder import RECORDER

ROOT = Path(__file__).resolve().parents[1]

#: how each script ends, and the status Python gives such an end without flopsight: 0 at the end,
#: 1 for an uncaught exception, sys.exit's own, and a signal's negative number (an uncaught
#: KeyboardInterrupt ends Python by SIGINT itself)
ENDINGS = {
    "end": ("pass", 0),
    "exception": ("raise ValueError('the training loop failed')", 1),
    "sys.exit": ("sys.exit(3)", 3),
    "SIGTERM": ("os.kill(os.getpid(), signal.SIGTERM); time.sleep(30)", -signal.SIGTERM),
    "SIGINT": ("os.kill(os.getpid(), signal.SIGINT); time.sleep(30)", -signal.SIGINT),
}

PRELUDE = """\
import os, signal, sys, time
import torch
import flopsight
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
"""

#: attach with a report file, profiling steps 1 to 5 of a loop that may end before
ATTACHED = PRELUDE + """\
config = {"flops_profiler": {"enabled": True, "profile_step": 1, "steps": 5, "detailed": False,
                             "output_file": "report.txt"}}
handle = flopsight.attach(model, opt, config)
for step in range(4):
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
"""

#: a SIGTERM (a launcher tearing the ranks down) while the incomplete profile is being saved at exit
SAVE_INTERRUPTED = PRELUDE + """\
def save(result):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.2)
    with open("report.txt", "w") as f:
        f.write(result.metadata.incomplete)
profiler = flopsight.Profiler(model).start()
profiler.save_at_exit(save)
model(torch.ones(2, 4)).sum().backward()
raise ValueError("the training loop failed")
"""

#: Runs each case (name -> [folder, code]) in a process of its own, forked from one interpreter
#: that imported torch and loaded the native recorder once (an import each would cost seconds),
#: its stderr into the folder's stderr.txt; prints each one's exit status. A child that leaves
#: its code without an exception ends as a script ends: SystemExit unwinds it and the
#: interpreter finalises (atexit, then C++'s exit handlers).
FORKER = """\
import json, os, signal, sys
import torch
# Python raises KeyboardInterrupt on SIGINT only where SIGINT was not ignored when it started, and
# a shell starts a background job (make test &) with it ignored: each child starts as a
# foreground script does
signal.signal(signal.SIGINT, signal.default_int_handler)
from flopsight.capture.backends.native.recorder import RECORDER
RECORDER.load(quiet=True)
children = {}
for name, (folder, code) in json.loads(sys.argv[1]).items():
    pid = os.fork()
    if pid == 0:
        os.chdir(folder)
        os.dup2(os.open("stderr.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
        exec(code, {"__name__": "__main__"})
        sys.exit(0)
    children[name] = pid
print(json.dumps({name: os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for name, pid in children.items()}))
"""

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
       "OMP_NUM_THREADS": "1"}


def _backends() -> list[str]:
    return ["python", "native"] if RECORDER.load(quiet=True) is not None else ["python"]


@early_fixture
def process_endings(tmp_path_factory):
    """Every process of this module, started side by side, once they have all ended:
    ``process_endings["open", ending, backend]``: (status, stderr) of a script that ends so with a Profiler
    running; ``process_endings["attach", ending]``: (status, stderr, the report or None) of attach cut
    short so; ``process_endings["engine", how]``: (the launcher's status, its output, rank 0's report or
    None) of the engine drop-in on 2 ranks."""
    cases, launches = {}, {}
    for backend in _backends():
        for ending, (code, _) in ENDINGS.items():
            cases["open", ending, backend] = PRELUDE + textwrap.dedent(f"""\
                profiler = flopsight.Profiler(model, backend={backend!r}).start()
                model(torch.ones(2, 4)).sum().backward()
                assert profiler._session.ctx.backend.__class__.__name__.lower().startswith({backend!r})
                {code}
                """)
    for ending in ("end", "exception", "SIGTERM"):
        cases["attach", ending] = ATTACHED + ENDINGS[ending][0] + "\n"
    cases["save", "SIGTERM"] = SAVE_INTERRUPTED
    folders = {key: tmp_path_factory.mktemp("_".join(key).replace(".", "")) for key in cases}
    if importlib.util.find_spec("deepspeed") is not None:  # beside the forked ones
        from multirank.launch import deepspeed_start

        worker = Path(__file__).with_name("multirank") / "engine_end_worker.py"
        for how in ("raise", "steps"):
            folders["engine", how] = folder = tmp_path_factory.mktemp(f"engine_{how}")
            launches["engine", how] = deepspeed_start(worker, how, str(folder), cwd=folder)
    names = {"/".join(key): key for key in cases}
    forked = subprocess.run([sys.executable, "-c", FORKER, json.dumps({n: [str(folders[k]), cases[k]]
                                                                       for n, k in names.items()})],
                            capture_output=True, text=True, env=ENV, timeout=300)
    assert forked.returncode == 0, forked.stderr
    found = {names[n]: (status, (folders[names[n]] / "stderr.txt").read_text())
             for n, status in json.loads(forked.stdout.splitlines()[-1]).items()}
    for key, wait in launches.items():
        done = wait()
        found[key] = (done.returncode, done.stdout + done.stderr)
    for key in [k for k in found if k[0] != "open"]:
        report = folders[key] / "report.txt"
        found[key] = (*found[key], report.read_text() if report.exists() else None)
    return found


@pytest.mark.parametrize("backend", ["python", "native"])
@pytest.mark.parametrize("ending", list(ENDINGS))
def test_a_process_that_ends_with_a_profile_running_ends_as_it_would_without_flopsight(process_endings, ending,
                                                                                      backend):
    if ("open", ending, backend) not in process_endings:
        pytest.skip("the native backend cannot be built here")
    status, err = process_endings["open", ending, backend]
    assert "Fatal Python error" not in err and "Exception ignored" not in err, err
    assert status == ENDINGS[ending][1], err


@pytest.mark.parametrize("ending", ["end", "exception", "SIGTERM"])
def test_attach_cut_short_writes_what_it_measured_marked_incomplete(process_endings, ending):
    """Steps 1 to 5 are profiled; the loop ran 4 steps (step 0, then 1, 2 and 3 profiled), so
    the process ends inside the fourth profiled step, after 3 of 5."""
    status, err, report = process_endings["attach", ending]
    assert status == ENDINGS[ending][1], err
    assert "Fatal Python error" not in err
    assert report is not None, err
    assert "profile incomplete:" in report
    assert "the process ended while it was being profiled, after 3 of 5 steps" in report
    assert "Profile Summary at step" in report and "fwd MACs per GPU" in report


def test_a_sigterm_while_saving_at_exit_ends_the_process_after_the_save(process_endings):
    """A rank that raised saves its profile at exit; its launcher's SIGTERM arriving meanwhile
    waits for the save, then ends the process as SIGTERM does."""
    status, stderr, report = process_endings["save", "SIGTERM"]
    assert status == -signal.SIGTERM, stderr
    assert report == "the process ended while it was being profiled", stderr
    assert "ValueError: the training loop failed" in stderr and "Fatal Python error" not in stderr


def test_the_engine_drop_in_writes_an_incomplete_report_when_a_rank_raises(process_endings):
    """Rank 1 raises in the fourth step (steps 2 to 9 profiled): the run fails as it would
    (status 1, the launcher's own), rank 0 writes what it measured, and nothing aborts."""
    if ("engine", "raise") not in process_endings:
        pytest.skip("DeepSpeed is not installed")
    status, output, report = process_endings["engine", "raise"]
    assert status == 1, output
    assert "Fatal Python error" not in output and "rank 1 fails" in output
    assert report is not None and "profile incomplete:" in report, output
    assert "the process ended while it was being profiled" in report


def test_the_engine_drop_in_writes_an_incomplete_report_when_training_ends_before_its_steps(process_endings):
    """Steps 2 to 9 profiled, training ends after step 4: both ranks exit 0, rank 0's report
    says 3 of the 8 steps were profiled."""
    if ("engine", "steps") not in process_endings:
        pytest.skip("DeepSpeed is not installed")
    status, output, report = process_endings["engine", "steps"]
    assert status == 0, output
    assert "Fatal Python error" not in output
    assert report is not None, output
    assert "the process ended while it was being profiled, after 3 of 8 steps" in report
