"""From a session's raw capture to a result: the parts (:mod:`.raw`), the timeline
(:mod:`.placement`), the result built (:mod:`.build`), and every rank's gathered on rank 0
(:mod:`.gather`)."""
