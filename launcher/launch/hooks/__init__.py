"""Hooks the engine calls around its steps, one job each (see `launcher.contract.Hook`).

Each module holds one hook, constructed with the few things it needs; `assembly.hooks_for` builds a fit's
ordered list from the config and the Plan (adding a hook: a module here and a line there).

May import: `launcher.contract`, `launcher.plan` and `launcher.launch` modules; TensorFlow only where
a hook touches it (saving, exporting, tracing), inside functions, never at module load.
"""
