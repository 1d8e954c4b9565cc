"""Run several test scenarios on the ranks of one launch, in one process group.

    torchrun --standalone --nproc_per_node 2 tests/multirank/scenarios.py gloo OUT collectives backends hf lightning attach gather
    torchrun --standalone --nproc_per_node 4 tests/multirank/scenarios.py gloo OUT parallel4
    DS_ACCELERATOR=cpu deepspeed --num_gpus 2 tests/multirank/scenarios.py deepspeed OUT compare engine zero_stages ds_parallel

Starting two ranks costs about 4 s with torchrun and 8 s with DeepSpeed's launcher on the
2-core test machine, more than most scenarios take to run, so the tests launch once per
launcher (``multirank.launch.launch_scenarios``) and every scenario runs in turn on the same
ranks and process group. A scenario is a script of this folder, run as a whole with runpy
(``sys.argv`` is ``[script, OUT/<name>]``, the working directory ``OUT/<name>``), or an
example's ``main(argv)``. What a rank prints goes to ``OUT/<name>/stdout.rank<r>.txt``.
A barrier ends each scenario, so one starts when the last has ended on every rank. The
scenarios share flopsight's state in each process, too: the order of ``LAUNCHES`` in
launch.py keeps one scenario's profiles from offsetting the next one's.

A scenario that raises on a rank writes ``OUT/<name>/error.rank<r>.txt`` and ends that rank
at once with status 1: the launcher then ends the other ranks, which would otherwise wait in
a collective for it.
"""  # noqa: E501  (the command lines, as typed)

import contextlib
import os
import runpy
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parents[1] / "examples"
sys.path.insert(0, str(HERE.parent))  # the scenarios share the tests' helpers.py

#: name -> (script, None for a script run whole, else the argv of its main(); "{out}" is the folder)
SCENARIOS = {
    "collectives": (HERE / "collectives_worker.py", None),
    "backends": (HERE / "backends_worker.py", None),
    "attach": (HERE / "attach_worker.py", None),
    "gather": (HERE / "gather_worker.py", None),
    "parallel": (HERE / "parallel_worker.py", None),
    "parallel4": (HERE / "parallel4_worker.py", None),
    "span_error": (HERE / "span_error_worker.py", None),
    "hf": (HERE / "hf_worker.py", None),
    "lightning": (HERE / "lightning_worker.py", None),
    "engine": (HERE / "deepspeed_worker.py", None),
    "compare": (HERE / "ds_compare_worker.py", None),
    "ds_parallel": (HERE / "ds_parallel_worker.py", None),
    # the command docs/distributed.md gives, on fewer steps
    "zero_stages": (EXAMPLES / "zero_stages.py", ["--warm-up", "1", "--steps", "3", "--json", "{out}/stages.json"]),
    "parallel_plans": (EXAMPLES / "parallel_plans.py",
                       ["--warm-up", "0", "--steps", "2", "--json", "{out}/plans.json"]),
}


def run(name: str, out: Path, rank: int) -> None:
    script, argv = SCENARIOS[name]
    out.mkdir(parents=True, exist_ok=True)
    cwd, sys_argv = os.getcwd(), sys.argv
    try:
        os.chdir(out)
        with open(out / f"stdout.rank{rank}.txt", "w") as printed, contextlib.redirect_stdout(printed):
            if argv is None:
                sys.argv = [str(script), str(out)]
                runpy.run_path(str(script), run_name="__scenario__")
            else:
                runpy.run_path(str(script), run_name=name)["main"]([a.format(out=out) for a in argv])
    finally:
        os.chdir(cwd)
        sys.argv = sys_argv


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--local_rank")]  # DeepSpeed's launcher adds it
    launcher, out, names = args[0], Path(args[1]), args[2:]
    import torch.distributed as dist

    if launcher == "deepspeed":
        import deepspeed

        deepspeed.init_distributed()
    else:
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    for name in names:
        try:
            run(name, out / name, rank)
        except BaseException:
            (out / name / f"error.rank{rank}.txt").write_text(traceback.format_exc())
            sys.stderr.write(f"rank {rank}: scenario {name} failed:\n{traceback.format_exc()}")
            sys.stderr.flush()
            os._exit(1)
        if dist.is_initialized():  # an example's main() may end the group itself
            dist.barrier()
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
