"""From a config and a machine to a Plan: every decision the launcher makes, with its reason.

The machine is probed into plain data, `rules/` decides one concern per module, `resolve` composes the
rules into the Plan; the records that need the data's size, the shards or a checkpoint are added later.

Modules:
    cluster: which cluster a multi-worker process belongs to, and whether it can work
    continuation: a run continued by a later launch keeps what it started with; what may change
    data_facts: what the loaded data tells the resolver (string inputs), as plain data
    decisions: the Plan: every decision, each with its reason, in typed frozen sections
    environment: what this machine offers, as plain data, probed without starting the TF runtime
    hardware: this machine's matmul rates per dtype and backend, measured once and cached
    reasons: a decision's reason on one console line, cut at a word and marked (plan.yaml keeps it whole)
    resolve: resolve(config, environment) -> Plan: the launcher's knowledge of what works together
    resume: how a checkpoint's position maps onto this launch: the Plan's `resume` decision
    schedule: decisions that depend on the data's size: steps per epoch, validation steps, warmup
    section: a section of the Plan: decided values with their plan.yaml keys and reasons, checked when made
    sharding: how a multi-worker job splits its training data, decided from the shards' sizes
    rules/: the resolver's rules, one module per concern, each returning its section of the Plan

May import: `launcher.config`, `launcher.contract`, `launcher.console` and the standard library. Pure: no
TensorFlow at import time (only `environment.probe()` asks TensorFlow for its GPUs, when called, and
`hardware` measures in a child process); the one file written is the cache of measured matmul rates.
"""
