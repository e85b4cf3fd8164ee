"""Hydra multirun into MLflow: a parent run per sweep, a fresh process per job, a summary.

`callback` opens and closes the sweep's parent run; `job` runs one job as a `python -m launcher`
subprocess and records it; `summary` writes the comparison table and plots.

May import: `launcher.config`, `launcher.tracking`, `launcher.files`, `launcher.contract`,
Hydra and MLflow. Never TensorFlow (a test checks it) and never `launcher.launch`.
"""
