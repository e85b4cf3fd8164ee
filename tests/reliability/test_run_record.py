"""A run's record stays its own under what production does to it: two run names on one checkpoint directory, a
lost checkpoint index, a truncated `.keras` given to `model.init_from`, a kill after the last checkpoint. Each
case failed on the code before it (say so in the commit that adds one); docs/guarantees.md lists them."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import zipfile
from pathlib import Path

import pytest
import warm
from support.config import ROOT
from support.tracking import runs_in, store

from launcher.config.errors import ConfigError
from launcher.console import readable
from launcher.launch.checkpoint_index import INDEX
from launcher.launch.init_source import locate_init_source
from launcher.launch.lock import CheckpointDirLock

# 1437 training examples at batch 32 without XLA (the ragged last batch trained on): 45 steps an epoch.
SMALL = ["model.hidden_units=[16]", "scaling.batch_size=32", "xla=false", "precision=fp32"]
STEPS_PER_EPOCH = 45
# For the runs whose record is under test, not what they ship (the killed run's exports are: it keeps them).
NO_EXPORTS = ["checkpoint.export_model=false", "tracking.log_model=false"]


def _args(run_dir: Path, *overrides: str) -> list[str]:
    return [f"hydra.run.dir={run_dir}", f"tracking.uri={store(run_dir.parent / 'mlflow.db')}", *SMALL, *overrides]


def _here(launcher_here, run_dir: Path, *overrides: str):
    done = launcher_here(_args(run_dir, *overrides), run_dir.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_two_run_names_on_one_checkpoint_directory_the_second_is_refused_and_the_first_keeps_its_record(
    tmp_path, launcher_here
):
    """Before: run `second` resumed `first`'s checkpoint ("Resuming at epoch 2") and logged into first's MLflow
    run, which then held epochs it never trained."""
    shared = tmp_path / "shared-checkpoints"
    _here(launcher_here, tmp_path / "first", f"checkpoint.directory={shared}", "train.epochs=1", *NO_EXPORTS)
    (first_run,) = runs_in(tmp_path / "mlflow.db")
    files = {p.name: p.read_bytes() for p in shared.iterdir() if p.is_file()}
    second = launcher_here(
        _args(tmp_path / "second", f"checkpoint.directory={shared}", "train.epochs=2", *NO_EXPORTS), tmp_path
    )
    assert second.returncode == 2, second.stderr[-3000:]
    assert f"checkpoint.directory='{shared}'" in second.stderr
    assert str(tmp_path / "first") in second.stderr and str(tmp_path / "second") in second.stderr
    assert first_run.info.run_id in second.stderr and "Traceback" not in second.stderr
    assert "Resuming" not in second.stdout
    (after,) = runs_in(tmp_path / "mlflow.db")  # no run for `second`, and first's untouched
    assert after.info.run_id == first_run.info.run_id and after.data.metrics == first_run.data.metrics
    assert {p.name: p.read_bytes() for p in shared.iterdir() if p.is_file()} == files
    # Two runs started together on one new directory, before either has named it its own: the second is refused.
    fresh = tmp_path / "fresh-checkpoints"
    with CheckpointDirLock(fresh):  # a live launch of another run holds it
        together = launcher_here(
            _args(tmp_path / "third", f"checkpoint.directory={fresh}", "train.epochs=1", *NO_EXPORTS), tmp_path
        )
    assert together.returncode == 2 and "a checkpoint directory no other launch is using" in together.stderr
    assert [p.name for p in fresh.iterdir()] == ["checkpoints.lock"]
    # The fix it gives: its own directory trains.
    own = f"checkpoint.directory={tmp_path / 'second-checkpoints'}"
    _here(launcher_here, tmp_path / "second", own, "train.epochs=1", *NO_EXPORTS)


def test_a_lost_emptied_or_garbled_checkpoint_index_is_rebuilt_from_the_files_and_the_run_resumes(
    tmp_path, launcher_here
):
    """TensorFlow lists a directory's checkpoints from its `checkpoint` file alone: before, a missing or garbled
    one restarted training from step 0 over the files beside it (a second MLflow run), an empty one a traceback."""
    run_dir = tmp_path / "run"
    args = ["checkpoint.max_to_keep=10", *NO_EXPORTS]
    first = _here(launcher_here, run_dir, *args, "train.epochs=1")
    run_id = json.loads((run_dir / "outcome.json").read_text())["run_id"]
    index = run_dir / "checkpoints" / INDEX
    damages = {
        "missing": (lambda: index.unlink(), "is missing"),
        "empty": (lambda: index.write_text(""), "is empty or unreadable"),
        "garbled": (lambda: index.write_bytes(b"\x00\xffnot an index"), "is empty or unreadable"),
    }
    assert "Resuming" not in first.stdout
    for epochs, (damage, said) in enumerate(damages.values(), start=2):
        step = (epochs - 1) * STEPS_PER_EPOCH
        kept = {p.name: p.read_bytes() for p in (run_dir / "checkpoints").glob("ckpt-*")}
        damage()
        again = _here(launcher_here, run_dir, *args, f"train.epochs={epochs}")
        assert f"Resuming at epoch {epochs}, step 0 (global step {step})" in again.stdout, again.stdout[-2000:]
        assert f"checkpoint index {index} {said}: rebuilt from the checkpoint files there" in again.stderr
        assert f"ckpt-{step})" in again.stderr
        for name, content in kept.items():  # nothing intact overwritten
            assert (run_dir / "checkpoints" / name).read_bytes() == content, name
        assert json.loads((run_dir / "outcome.json").read_text())["run_id"] == run_id  # the same MLflow run
    assert sorted(int(p.stem.split("-")[1]) for p in (run_dir / "checkpoints").glob("ckpt-*.index")) == [
        STEPS_PER_EPOCH * k for k in range(1, 5)
    ]


def test_a_run_killed_after_its_last_checkpoint_reports_its_true_final_metrics_when_finished_again(
    tmp_path, launcher_here
):
    """Killed once the last epoch's checkpoint was complete (before its metrics reached MLflow and before the
    exports): the same command finds nothing to train and finishes the exports. Before, its outcome.json said
    `"metrics": {}` and `"history": []`, and a search's study recorded that trial FAIL."""
    run_dir = tmp_path / "run"
    args = ["train.epochs=2"]
    total = 2 * STEPS_PER_EPOCH
    killed = _killed_at(run_dir, f"KILL@after_save:{total}", *args)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (run_dir / "outcome.json").exists() and not (run_dir / "model.keras").exists()
    history = json.loads((run_dir / "checkpoints" / f"ckpt-{total}.json").read_text())["history"]
    again = _here(launcher_here, run_dir, *args)
    assert "Nothing to train" in again.stdout and (run_dir / "model.keras").exists()
    outcome = json.loads((run_dir / "outcome.json").read_text())
    assert outcome["status"] == "FINISHED" and len(outcome["history"]) == 2
    assert outcome["metrics"]["val_accuracy"] == history[-1]["val_accuracy"] > 0.1  # trained: above chance
    assert outcome["metrics"]["loss"] == history[-1]["loss"]
    assert re.search(rf"Done\.\n(.*\n)*\s+val_accuracy\s+{readable(history[-1]['val_accuracy'])}\n", again.stdout)


def test_a_truncated_keras_file_is_named_as_truncated_not_as_missing(tmp_path):
    """What a crash mid-export leaves (Keras writes a .keras in place): before, Keras's `File not found`."""
    whole = tmp_path / "whole.keras"
    with zipfile.ZipFile(whole, "w") as archive:
        archive.writestr("config.json", "{}" * 2000)
        archive.writestr("model.weights.h5", os.urandom(20000))
    assert locate_init_source(str(whole), tmp_path, f"sqlite:///{tmp_path}/m.db").path == whole
    cut = tmp_path / "cut.keras"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    with pytest.raises(ConfigError, match=r"model.init_from=.*cut.keras.*is truncated or damaged") as refused:
        locate_init_source("cut.keras", tmp_path, f"sqlite:///{tmp_path}/m.db")
    assert "fix: export it again" in str(refused.value) and "not found" not in str(refused.value)


def _killed_at(run_dir: Path, fault: str, *overrides: str):
    """A launch of its own process until the test-only fault (launcher/launch/faults.py) fires at its point."""
    command = [sys.executable, "-m", "launcher", *_args(run_dir, *overrides)]
    return warm.run(command, cwd=ROOT, timeout=600, env={**os.environ, "LAUNCHER_FAULT": fault})


def test_a_run_whose_mlflow_run_was_deleted_continues_into_a_linked_run_and_a_deleted_experiment_is_refused(
    tmp_path, launcher_here
):
    """What the MLflow UI's delete buttons do (a soft delete: the run's or experiment's lifecycle stage). Before:
    `MlflowException: The run ... must be in the 'active' state` after the build, and every later launch into a
    deleted experiment a traceback."""
    from mlflow.tracking import MlflowClient

    run_dir = tmp_path / "run"
    _here(launcher_here, run_dir, "train.epochs=1", *NO_EXPORTS)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (first,) = runs_in(tmp_path / "mlflow.db")
    client.delete_run(first.info.run_id)
    again = _here(launcher_here, run_dir, "train.epochs=2", *NO_EXPORTS)
    assert f"MLflow run {first.info.run_id} was deleted in MLflow" in again.stderr
    assert "Resuming at epoch 2" in again.stdout and "Traceback" not in again.stderr
    (second,) = runs_in(tmp_path / "mlflow.db")  # the deleted one stays deleted, out of the search
    assert second.info.status == "FINISHED" and second.info.run_id != first.info.run_id
    assert second.data.tags["launcher.predecessor_run_id"] == first.info.run_id
    assert [m.step for m in client.get_metric_history(second.info.run_id, "val_loss")] == [0, 1]  # epoch 1 again
    assert client.get_run(first.info.run_id).info.lifecycle_stage == "deleted"

    client.delete_experiment(second.info.experiment_id)
    refused = launcher_here(_args(run_dir, "train.epochs=3", *NO_EXPORTS), tmp_path)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "tracking.experiment='launcher': expected an active MLflow experiment" in refused.stderr
    assert f"mlflow experiments restore --experiment-id {second.info.experiment_id}" in refused.stderr
    assert "Plan:" not in refused.stdout and "Traceback" not in refused.stderr  # refused before anything is built
    assert client.get_experiment(second.info.experiment_id).lifecycle_stage == "deleted"  # nothing of it lost
    assert len(client.search_runs([second.info.experiment_id], run_view_type=3)) == 2
