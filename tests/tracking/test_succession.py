"""Which MLflow run a launch without a checkpoint writes to, when its run dir remembers an earlier one: the pure
rule, then the Tracker applying it to a real SQLite store (no TensorFlow)."""

from __future__ import annotations

import pytest
from support.tracking import store

from launcher.files import RUN_FILE, read_json
from launcher.tracking.succession import (
    PREDECESSOR_TAG,
    STARTS_TAG,
    SUCCESSOR_TAG,
    EarlierRun,
    Succession,
    pending_creation,
    remembered_run,
    succession,
)
from launcher.tracking.tracker import Tracker, run_dir_run

PARAMS = {"precision.name": "mixed", "train.epochs": "2"}


def test_no_earlier_run_or_a_finished_one_means_a_new_run():
    assert succession(None, PARAMS).succession is Succession.NEW
    finished = EarlierRun("r1", "FINISHED", epochs_logged=2, params=PARAMS)
    assert succession(finished, PARAMS).succession is Succession.NEW


def test_a_run_gone_before_its_first_epoch_is_trained_again_in_place_whatever_its_end():
    for status in ("RUNNING", "KILLED", "FAILED"):
        decision = succession(EarlierRun("r1", status, epochs_logged=0, params=PARAMS), PARAMS)
        assert decision.succession is Succession.ADOPT, status
        assert "r1" in decision.reason and "starts over" in decision.reason
    # Params it never got (killed before they were logged) are no conflict.
    assert succession(EarlierRun("r1", "RUNNING", 0, params={}), PARAMS).succession is Succession.ADOPT


def test_logged_epochs_or_other_params_make_a_linked_successor():
    logged = succession(EarlierRun("r1", "RUNNING", epochs_logged=1, params=PARAMS), PARAMS)
    assert logged.succession is Succession.SUCCEED and "log them twice" in logged.reason
    other = succession(EarlierRun("r1", "RUNNING", 0, params={**PARAMS, "train.epochs": "5"}), PARAMS)
    assert other.succession is Succession.SUCCEED and "train.epochs" in other.reason


def _tracker(tmp_path, uri, params=PARAMS):
    """A training launch's tracker: its run dir (tmp_path/run) records its run."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    return Tracker(uri, "launcher", "job", tmp_path / "artifacts", run_dir=run_dir, remember=True, params=params)


def _ghost(tmp_path, uri, epochs: int):
    """A run left RUNNING by a process that died, with `epochs` epoch points of `loss`."""
    ghost = _tracker(tmp_path, uri)
    ghost.log_params(PARAMS)
    for epoch in range(epochs):
        ghost.log_metrics({"loss": 1.0 / (epoch + 1)}, step=epoch)
    ghost.flush()
    ghost.delivery.close(5)  # the process is gone: no end status was ever written
    return ghost.run_id


def test_the_tracker_trains_again_in_a_ghost_that_logged_no_epoch(tmp_path):
    uri = store(tmp_path / "mlflow.db")
    ghost = _ghost(tmp_path, uri, epochs=0)
    again = _tracker(tmp_path, uri)
    assert again.adopted and again.run_id == ghost and not again.resumed
    again.log_params(PARAMS)  # the same params again: accepted
    again.end("FINISHED")
    runs = again.client.search_runs([again.experiment_id])
    assert [(r.info.run_id, r.info.status, r.data.tags[STARTS_TAG]) for r in runs] == [(ghost, "FINISHED", "2")]


def test_the_tracker_settles_a_ghost_with_epochs_and_links_its_successor(tmp_path):
    uri = store(tmp_path / "mlflow.db")
    ghost = _ghost(tmp_path, uri, epochs=1)
    successor = _tracker(tmp_path, uri)
    assert not successor.adopted and successor.run_id != ghost
    successor.end("FINISHED")
    client = successor.client
    old, new = client.get_run(ghost), client.get_run(successor.run_id)
    assert old.info.status == "KILLED"  # not RUNNING forever
    assert old.data.tags[SUCCESSOR_TAG] == successor.run_id and new.data.tags[PREDECESSOR_TAG] == ghost


def test_an_earlier_run_in_another_store_is_ignored(tmp_path):
    ghost = _ghost(tmp_path, store(tmp_path / "one.db"), epochs=0)
    other = _tracker(tmp_path, store(tmp_path / "two.db"))
    assert other.decision is None and other.run_id != ghost
    other.end("FINISHED")


class _Killed(BaseException):
    """What SIGKILL does to a launch, at the one point a test names."""


def _killed_before_the_record(tmp_path, uri, monkeypatch) -> str:
    """A launch killed after MLflow made its run and before the run dir recorded it; the run it made."""
    from mlflow.tracking import MlflowClient

    made = []

    real_create = MlflowClient.create_run

    def create_then_die(self, *args, **kwargs):
        made.append(real_create(self, *args, **kwargs).info.run_id)
        raise _Killed

    with monkeypatch.context() as patch:
        patch.setattr(MlflowClient, "create_run", create_then_die)
        with pytest.raises(_Killed):
            _tracker(tmp_path, uri)
    return made[0]


def test_a_launch_killed_between_mlflow_making_its_run_and_the_record_leaves_no_orphan(tmp_path, monkeypatch):
    uri = store(tmp_path / "mlflow.db")
    orphan = _killed_before_the_record(tmp_path, uri, monkeypatch)
    assert remembered_run(tmp_path / "run") is None and pending_creation(tmp_path / "run") is not None
    again = _tracker(tmp_path, uri)
    assert again.adopted and again.run_id == orphan  # found by its creation token, trained in again
    assert read_json(tmp_path / "run" / RUN_FILE) == {"run_id": orphan, "experiment_id": again.experiment_id}
    again.end("FINISHED")
    runs = again.client.search_runs([again.experiment_id])
    assert [(r.info.run_id, r.info.status) for r in runs] == [(orphan, "FINISHED")]  # one run for one training


def test_a_successor_killed_while_it_was_made_is_trained_in_and_linked_to_its_predecessor(tmp_path, monkeypatch):
    uri = store(tmp_path / "mlflow.db")
    ghost = _ghost(tmp_path, uri, epochs=1)  # a successor is due: the ghost logged an epoch
    successor = _killed_before_the_record(tmp_path, uri, monkeypatch)
    assert remembered_run(tmp_path / "run") == ghost  # still the predecessor, until the successor is recorded
    again = _tracker(tmp_path, uri)
    assert again.adopted and again.run_id == successor
    again.end("FINISHED")
    client = again.client
    old, new = client.get_run(ghost), client.get_run(successor)
    assert old.info.status == "KILLED" and old.data.tags[SUCCESSOR_TAG] == successor
    assert new.data.tags[PREDECESSOR_TAG] == ghost and new.info.status == "FINISHED"
    assert len(client.search_runs([again.experiment_id])) == 2


def test_a_creation_mlflow_never_made_falls_back_to_the_remembered_run(tmp_path, monkeypatch):
    uri = store(tmp_path / "mlflow.db")
    ghost = _ghost(tmp_path, uri, epochs=1)
    from mlflow.tracking import MlflowClient

    def die(self, *args, **kwargs):
        raise _Killed

    with monkeypatch.context() as patch:
        patch.setattr(MlflowClient, "create_run", die)
        with pytest.raises(_Killed):
            _tracker(tmp_path, uri)
    assert pending_creation(tmp_path / "run") is not None
    assert run_dir_run(MlflowClient(uri), tmp_path / "run") == ghost
