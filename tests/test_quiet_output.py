"""Other libraries' output never leaks into a report: torch's "Failed to initialize NumPy"
notice, the extension loader's "No CUDA runtime is found", and torch.profiler's (Kineto's) own
log lines, which C++ writes straight to the process's stderr, past Python's ``sys.stderr``.

Each case runs a real profile in a process of its own, as a user's script would, and reads what
reached its stdout and stderr at the file-descriptor level: stdout must be exactly the report,
stderr must hold no line of those libraries (flopsight's own ``flopsight: ...`` notices, such as
a first build of the native backend, are allowed). The scripts that begin alike are forked from
one interpreter that ran their common beginning (``FORKER``), in the background from the
session's start (an early fixture, tests/background.py: about 20 s the in-process tests need
not wait for).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
from background import early_fixture

from flopsight._quiet import native_stderr_without
from flopsight._torch_private import KINETO_LOG_LINE

#: what the libraries print: Kineto's log lines, c10's C++ warnings, the NumPy notice, the
#: extension loader's line, and any Python warning
FOREIGN = re.compile(r"USDT:|profiler_start|profiler_stop|gpuGetDeviceCount|Kineto|kineto|NumPy|"
                     r"No CUDA runtime|^\[?[WEI]\d{4} |Warning", re.M)

_MODEL = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
x = torch.ones(4, 8)
"""

#: each way of profiling, ending with ``result``; flopsight imported (so torch) before anything
SCENARIOS = {
    "profile native": "result = flopsight.profile(model, x, backend='native')",
    "profile python": "result = flopsight.profile(model, x, backend='python')",
    "profile kernels=True": "result = flopsight.profile(model, x, kernels=True)",
    "Profiler span": """
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with flopsight.Profiler(model, optimizer=opt) as prof:
    model(x).sum().backward()
    opt.step()
result = prof.result
""",
    "Profiler span kernels=True": """
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with flopsight.Profiler(model, optimizer=opt, kernels=True) as prof:
    model(x).sum().backward()
    opt.step()
result = prof.result
""",
    "Profiler span python backend": """
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with flopsight.Profiler(model, optimizer=opt, backend='python') as prof:
    model(x).sum().backward()
    opt.step()
result = prof.result
""",
    "torch.compile": "result = flopsight.profile(torch.compile(model), x)",
    "flex attention": """
from torch.nn.attention.flex_attention import flex_attention
class Attend(nn.Module):
    def forward(self, q):
        return flex_attention(q, q, q)
result = flopsight.profile(Attend(), torch.ones(1, 2, 16, 8))
""",
}


def _script(scenario: str, report, prelude: str = "", after: str = "") -> str:
    """A user's script: ``prelude``, flopsight and the model, the scenario, its report written
    to stdout and to ``report``, then ``after``."""
    return "\n".join([
        prelude,
        "import sys",
        "import flopsight",
        "flopsight.FakeClock  # flopsight's first public name imports torch",
        _MODEL,
        textwrap.dedent(SCENARIOS[scenario]),
        "text = result.render('text')",
        f"open({str(report)!r}, 'w').write(text)",
        "sys.stdout.write(text)",
        "sys.stdout.flush()",
        after,
    ])


def _run(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    environment.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=environment)


def _foreign(stderr: str) -> list[str]:
    """stderr's lines that are not flopsight's own notices."""
    return [line for line in stderr.splitlines() if line and not line.startswith("flopsight: ")]


def _build_native() -> None:
    """The native backend built (or its failure recorded) before the scripts run: a first build
    is the one flopsight path that imports torch's extension loader, and prints its own line."""
    from flopsight.capture.backends.native.recorder import RECORDER

    RECORDER.load(quiet=True)


#: the native backend's self-check, kept beside its build for every later process: run in a
#: process of its own (its checkpoint imports dynamo), so that no script below runs it
SELF_CHECK = """
from flopsight.capture.backends.native import self_check
from flopsight.capture.backends.native.recorder import RECORDER
if RECORDER.load(quiet=True) is not None:
    self_check.verdict(RECORDER.loaded)
"""


@pytest.fixture(scope="module", autouse=True)
def native_built():
    _build_native()


#: Runs scripts that begin alike, each in a process forked from one interpreter that ran their
#: common beginning (an interpreter each imports torch again: about 2 s here). ``argv[1]``: JSON
#: ``[beginning, {name: [folder, script]}]``. A child runs its whole script (the beginning again:
#: imports already done, settings set twice) with its descriptors 1 and 2 on ``folder/stdout.txt``
#: and ``stderr.txt``, and ends as a script ends (an uncaught exception prints and exits 1; else
#: SystemExit unwinds and the interpreter finalises). Prints each child's exit status.
FORKER = """
import json, os, sys
beginning, scripts = json.loads(sys.argv[1])
namespace = {"__name__": "__main__"}
exec(beginning, namespace)
children = {}
for name, (folder, script) in scripts.items():
    pid = os.fork()
    if pid == 0:
        for fd, file in ((1, "stdout.txt"), (2, "stderr.txt")):
            os.dup2(os.open(os.path.join(folder, file), os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        exec(script, namespace)
        sys.exit(0)
    children[name] = pid
print(json.dumps({name: os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for name, pid in children.items()}))
"""


def _forked(groups: dict[str, tuple[str, dict, dict[str, tuple[str, object]]]]) -> dict:
    """``{group: (beginning, env, {name: (script, folder)})}`` -> ``{name: done}``, each ``done``
    with the ``returncode``, ``stdout`` and ``stderr`` of its script; the groups side by side."""
    started = {}
    for group, (beginning, env, scripts) in groups.items():
        environment = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
        argv = json.dumps([beginning, {name: [str(folder), script] for name, (script, folder) in scripts.items()}])
        started[group] = subprocess.Popen([sys.executable, "-c", FORKER, argv], stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True, env={**environment, **env})
    done = {}
    for group, process in started.items():
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        for name, status in json.loads(out.splitlines()[-1]).items():
            folder = groups[group][2][name][1]
            done[name] = SimpleNamespace(returncode=status, stdout=(folder / "stdout.txt").read_text(),
                                         stderr=(folder / "stderr.txt").read_text())
    return done


# -- torch.profiler's (Kineto's) own lines ---------------------------------------------------------------------
KERNELS = ["profile kernels=True", "Profiler span kernels=True"]


@pytest.mark.parametrize("scenario", KERNELS)
def test_a_kernels_profile_prints_the_report_and_nothing_of_kinetos(scenario, ran):
    done, folder = ran["kernels", scenario]
    assert done.returncode == 0, done.stderr
    assert done.stdout == (folder / "report.txt").read_text()
    assert done.stdout.startswith("\n" + " DeepSpeed Flops Profiler ".center(78, "-") + "\n")
    assert _foreign(done.stderr) == [], done.stderr
    assert not FOREIGN.search(done.stderr), done.stderr


def test_kinetos_lines_print_for_a_user_who_asks_for_them_with_kineto_log_level(ran):
    # torch.profiler alone, as the user would run it: what Kineto prints here at level 0
    plain, _ = ran["kineto", "torch.profiler alone"]
    kineto = [line for line in plain.stderr.splitlines() if KINETO_LOG_LINE.match(line.encode())]
    if not kineto:
        pytest.skip("this torch's Kineto prints no log line on this machine even at KINETO_LOG_LEVEL=0: "
                    "nothing to keep for the user")
    done, folder = ran["kineto", "profile kernels=True"]
    assert done.returncode == 0, done.stderr
    assert done.stdout == (folder / "report.txt").read_text()  # Kineto writes to stderr only
    # the user's value is theirs: flopsight neither changes it nor drops the lines it lets through
    mine = [line for line in done.stderr.splitlines() if KINETO_LOG_LINE.match(line.encode())]
    assert mine and {_what(line) for line in kineto} <= {_what(line) for line in mine}


def _what(line: str) -> str:
    """Where a Kineto line comes from: its severity and source line (``USDT SyncActivityProfilerHandler.cpp:52``)."""
    m = re.match(r"(\w+):\S+ \S+ \S+ (\S+:\d+)\]", line)
    return f"{m.group(1)} {m.group(2)}" if m else line


def test_the_lines_dropped_are_kinetos_only_and_the_rest_come_through_in_order():
    # in a process of its own: there Python's sys.stderr writes to descriptor 2, as C++ does
    code = textwrap.dedent("""
        import os, sys
        from flopsight._quiet import native_stderr_without
        from flopsight._torch_private import KINETO_LOG_LINE
        print("before", file=sys.stderr)
        with native_stderr_without(KINETO_LOG_LINE):
            os.write(2, b"the model's own line\\n")
            os.write(2, b"USDT:2026-12-07 04:22:48 29247:29247 SyncActivityProfilerHandler.cpp:52] profiler_start\\n")
            print("a Python line", file=sys.stderr, end="\\n", flush=False)
            os.write(2, b"ERROR:2026-12-07 04:22:48 29247:29247 DeviceProperties.cpp:44] gpuGetDeviceCount failed\\n")
            os.write(2, b"last, without a newline")
        print("", file=sys.stderr)
        print("after", file=sys.stderr)
        """)
    done = _run(code)
    assert done.returncode == 0
    assert done.stderr == "before\nthe model's own line\na Python line\nlast, without a newline\nafter\n"


def test_what_a_raising_block_printed_still_comes_through(capfd):
    with pytest.raises(ValueError, match="^raised$"):
        with native_stderr_without(KINETO_LOG_LINE):
            os.write(2, b"USDT:2026-12-07 04:22:48 1:1 SyncActivityProfilerHandler.cpp:59] profiler_stop\nkept\n")
            raise ValueError("raised")
    assert capfd.readouterr().err == "kept\n"


# -- torch's NumPy notice ---------------------------------------------------------------------------------------
NO_NUMPY = "import sys\nsys.modules['numpy'] = None  # a torch-only install: import numpy fails"


#: what torch.compile prints of its own, with or without flopsight, on some builds and Pythons
COMPILING_PRINTS = re.compile(r"No CUDA runtime is found|torch/_dynamo/|torch/_inductor/|^\s+warnings\.warn\(")

#: the scenarios in whose process torch._dynamo is imported (by torch.profiler's start, the
#: optimizer, torch.compile, flex attention): where torch's NumPy notice was said to come from
WITH_DYNAMO = {"profile kernels=True", "Profiler span", "Profiler span kernels=True", "Profiler span python backend",
               "torch.compile", "flex attention"}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_no_path_prints_torchs_numpy_notice_on_an_install_without_numpy(scenario, ran):
    done, folder = ran["no numpy", scenario]
    assert done.returncode == 0, done.stderr
    text = (folder / "report.txt").read_text()
    # the report, then the script's own line: whether dynamo was imported in the process
    assert done.stdout == text + f"{scenario in WITH_DYNAMO}\n"
    assert "NumPy" not in done.stderr and "numpy" not in done.stderr.lower(), done.stderr
    lines = _foreign(done.stderr)
    if scenario == "torch.compile":
        # compiling prints torch's own lines whatever profiles it (make test-matrix: on a CUDA
        # build without a GPU the extension loader's, on Python 3.13.0 dynamo's guard warning);
        # what this test holds is the NumPy notice
        lines = [line for line in lines if not COMPILING_PRINTS.search(line)]
    if scenario != "flex attention":  # eager flex attention: torch warns about the model's own call
        assert lines == [], done.stderr


def _command_line_training(folder) -> str:
    """``flopsight profile factory.py:pair --mode train`` run as ``python -m flopsight`` runs it."""
    factory = folder / "factory.py"
    factory.write_text("import torch\n\ndef pair():\n"
                       "    return torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()), torch.ones(2, 8)\n")
    return (f"{NO_NUMPY}\nimport runpy\nsys.argv = ['flopsight', 'profile', {str(factory) + ':pair'!r}, "
            "'--mode', 'train', '--no-detailed', '--repeat', '1']\n"
            "runpy.run_module('flopsight', run_name='__main__', alter_sys=True)")


def test_the_command_line_training_mode_prints_no_numpy_notice(ran):
    done, _ = ran["no numpy", "command line, --mode train"]
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("\n" + " DeepSpeed Flops Profiler ".center(78, "-") + "\n")
    assert _foreign(done.stderr) == [], done.stderr


# -- the extension loader's "No CUDA runtime is found" --------------------------------------------------------------
#: a CUDA build of torch on a machine without a GPU, on this CPU build: torch.utils.cpp_extension
#: logs "No CUDA runtime is found" when it is imported on a build compiled for CUDA (torch.version.cuda
#: set) where CUDA_HOME exists and no GPU is available. What torch imports on its own first, as a
#: CUDA build would (dynamo and inductor ask the CUDA build for its kernels)
CUDA_BUILD = """
import torch, torch._dynamo, torch._inductor, torch.profiler, torch.optim
torch.version.cuda = "12.8"
torch.cuda._is_compiled = lambda: True
torch.cuda.is_available = lambda: False
"""
#: after the report: the loader imported now prints the line, so the simulation is a real one
LOADER = """
print("cpp_extension imported before:", "torch.utils.cpp_extension" in sys.modules, file=sys.stderr)
import torch.utils.cpp_extension
"""


ON_A_CUDA_BUILD = ["profile native", "profile python", "profile kernels=True", "Profiler span",
                   "Profiler span kernels=True"]


@pytest.mark.parametrize("scenario", ON_A_CUDA_BUILD)
def test_no_path_imports_the_extension_loader_so_no_cuda_runtime_line(scenario, ran):
    done, folder = ran["cuda build", scenario]
    assert done.returncode == 0, done.stderr
    assert done.stdout == (folder / "report.txt").read_text()
    lines = _foreign(done.stderr)
    # nothing until the script's own import of the loader, which prints the line (the control)
    assert lines[0] == "cpp_extension imported before: False", done.stderr
    assert len(lines) == 2 and "No CUDA runtime is found" in lines[1], done.stderr


@early_fixture
def ran(tmp_path_factory):
    """Every forked script of this module, run once: ``ran[group, scenario]`` is ``(done, folder)``,
    ``done`` with the script's ``returncode``, ``stdout`` and ``stderr``, its report in
    ``folder/report.txt``. Four groups: as written; with ``KINETO_LOG_LEVEL=0``; with NumPy
    missing; on a CUDA build without a GPU (``CUDA_HOME`` an empty folder). The native backend
    is built first (native_built's reason), on the job's thread: the recorder's loading is
    locked; then its self-check's verdict kept, as the tests before this module's would have
    kept it."""
    _build_native()
    checked = _run(SELF_CHECK)
    assert checked.returncode == 0, checked.stderr
    root = tmp_path_factory.mktemp("quiet")
    (root / "cuda").mkdir()
    flopsight_first = "import flopsight\nflopsight.FakeClock\n"
    groups = {"kernels": (flopsight_first, {}, {}),
              "kineto": ("", {"KINETO_LOG_LEVEL": "0"}, {}),
              "no numpy": (f"{NO_NUMPY}\n{flopsight_first}", {}, {}),
              "cuda build": (flopsight_first + CUDA_BUILD, {"CUDA_HOME": str(root / "cuda")}, {})}
    folders = {}

    def add(group: str, scenario: str, script) -> None:
        folders[group, scenario] = folder = root / f"case{len(folders)}"
        folder.mkdir()
        groups[group][2][f"{group}/{scenario}"] = (script(folder / "report.txt"), folder)

    for scenario in KERNELS:
        add("kernels", scenario, lambda report, s=scenario: _script(s, report))
    # a user who asks Kineto for its lines: torch.profiler alone, and flopsight's kernels profile
    kineto = {"torch.profiler alone": lambda report: "import torch\nwith torch.profiler.profile():\n"
                                                     "    torch.ones(2) + 1\n",
              "profile kernels=True": lambda report: _script("profile kernels=True", report)}
    for scenario, script in kineto.items():
        add("kineto", scenario, script)
    for scenario in SCENARIOS:
        add("no numpy", scenario, lambda report, s=scenario: _script(
            s, report, prelude=NO_NUMPY, after="print('torch._dynamo' in sys.modules)"))
    add("no numpy", "command line, --mode train", lambda report: _command_line_training(report.parent))
    for scenario in ON_A_CUDA_BUILD:
        add("cuda build", scenario, lambda report, s=scenario: _script(
            s, report, prelude=flopsight_first + CUDA_BUILD, after=LOADER))
    done = _forked(groups)
    return {key: (done[f"{key[0]}/{key[1]}"], folder) for key, folder in folders.items()}
