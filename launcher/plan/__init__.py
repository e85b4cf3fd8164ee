"""From a config and a machine to a Plan: every decision the launcher makes, with its reason.

`environment` probes the machine into plain data (with `hardware`'s measured matmul rates, taken
once per machine in a child process and cached), `resolve` checks the combination and decides
(a table of pure rules), `schedule` adds what depends on the data's size, `resume` decides how a
checkpoint's position maps onto this launch, `decisions` is the Plan itself.

May import: `launcher.config`, `launcher.contract` and the standard library. Pure: no TensorFlow at import time
(only `environment.probe()` asks TensorFlow for its GPUs, when called); the one file written is
the cache of measured matmul rates.
"""
