"""Capture: run the model and record raw facts (ops, module calls, spans, phases).

How a capture is put together:

* :mod:`.session` makes the sources :mod:`.plan`'s table picks for the options, starts and
  stops them, and collects each one's typed part into a :class:`~.raw.RawCapture`;
  :mod:`.build` turns the parts into a :class:`~flopsight.result.ProfileResult`;
* :mod:`.context` is what the sources share (clock, overhead, module stack, phase, the
  backend), :mod:`.events` how they hear of each other's facts without naming each other, and
  :mod:`.attribution` the one place that decides where every cost goes;
* :mod:`.backends`: the hot path, behind one ``Backend`` protocol chosen once per capture:
  ops and their costs, module calls (each backend owning its stack) and phase changes.

  - :mod:`.backends.python`: a dispatch mode (``ops``) and Python module hooks (``calls``),
    the fallback and the check;
  - :mod:`.backends.native`: the recorder's ``RecordFunction`` callback (``ops``) and C++
    module hooks (``calls``), ``recorder.cpp``, its ``build`` and ``self_check``;
* :mod:`.sources`: one file per source off the hot path: :mod:`~.sources.spans` (iteration,
  backward and step spans, and the phase), :mod:`~.sources.optimizer` (``optimizer.step()``),
  :mod:`~.sources.functions` (one function mode), :mod:`~.sources.units`,
  :mod:`~.sources.module_rules` and :mod:`~.sources.autograd_functions` (calls counted whole),
  :mod:`~.sources.collectives`, :mod:`~.sources.memory`, :mod:`~.sources.kernels` (kernels per
  module), :mod:`~.sources.device_usage` (GPU usage), :mod:`~.sources.gather` (every rank's
  result on rank 0);
* shared by the backends: :mod:`.calls` (a call's record, the unwind rule, the part module
  calls make), :mod:`.counts` (the part counting makes), :mod:`.modules` (the module tree),
  :mod:`.tally`, :mod:`.timing` (clocks);
* helpers: :mod:`.placement` (the timeline), :mod:`.state` (what profiling restores),
  :mod:`.params`, :mod:`.inputs`, :mod:`.scripted`, :mod:`.wrappers`, :mod:`.parallel` (the
  run's parallelism), :mod:`.notices` (warnings), :mod:`.recursion`.
"""


def __getattr__(name: str):
    """A submodule, imported the first time it is named (see :mod:`flopsight._lazy`)."""
    from .._lazy import submodule

    return submodule(__name__, name)
