"""Tracking against a real `mlflow server` on 127.0.0.1 works like the local SQLite store."""

from __future__ import annotations

import pytest
from support.config import TINY
from support.tracking import SHARED_SERVER_GROUP


@pytest.mark.slow
@pytest.mark.xdist_group(SHARED_SERVER_GROUP)
def test_run_logs_to_a_real_tracking_server(cli_here, shared_mlflow_server):
    url, artifacts = shared_mlflow_server
    done = cli_here(
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
    assert list(artifacts.rglob(f"{run.info.run_id}/artifacts/plan.yaml"))


@pytest.mark.slow
@pytest.mark.xdist_group(SHARED_SERVER_GROUP)
def test_preempted_run_is_killed_on_the_server_and_resumes_into_the_same_run(cli, cli_here, shared_mlflow_server):
    url, _ = shared_mlflow_server
    args = [*TINY, "precision=fp32", "xla=false", f"tracking.uri={url}", "tracking.experiment=preempted"]
    stopped = cli(*args, env={"LAUNCHER_FAULT": "TERM@steps:5"})
    assert stopped.returncode == 143, stopped.stderr[-3000:]

    from mlflow.tracking import MlflowClient

    client = MlflowClient(url)
    experiment = client.get_experiment_by_name("preempted").experiment_id
    runs = client.search_runs([experiment])
    assert [r.info.status for r in runs] == ["KILLED"]
    resumed = cli_here(*args)  # the same command again, in this process
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Resuming at epoch 1, step 5 (global step 5)" in resumed.stdout
    again = client.search_runs([experiment])
    assert [(r.info.run_id, r.info.status) for r in again] == [(runs[0].info.run_id, "FINISHED")]
    assert [m.step for m in client.get_metric_history(runs[0].info.run_id, "val_loss")] == [0, 1]
