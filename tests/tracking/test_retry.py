"""SQLite allows one writer: the experiment lookup/creation every launch and sweep job makes retries a locked
database, and a parallel job that created the experiment first is no error."""

from __future__ import annotations

import pytest
from support.tracking import store

from launcher.tracking.client import experiment_id, with_retry


class LockedThenFine:
    """A client whose first `locked` calls of each method raise SQLite's 'database is locked'."""

    def __init__(self, locked: int = 2, exists_after_create_race: bool = False):
        self.locked, self.calls, self.race = locked, {}, exists_after_create_race
        self.created = False

    def _maybe_locked(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if self.calls[name] <= self.locked:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")

    def get_experiment_by_name(self, name):
        self._maybe_locked("get")
        if self.created:
            return type("Experiment", (), {"experiment_id": "7", "tags": {"mlflow.experimentKind": "x"}})()
        return None

    def create_experiment(self, name, artifact_location=None, tags=None):
        self._maybe_locked("create")
        if self.race:  # another job created it between our lookup and our create
            self.created = True
            raise RuntimeError("RESOURCE_ALREADY_EXISTS: Experiment 'launcher' already exists.")
        self.created = True
        return "7"


def test_a_locked_database_is_retried_when_the_experiment_is_looked_up_and_created(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda _: None)
    client = LockedThenFine(locked=2)
    assert experiment_id(client, "launcher", None) == "7"
    assert client.calls == {"get": 3, "create": 3}


def test_an_experiment_created_by_a_parallel_job_meanwhile_is_used(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda _: None)
    client = LockedThenFine(locked=0, exists_after_create_race=True)
    assert experiment_id(client, "launcher", None) == "7"


def test_another_error_is_raised_not_hidden(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda _: None)

    class Broken(LockedThenFine):
        def create_experiment(self, name, artifact_location=None, tags=None):
            raise PermissionError("read-only store")

    with pytest.raises(PermissionError, match="read-only"):
        experiment_id(Broken(locked=0), "launcher", None)


def test_the_experiment_is_made_of_the_model_training_kind_and_an_older_one_gets_the_tag(tmp_path):
    """MLflow 3's UI opens an experiment in its GenAI view unless it is of the model-training kind; a kind someone
    set is kept."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store(tmp_path / "m.db"))
    made = experiment_id(client, "launcher", None)
    assert client.get_experiment(made).tags["mlflow.experimentKind"] == "custom_model_development"
    older = client.create_experiment("older")
    assert experiment_id(client, "older", None) == older
    assert client.get_experiment(older).tags["mlflow.experimentKind"] == "custom_model_development"
    chosen = client.create_experiment("chosen", tags={"mlflow.experimentKind": "genai_development"})
    experiment_id(client, "chosen", None)
    assert client.get_experiment(chosen).tags["mlflow.experimentKind"] == "genai_development"


def test_a_dataset_a_parallel_job_inserted_first_is_retried_not_a_failure(monkeypatch):
    """Parallel sweep jobs log the same dataset into one SQLite store: the loser of the insert race got SQLite's
    UNIQUE error and its job failed (seen once in the suite); a retry finds the dataset and links it."""
    monkeypatch.setattr("time.sleep", lambda _: None)
    calls = []

    def log_inputs():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError(
                "(sqlite3.IntegrityError) UNIQUE constraint failed: datasets.experiment_id, datasets.name"
            )
        return "linked"

    assert with_retry(log_inputs) == "linked" and len(calls) == 2
    with pytest.raises(RuntimeError, match="UNIQUE constraint failed: runs"):
        with_retry(lambda: (_ for _ in ()).throw(RuntimeError("UNIQUE constraint failed: runs.run_uuid")))
