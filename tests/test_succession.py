"""Which MLflow run a launch without a checkpoint writes to, when its run dir remembers an earlier one: the pure
rule, then the Tracker applying it to a real SQLite store (no TensorFlow)."""

from __future__ import annotations

from conftest import store

from launcher.tracking.succession import (
    PREDECESSOR_TAG,
    STARTS_TAG,
    SUCCESSOR_TAG,
    EarlierRun,
    Succession,
    succession,
)
from launcher.tracking.tracker import Tracker

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


def _tracker(tmp_path, uri, earlier=None, params=PARAMS):
    return Tracker(uri, "launcher", "job", tmp_path / "artifacts", earlier_run_id=earlier, params=params)


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
    again = _tracker(tmp_path, uri, earlier=ghost)
    assert again.adopted and again.run_id == ghost and not again.resumed
    again.log_params(PARAMS)  # the same params again: accepted
    again.end("FINISHED")
    runs = again.client.search_runs([again.experiment_id])
    assert [(r.info.run_id, r.info.status, r.data.tags[STARTS_TAG]) for r in runs] == [(ghost, "FINISHED", "2")]


def test_the_tracker_settles_a_ghost_with_epochs_and_links_its_successor(tmp_path):
    uri = store(tmp_path / "mlflow.db")
    ghost = _ghost(tmp_path, uri, epochs=1)
    successor = _tracker(tmp_path, uri, earlier=ghost)
    assert not successor.adopted and successor.run_id != ghost
    successor.end("FINISHED")
    client = successor.client
    old, new = client.get_run(ghost), client.get_run(successor.run_id)
    assert old.info.status == "KILLED"  # not RUNNING forever
    assert old.data.tags[SUCCESSOR_TAG] == successor.run_id and new.data.tags[PREDECESSOR_TAG] == ghost


def test_an_earlier_run_in_another_store_is_ignored(tmp_path):
    ghost = _ghost(tmp_path, store(tmp_path / "one.db"), epochs=0)
    other = _tracker(tmp_path, store(tmp_path / "two.db"), earlier=ghost)
    assert other.decision is None and other.run_id != ghost
    other.end("FINISHED")
