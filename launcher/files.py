"""The files one stage leaves for another, and the two ways they are read and written.

A leaf: imports nothing from the launcher, so the sweep (which never imports TensorFlow),
the checkpointer and the training launch all share one spelling of each file name and one
"read it, or fall back" rule.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
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
# What a launch showed on its console (each launch appended), also the MLflow run's artifact of that name.
CONSOLE_FILE = "console.log"
# The run's curves (loss and metrics by epoch, train and val), also among its MLflow artifacts.
CURVES_FILE = "curves.png"


def read_json(path: Path, default: Any = None) -> Any:
    """The file's JSON, or `default` when it is missing, unreadable or half-written."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return default


def write_json_atomic(path: Path, data: Any) -> None:
    """Write to a temporary file, fsync, rename: a reader sees the old file or the new one."""
    write_text_atomic(path, json.dumps(data, indent=2))


def write_text_atomic(path: Path, text: str) -> None:
    """Write to a temporary file, fsync, rename: a reader sees the old file or the new one; a write that fails
    (a full disk) leaves neither a half file nor its temporary one."""
    path = Path(path)
    # A name of its own: two processes writing one file (sweepers sharing a sweep dir) never share a temporary one.
    handle_no, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        with os.fdopen(handle_no, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # as open() would have made it (mkstemp's file is 0600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def written_aside(path: Path, write: Callable[[Path], object]) -> None:
    """`write(aside)` writes a file or folder under a name beside `path` (same suffix: Keras wants `.keras`), which
    then replaces `path`: a reader, or a crash, finds the old one or the new one whole, never a half-written one
    (what a full disk or a kill mid-write leaves is removed, or ignored by its name)."""
    path = Path(path)
    aside = path.with_name(f"{path.stem}.partial{path.suffix}")
    _remove(aside)
    try:
        write(aside)
    except BaseException:
        _remove(aside)
        raise
    if path.is_dir():  # a folder cannot be renamed over another: the old one is renamed away first, then removed
        old = path.with_name(f"{path.stem}.old{path.suffix}")
        _remove(old)
        os.replace(path, old)
        os.replace(aside, path)
        _remove(old)
        return
    os.replace(aside, path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()  # read once, at import: reading it sets it for a moment, which no other thread may see


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
