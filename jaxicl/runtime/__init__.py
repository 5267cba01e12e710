"""Where and how programs run, apart from the science: the persistent compilation cache (`compilation_cache`), the
stage timer that splits wall time into compilation and run (`profiling`), the rule that puts latency-bound work on the
host CPU and throughput-bound work on the accelerator (`placement`), the watchdog that restarts a process XLA:CPU
deadlocked (`watchdog`), the workaround that serialises concurrent LAPACK calls on XLA:CPU (`xla_cpu`), the
scheduler of ``jaxicl reproduce --jobs`` processes (`jobs`) and the wall-clock budgets that train in slices
(`budget`).

The science packages (`jaxicl.tasks`, `models`, `losses`, `dynamics`, `theory`, `sweep`) use only `placement`,
`profiling` and `xla_options` (how training programs compile) from here; the paper reproductions
(`jaxicl.experiments`) use all of it.
"""
