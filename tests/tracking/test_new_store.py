"""A new local SQLite store made whole in one go (`launcher.tracking.new_store`): the same tables and schema version
as MLflow's own first open makes, nothing left beside it, an existing store or another kind untouched. The real
first launch on a new store: tests/e2e/test_cli.py::test_default_run_trains_and_logs_everything_to_mlflow
(new_store=True)."""

from __future__ import annotations

import os
import sqlite3

from support.tracking import store

from launcher.tracking.new_store import make_new_store


def schema(path) -> tuple[list[str], list[tuple]]:
    with sqlite3.connect(path) as db:
        tables = sorted(row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
        return tables, db.execute("SELECT * FROM alembic_version").fetchall()


def test_a_new_store_is_made_as_mlflow_makes_it_and_nothing_is_left_beside_it(tmp_path):
    from mlflow.tracking import MlflowClient

    made = tmp_path / "new" / "mlflow.db"
    made.parent.mkdir()
    assert make_new_store(f"sqlite:///{made}")
    assert os.listdir(made.parent) == ["mlflow.db"]
    template = tmp_path / "template.db"
    store(template)  # migrated by MLflow's own first open
    assert schema(made) == schema(template)
    client = MlflowClient(f"sqlite:///{made}")
    assert [e.name for e in client.search_experiments()] == ["Default"]
    client.create_experiment("launcher")
    assert not make_new_store(f"sqlite:///{made}")  # there is one: kept as it is
    assert {e.name for e in client.search_experiments()} == {"Default", "launcher"}


def test_only_a_new_local_sqlite_store_is_made(tmp_path, monkeypatch):
    assert not make_new_store("http://127.0.0.1:5000")
    assert not make_new_store("sqlite:///relative.db")  # the launch makes every URI absolute first
    assert not make_new_store(f"sqlite:///{tmp_path}/missing/mlflow.db")  # no such folder: MLflow says so
    assert os.listdir(tmp_path) == []

    def made_meanwhile(source, target):
        raise FileExistsError(target)

    monkeypatch.setattr(os, "link", made_meanwhile)  # another process linked its store first: that one is used
    assert not make_new_store(f"sqlite:///{tmp_path}/mlflow.db")
    assert os.listdir(tmp_path) == []
