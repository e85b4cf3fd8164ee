"""MLflow, for a launch and for a sweep: one run's client, the store's URI, a reachability check.

Its own package because both a launch (`launcher.launch`) and a sweep (`launcher.sweep`) track, and
they never import each other.

May import: MLflow, `launcher.config` and the standard library. Never TensorFlow.
"""
