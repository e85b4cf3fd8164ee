"""Tracking against a real `mlflow server` on 127.0.0.1 works like the local SQLite store."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import TINY


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path):
    port = free_port()
    log = open(tmp_path / "server.log", "w")  # noqa: SIM115  (closed below)
    mlflow = Path(sys.executable).with_name("mlflow")
    proc = subprocess.Popen(
        [str(mlflow), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{tmp_path}/server.db", "--artifacts-destination", str(tmp_path / "artifacts")],
        stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while True:
        try:
            if urllib.request.urlopen(f"{url}/health", timeout=2).read() == b"OK":
                break
        except OSError:
            pass
        if time.time() > deadline or proc.poll() is not None:
            proc.kill()
            log.close()
            pytest.fail(f"mlflow server did not start: {(tmp_path / 'server.log').read_text()[-2000:]}")
        time.sleep(0.5)
    yield url, tmp_path / "artifacts"
    proc.terminate()
    proc.wait(timeout=30)
    log.close()


@pytest.mark.slow
def test_run_logs_to_a_real_tracking_server(cli, mlflow_server):
    url, artifacts = mlflow_server
    done = cli(*TINY, "precision=fp32", f"tracking.uri={url}", "tracking.experiment=remote", "tracking.run_name=over-http")
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
