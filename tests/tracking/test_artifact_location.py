"""Where a local MLflow store keeps a run's artifacts: beside its SQLite file, wherever the launch ran from (a real
SQLite store, no TensorFlow)."""

from __future__ import annotations

from pathlib import Path

from support.tracking import store

from launcher.tracking.tracker import open_run


def _log_one_artifact(uri: str, launch_dir: Path, folder: Path) -> tuple[str, str]:
    note = folder / "note.txt"
    note.write_text("kept with its store")
    tracker = open_run(uri, launch_dir, "artifacts-here", "one-run")
    tracker.log_artifact(note)
    tracker.end("FINISHED")
    return tracker.experiment_id, tracker.run_id


def test_a_sqlite_store_elsewhere_keeps_its_artifacts_beside_it_and_nothing_in_the_launch_directory(tmp_path):
    launch = tmp_path / "launch"
    launch.mkdir()
    db = tmp_path / "team" / "mlflow.db"
    _, run_id = _log_one_artifact(store(db), launch, tmp_path)
    kept = tmp_path / "team" / "mlartifacts" / "artifacts-here" / run_id / "artifacts" / "note.txt"
    assert kept.read_text() == "kept with its store"
    assert list(launch.iterdir()) == []  # no outputs/mlartifacts where the launch ran


def test_the_default_relative_store_keeps_its_artifacts_under_the_launch_directory_outputs(tmp_path):
    launch = tmp_path / "launch"
    (launch / "outputs").mkdir(parents=True)
    store(launch / "outputs" / "mlflow.db")  # the empty migrated store, at the default's place
    _, run_id = _log_one_artifact("sqlite:///outputs/mlflow.db", launch, tmp_path)
    kept = launch / "outputs" / "mlartifacts" / "artifacts-here" / run_id / "artifacts" / "note.txt"
    assert kept.read_text() == "kept with its store"
