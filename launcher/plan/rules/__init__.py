"""The resolver's rules, one module per concern; each returns its section of the Plan.

A rule takes the config, the environment, the `Findings` it reports violations and warnings to, and
the sections it depends on as arguments: a rule cannot run before the ones it needs, and reads their
decisions as typed attributes. `launcher.plan.resolve` composes them.

May import: `launcher.config`, `launcher.plan` (decisions, environment, precisions, cluster) and the
standard library. Pure: no TensorFlow, no files.
"""
