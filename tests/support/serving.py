"""A real `mlflow models serve` on 127.0.0.1, as a person starts it, and requests to its `/invocations`."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from support.tracking import free_port


@contextlib.contextmanager
def mlflow_server(model_uri: str, tracking_uri: str, log_path: Path):
    """`mlflow models serve -m <model_uri> --env-manager local` until the block ends; yields its port. Its log
    (stdout and stderr) is `log_path`."""
    port = free_port()
    log = open(log_path, "w")  # noqa: SIM115  (closed below)
    server = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("mlflow")),
            "models",
            "serve",
            "-m",
            model_uri,
            "--env-manager",
            "local",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # As from an activated environment: the scoring server is started as `uvicorn` from PATH.
        env={
            **os.environ,
            "MLFLOW_TRACKING_URI": tracking_uri,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        },
    )
    try:
        deadline = time.time() + 180
        while True:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2).status == 200:
                    break
            except OSError:
                pass
            assert server.poll() is None and time.time() < deadline, log_path.read_text()[-3000:]
            time.sleep(1)
        yield port
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
        log.close()


def invoke(port: int, body: dict):
    """POST `body` to the server's /invocations; the response, a refusal (HTTP 4xx) included."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/invocations",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        return urllib.request.urlopen(request, timeout=60)
    except urllib.error.HTTPError as refused:
        return refused
