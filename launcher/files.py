"""The files one stage leaves for another, and the two ways they are read and written.

A leaf: imports nothing from the launcher, so the sweep (which never imports TensorFlow),
the checkpointer and the training launch all share one spelling of each file name and one
"read it, or fall back" rule.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

PLAN_FILE = "plan.yaml"
CONFIG_FILE = "config.yaml"
# tune=auto's table for this run's step (the candidates' rates, the choice), as the cache holds it.
TUNING_FILE = "step_tuning.json"
# What a launch did (run id, status, error, final metrics): read by sweeps and benchmarks.
OUTCOME_FILE = "outcome.json"
# A sweep's shared state (its id, the parent MLflow run), written before any job starts.
SWEEP_FILE = "sweep.json"
# One sweep job's overrides, in its job dir: how a re-run sweep finds the job again.
JOB_FILE = "job.json"
# In a sweep dir while a fail-fast sweep is stopping: which job failed (sweep.fail_fast).
STOP_FILE = "sweep_stopped.json"
# The MLflow run a training run dir belongs to, written the moment the run is created: a rerun that finds no
# checkpoint continues it (or settles it) instead of leaving it RUNNING forever.
RUN_FILE = "mlflow_run.json"


def read_json(path: Path, default: Any = None) -> Any:
    """The file's JSON, or `default` when it is missing, unreadable or half-written."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return default


def write_json_atomic(path: Path, data: Any) -> None:
    """Write to a temporary file, fsync, rename: a reader sees the old file or the new one."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as handle:
        json.dump(data, handle, indent=2)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
