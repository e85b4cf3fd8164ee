"""Tracking against a real `mlflow server` on 127.0.0.1 works like the local SQLite store."""

from __future__ import annotations

import pytest
from conftest import TINY


@pytest.mark.slow
def test_run_logs_to_a_real_tracking_server(cli, mlflow_server):
    url, artifacts = mlflow_server
    done = cli(
        *TINY, "precision=fp32", f"tracking.uri={url}", "tracking.experiment=remote", "tracking.run_name=over-http"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert url in done.stdout

    from mlflow.tracking import MlflowClient

    client = MlflowClient(url)
    runs = client.search_runs([client.get_experiment_by_name("remote").experiment_id])
    assert [r.info.run_name for r in runs] == ["over-http"]
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.tags["plan.precision"] == "fp32"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "val_loss")] == [0, 1]
    assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"plan.yaml", "config.yaml", "model"}
    # Artifacts went through the server into its artifact destination.
    assert list(artifacts.rglob("plan.yaml"))
