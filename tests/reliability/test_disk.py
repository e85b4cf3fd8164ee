"""A checkpoint disk that is read-only or fills up: a clear stop, previous checkpoints and the MLflow run intact.

The disk is real: a small tmpfs mounted on the run's checkpoint directory (needs root, as CI runs).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from support.config import TINY
from support.tracking import runs_in

# .ci/run sets this, so a tmpfs that cannot be mounted fails CI instead of skipping.
REQUIRE = "LAUNCHER_REQUIRE_DISK"
CKPT_KB = 240  # one checkpoint of the 256-unit MLP with Adam slots (~236 KB) in tmpfs pages
# xla=false: 45 steps per epoch on every machine (with XLA the ragged last batch is dropped: 44).
RUN = [*TINY, "model.hidden_units=[256]", "train.epochs=4", "checkpoint.max_to_keep=5", "xla=false"]


def _mount(target: Path, options: str) -> None:
    target.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)], capture_output=True, text=True)
    if done.returncode != 0:
        if os.environ.get(REQUIRE):  # CI runs as root: a skip there would pass the full-disk guarantee untested
            pytest.fail(f"{REQUIRE} is set but a tmpfs cannot be mounted ({done.stderr.strip()})")
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}); this test needs root")


@pytest.fixture
def small_disk(tmp_path):
    mounted = []

    def mount(target: Path, options: str) -> Path:
        _mount(target, options)
        mounted.append(target)
        return target

    yield mount
    for target in reversed(mounted):
        subprocess.run(["umount", "-l", str(target)], check=False)


def _run(tmp_path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("launcher").experiment_id])
    return client, run


@pytest.mark.slow
def test_a_full_checkpoint_disk_stops_the_run_and_keeps_what_was_written(cli_here, tmp_path, small_disk):
    checkpoints = small_disk(tmp_path / "run" / "checkpoints", f"size={int(CKPT_KB * 2.5)}k")
    plain = [*RUN, "checkpoint.monitor=''"]  # the disk holds 2.5 checkpoints, no best one beside them
    done = cli_here(*plain)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert "could not be written" in done.stderr and "No space left on device" in done.stderr
    assert "re-run the same command to resume from ckpt-90" in done.stderr
    # The two checkpoints that fitted are complete; the failed one left no partial files behind.
    names = sorted(p.name for p in checkpoints.iterdir())
    assert [n for n in names if n.endswith(".json") and n.startswith("ckpt-")] == ["ckpt-45.json", "ckpt-90.json"]
    assert not [n for n in names if n.startswith("ckpt-135")], names
    client, run = _run(tmp_path)
    assert run.info.status == "FAILED" and "No space left on device" in run.data.tags["error"]
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "val_loss")) == [0, 1]

    # More room: the same command resumes from the newest checkpoint into the same MLflow run.
    subprocess.run(["mount", "-o", "remount,size=8m", str(checkpoints)], check=True)
    again = cli_here(*plain)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "Resuming at epoch 3, step 0 (global step 90)" in again.stdout
    client, resumed = _run(tmp_path)
    assert resumed.info.run_id == run.info.run_id and resumed.info.status == "FINISHED"
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "val_loss")) == [0, 1, 2, 3]


def test_a_read_only_checkpoint_directory_is_refused_before_anything_is_logged(cli_here, tmp_path, small_disk):
    small_disk(tmp_path / "run" / "checkpoints", "size=1m,ro")
    done = cli_here(*TINY)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "a writable checkpoint directory (Read-only file system)" in done.stderr
    assert "checkpoint=off" in done.stderr and "Traceback" not in done.stderr
    assert not runs_in(tmp_path / "mlflow.db")


@pytest.mark.slow
def test_a_disk_that_fills_while_exporting_stops_cleanly_and_the_same_command_finishes_the_exports(
    cli_here, tmp_path, small_disk
):
    """Before: three tracebacks (`[Errno 28] No space left on device`), a half-written model.keras where the model
    is expected, an empty outcome.json.tmp and no outcome.json. The checkpoints are on another disk (they fit);
    the run dir's disk has room for the Plan and logs, not for the model."""
    run_dir = small_disk(tmp_path / "run", "size=64k")
    outside = f"checkpoint.directory={tmp_path / 'checkpoints'}"
    done = cli_here(*RUN, outside)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert "Not exported: model.keras: No space left on device" in done.stderr
    left = sorted(p.name for p in run_dir.iterdir())
    assert not [n for n in left if "model" in n or n.endswith(".tmp")], left  # no half model, no temporary files
    outcome = json.loads((run_dir / "outcome.json").read_text())
    assert outcome["status"] == "FAILED" and outcome["failure"] == "export"
    client, run = _run(tmp_path)
    assert run.info.status == "FAILED" and "No space left on device" in run.data.tags["error"]
    assert len(list((tmp_path / "checkpoints").glob("ckpt-*.json"))) == 4  # training is done, kept

    subprocess.run(["mount", "-o", "remount,size=64m", str(run_dir)], check=True)
    again = cli_here(*RUN, outside)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "Nothing to train" in again.stdout and (run_dir / "model.keras").is_file()
    assert json.loads((run_dir / "outcome.json").read_text())["metrics"]["val_loss"] > 0
    client, finished = _run(tmp_path)
    assert finished.info.run_id == run.info.run_id and finished.info.status == "FINISHED"
