"""DeepSpeed, without DeepSpeed's profiler: its API (:mod:`.api`: ``get_model_profile``,
``FlopsProfiler``), its engine's ``flops_profiler`` block (:mod:`.engine`: ``install()``) and
that block's keys (:mod:`.config`). DeepSpeed itself is imported only by ``install()``."""
