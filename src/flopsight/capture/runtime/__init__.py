"""What the parts of a running capture share: the session's options (:mod:`.options`), the
context (:mod:`.context`: clock, overhead, module stack, phase, changed through methods that
have the backend settle first), how sources hear of each other (:mod:`.events`), the clocks
(:mod:`.timing`), the profiler's own time (:mod:`.overhead`), the tallies the attribution
writes (:mod:`.tally`), and what the process keeps of the sessions that run (:mod:`.running`:
threads, the profiler's own code, the end of the process; :mod:`.stance`)."""
