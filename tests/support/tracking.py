"""MLflow and object stores the tests log to: SQLite stores made from a migrated template, a real `mlflow server`
on 127.0.0.1 (one shared by the tests in its xdist group), and an S3-compatible server (moto)."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from launcher.supervise.local_workers import free_ports  # the product's own; re-exported to tests

_STORE_TEMPLATE: list[Path] = []


def store(path: Path) -> str:
    """The URI of a SQLite MLflow store at `path`, made from an empty store migrated once per test process:
    MLflow's first open of a new store runs its schema migrations (~1.5 s a launch). A test of a first run on a
    truly new store gives a path that does not exist instead."""
    if not _STORE_TEMPLATE:
        from mlflow.tracking import MlflowClient

        folder = Path(tempfile.mkdtemp(prefix="launcher-test-store-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        MlflowClient(f"sqlite:///{folder}/empty.db").search_experiments()
        _STORE_TEMPLATE.append(folder / "empty.db")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_STORE_TEMPLATE[0], path)
    return f"sqlite:///{path}"


def runs_in(path: Path) -> list:
    """Every MLflow run in the SQLite store at `path`, of every experiment (none when there is no store)."""
    if not path.exists():
        return []
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{path}")
    return client.search_runs([e.experiment_id for e in client.search_experiments()])


def free_port() -> int:
    return free_ports(1)[0]


class MlflowServer:
    """A real `mlflow server` on 127.0.0.1 over a SQLite store in `folder`; stop and start it again
    on the same port and store (a tracking outage)."""

    def __init__(self, folder: Path, port: int | None = None):
        self.folder, self.port = folder, port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.artifacts = folder / "artifacts"
        self.proc = None

    def start(self) -> MlflowServer:
        self.log = open(self.folder / "server.log", "a")  # noqa: SIM115  (closed in stop)
        mlflow = Path(sys.executable).with_name("mlflow")
        self.proc = subprocess.Popen(
            [
                str(mlflow),
                "server",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
                "--backend-store-uri",
                store(self.folder / "server.db"),
                "--artifacts-destination",
                str(self.artifacts),
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # No job consumers: MLflow 3 starts four huey processes per server for its GenAI jobs, which the
            # launcher never uses and which took CPU from the runs under test.
            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        )
        deadline = time.time() + 90
        while True:
            try:
                if urllib.request.urlopen(f"{self.url}/health", timeout=2).read() == b"OK":
                    return self
            except OSError:
                pass
            if time.time() > deadline or self.proc.poll() is not None:
                self.stop()
                pytest.fail(f"mlflow server did not start: {(self.folder / 'server.log').read_text()[-2000:]}")
            time.sleep(0.5)

    def stop(self) -> None:
        """Stop the server and every worker process it started (their session)."""
        if self.proc is None:
            return
        import signal

        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None
        self.log.close()


SHARED_SERVER_GROUP = "tracking-server"  # the xdist group of every test that uses `shared_mlflow_server`


@pytest.fixture(scope="session")
def shared_mlflow_server(tmp_path_factory):
    """One real `mlflow server` for the tests that only log to one, each in an experiment of its own (a start is
    ~14 CPU-s: the CLI and its uvicorn worker each import MLflow). Its tests are in the xdist group
    `SHARED_SERVER_GROUP`, so one test process starts it once."""
    server = MlflowServer(tmp_path_factory.mktemp("shared-server")).start()
    yield server.url, server.artifacts
    server.stop()


@pytest.fixture
def s3_server(tmp_path, monkeypatch):
    """An S3-compatible server (moto) on 127.0.0.1 with an empty bucket `ckpts`; this process and the launches it
    starts reach it through the environment variables boto reads (never the person's ~/.aws)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    endpoint = "http://{}:{}".format(*server.get_host_and_port())
    # moto keeps its buckets per process, across servers: start each test from an empty store.
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=10).read()
    for key, value in {
        "AWS_ACCESS_KEY_ID": "launcher-test-key",
        "AWS_SECRET_ACCESS_KEY": "launcher-test-secret-do-not-log",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "MLFLOW_S3_ENDPOINT_URL": endpoint,
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
    }.items():
        monkeypatch.setenv(key, value)
    import fsspec

    fs, _ = fsspec.core.url_to_fs("s3://ckpts", skip_instance_cache=True)
    fs.mkdir("ckpts")
    yield endpoint
    server.stop()
