"""A launch that continues an MLflow run logs each (metric, step) once: the points an earlier launch logged past
the checkpoint it resumes from, or before a start-over in the same run, are not logged again
(`launcher.tracking.held`). A real SQLite store (no TensorFlow)."""

from __future__ import annotations

from support.tracking import store

from launcher.tracking.tracker import Tracker

PARAMS = {"precision.name": "fp32", "train.epochs": "2"}


def _tracker(tmp_path, uri, resume_run_id=None):
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    return Tracker(
        uri, "launcher", "job", tmp_path / "artifacts", resume_run_id, run_dir=run_dir, remember=True, params=PARAMS
    )


def _killed(tracker, points: dict[int, dict]) -> str:
    """`points` (step -> metrics) delivered, then the process is gone: no end status was ever written."""
    tracker.log_params(PARAMS)
    for step, metrics in points.items():
        tracker.log_metrics(metrics, step=step)
    tracker.flush()
    tracker.delivery.close(5)
    return tracker.run_id


def _steps(tracker, key: str) -> list[int]:
    return sorted(m.step for m in tracker.client.get_metric_history(tracker.run_id, key))


def test_a_resumed_launch_leaves_out_the_points_the_killed_one_logged_past_its_checkpoint(tmp_path):
    uri = store(tmp_path / "mlflow.db")
    # Killed at step 30 with its last checkpoint at 23: it had logged step/loss at 25 and a validation at 30.
    run_id = _killed(
        _tracker(tmp_path, uri),
        {20: {"step/loss": 0.9}, 23: {"val_loss": 0.8}, 25: {"step/loss": 0.7}, 30: {"val_loss": 0.6}},
    )
    resumed = _tracker(tmp_path, uri, resume_run_id=run_id)
    assert resumed.resumed and resumed.run_id == run_id
    again = {25: {"step/loss": 0.71}, 30: {"val_loss": 0.61, "step/loss": 0.5}, 35: {"step/loss": 0.4}}
    for step, metrics in again.items():
        resumed.log_metrics(metrics, step=step)
    resumed.end("FINISHED")
    assert _steps(resumed, "step/loss") == [20, 25, 30, 35]
    assert _steps(resumed, "val_loss") == [23, 30]
    # The earlier launch's point stays (MLflow cannot delete one); a key new at that step is still logged.
    assert [m.value for m in resumed.client.get_metric_history(run_id, "val_loss")] == [0.8, 0.6]


def test_a_start_over_in_the_same_run_logs_only_the_steps_it_did_not_reach_before(tmp_path):
    uri = store(tmp_path / "mlflow.db")
    # Killed before its first checkpoint and epoch end: step and validation points, no epoch.
    run_id = _killed(_tracker(tmp_path, uri), {5: {"step/loss": 1.0}, 10: {"step/loss": 0.9, "val_loss": 0.95}})
    again = _tracker(tmp_path, uri)
    assert again.adopted and again.run_id == run_id
    for step in (5, 10, 15):
        again.log_metrics({"step/loss": 1.0 - step / 100}, step=step)
    again.log_metrics({"val_loss": 0.9}, step=10)
    again.log_metrics({"val_loss": 0.85}, step=20)
    again.end("FINISHED")
    assert _steps(again, "step/loss") == [5, 10, 15]
    assert _steps(again, "val_loss") == [10, 20]
