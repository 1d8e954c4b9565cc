"""Capture: run the model and record raw facts (ops, module calls, spans, phases).

How a capture is put together:

* :mod:`.session` makes the sources :mod:`.plan`'s table picks for the options, starts and
  stops them, and collects each one's typed part into a :class:`~.raw.RawCapture`;
  :mod:`.build` turns the parts into a :class:`~flopsight.result.ProfileResult`;
* :mod:`.context` is what the sources share (clock, overhead, module stack, phase),
  :mod:`.events` how they hear of each other's facts without naming each other, and
  :mod:`.attribution` the one place that decides where every cost goes;
* the sources, one file each: :mod:`.modules` (module calls), :mod:`.spans` (iteration,
  backward and step spans, and the phase), :mod:`.optimizer` (``optimizer.step()``),
  :mod:`.functions` (one function mode), :mod:`.counting` (the dispatch mode), :mod:`.units`,
  :mod:`.module_rules` and :mod:`.autograd_functions` (calls counted whole),
  :mod:`.collectives`, :mod:`.storages` (memory), :mod:`.nvml` (GPU usage);
* helpers: :mod:`.tally`, :mod:`.timing` (clocks), :mod:`.placement` (the timeline),
  :mod:`.state` (what profiling restores), :mod:`.params`, :mod:`.inputs`,
  :mod:`.scripted`, :mod:`.wrappers`, :mod:`.parallel` (the run's parallelism),
  :mod:`.gather` (every rank's result on rank 0), :mod:`.notices` (warnings).
"""
