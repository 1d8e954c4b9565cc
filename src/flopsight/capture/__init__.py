"""Capture: run the model and record raw facts (ops, module calls, spans, phases).

The folders, by role:

* :mod:`.runs`, what runs a capture: the session (``runs/session.py``) makes the sources its
  plan picks (``runs/plan.py``: each source's row says what it needs of the backend, and the
  backend is chosen from those needs first), starts and stops them, and collects each one's
  part;
* :mod:`.runtime`, what the parts of a running capture share: the options, the context
  (clock, overhead, module stack, phase: it changes only through methods that have the backend
  settle first), the events, the clocks; ``runtime/running.py``, what the process keeps of the
  sessions that run (threads, the end of the process, the profiler's own code and time);
* :mod:`.backends`, the hot path behind one ``Backend`` protocol, chosen once per session:
  :mod:`.backends.python` (a dispatch mode and Python module hooks: the fallback and the check)
  and :mod:`.backends.native` (``recorder.cpp``'s ``RecordFunction`` callback and C++ module
  hooks; ``recorder.py``, the process's one recorder; ``build.py``; ``self_check.py``);
* :mod:`.sources`, one file per source off the hot path: spans and phases, the optimizer's
  steps, the function mode, calls counted whole (units, module rules, autograd functions),
  collectives, memory, kernels, GPU usage;
* :mod:`.charging`, where a cost goes and what it adds up to: the one attribution rule, the
  one cost evaluation, module calls' records, the tallies;
* :mod:`.model`, what describes the model: its module tree, parameters, inputs, scripted
  parts, parallelism, depth, the state profiling restores, what training wrappers hold;
* :mod:`.assembly`, from the raw capture to a result: the parts, the timeline, the result,
  and every rank's gathered on rank 0.
"""


def __getattr__(name: str):
    """A submodule, imported the first time it is named (see :mod:`flopsight._lazy`)."""
    from .._lazy import submodule

    return submodule(__name__, name)
