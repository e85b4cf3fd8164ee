"""The MLflow UI addresses the launcher prints open the runs table (the machine-learning view), never a password."""

from __future__ import annotations

import json

from launcher.tracking.links import LOCAL_UI, MlflowUi, SweepLinks


def test_a_server_s_links_are_its_pages_in_the_machine_learning_view_without_credentials():
    ui = MlflowUi.of("https://alice:s3cret@mlflow.example.com:8443/")
    assert ui.serve is None and "s3cret" not in ui.base and ui.base.endswith("mlflow.example.com:8443")
    assert ui.experiment("3") == f"{ui.base}/#/experiments/3?workflowType=machine_learning"
    assert ui.run("3", "abc") == f"{ui.base}/#/experiments/3/runs/abc?workflowType=machine_learning"


def test_a_local_store_s_links_are_where_mlflow_ui_serves_with_the_command():
    ui = MlflowUi.of("sqlite:////work/outputs/mlflow.db")
    assert ui.base == LOCAL_UI == "http://127.0.0.1:5000"
    assert ui.serving() == "serve it first: mlflow ui --backend-store-uri sqlite:////work/outputs/mlflow.db"


def test_a_sweep_links_its_jobs_side_by_side_and_its_note_links_relative_to_the_page():
    links = SweepLinks(MlflowUi.of("http://127.0.0.1:5005"), "2", "parent", ("a", "b"))
    base, query = links.compare.split("?", 1)
    assert base == "http://127.0.0.1:5005/#/compare-runs"
    runs, experiments = (part.split("=", 1)[1] for part in query.split("&"))
    assert json.loads(runs) == ["a", "b"] and json.loads(experiments) == ["2"]
    assert links.parent.endswith("/#/experiments/2/runs/parent?workflowType=machine_learning")
    text = links.console()
    assert links.compare in text and links.parent in text and links.runs in text and "mlflow ui" not in text
    note = links.note()
    assert "](#/compare-runs?runs=" in note and "](#/experiments/2?workflowType=machine_learning)" in note
    assert "127.0.0.1" not in note  # the UI may be served anywhere
    local = SweepLinks(MlflowUi.of("sqlite:///m.db"), "2", "parent", ("a",))
    assert "serve it first: mlflow ui --backend-store-uri sqlite:///m.db" in local.console()
