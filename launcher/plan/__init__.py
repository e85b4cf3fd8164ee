"""From a config and a machine to a Plan: every decision the launcher makes, with its reason.

`environment` probes the machine into plain data (with `hardware`'s measured matmul rates, taken
once per machine in a child process and cached); `rules/` decides, one module per concern, each
returning its typed section and asking the component tables in `launcher.config`; `resolve` composes
the rules; `schedule` (data size), `sharding` (multi-worker data) and `resume` (a checkpoint's
position) add records later; `decisions` is the Plan itself: frozen typed sections.

May import: `launcher.config`, `launcher.contract` and the standard library. Pure: no TensorFlow at import time
(only `environment.probe()` asks TensorFlow for its GPUs, when called); the one file written is
the cache of measured matmul rates.
"""
