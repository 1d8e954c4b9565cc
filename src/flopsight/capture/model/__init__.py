"""What describes the model: its module tree (:mod:`.modules`), parameters (:mod:`.params`),
inputs (:mod:`.inputs`), scripted parts (:mod:`.scripted`), parallelism (:mod:`.parallel`),
depth (:mod:`.recursion`), the state profiling restores (:mod:`.state`), and what training
wrappers hold (:mod:`.wrappers`)."""
