"""Hooks the engine calls around its steps, one job each (see `launcher.contract.Hook`).

Each module holds one hook, constructed with the few things it needs.

May import: `launcher.contract` and, inside functions, `launcher.run` modules; TensorFlow
only where a hook touches it (saving, exporting, tracing), never at module load.
"""
