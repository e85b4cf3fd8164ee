"""The forkserver checks before each fork that the fork is safe, rather than assuming it: one thread (another's
locks would stay held in the child) and no TensorFlow context or runtime (the child makes its own). A live server
reports both; one that imported something that starts a thread starts its children cold, and says why.

The dependencies are unpinned (`tensorflow>=2.16`, `mlflow>=2.12`): a new release that starts a thread when it is
imported makes the server unsafe the same way the thread started here does (`sitecustomize`, which the
interpreter imports as it starts, before the server's own imports).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading

import pytest
import warm
from support.config import ROOT

from launcher import forkserver
from launcher.forkserver import routing
from launcher.forkserver.server import fork_hazard, tensorflow_state

THREAD_AT_IMPORT = """
import threading

threading.Thread(target=threading.Event().wait, name="started-at-import", daemon=True).start()
"""


@pytest.fixture(autouse=True)
def the_suites_server_even_if_told_cold(monkeypatch):
    """These tests ask this test process's server for forks: they have it whatever LAUNCHER_TEST_COLD says, as
    tests/forkserver/test_warm.py does."""
    monkeypatch.delenv(warm.COLD_ENV, raising=False)


def health(path: str) -> dict:
    """What the server at `path` checks before each fork, as it stands."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        forkserver.send(sock, {"op": "health"})
        answer, _ = forkserver.receive(sock)
    return answer


def test_the_check_sees_a_tensorflow_context_or_runtime_and_another_thread():
    """This test process made TensorFlow's eager context (conftest's two logical devices), then its runtime (the
    first op), and runs other threads: the check the server makes before each fork sees each."""
    import tensorflow as tf

    assert tensorflow_state() in ("eager context made", "runtime initialised")
    tf.constant(1.0)
    assert tensorflow_state() == "runtime initialised"
    assert fork_hazard() is not None
    waiting = threading.Event()
    thread = threading.Thread(target=waiting.wait, name="another")
    thread.start()
    try:
        hazard = fork_hazard()
    finally:
        waiting.set()
        thread.join()
    assert hazard is not None and "threads" in hazard and "another" in hazard, hazard


@pytest.mark.e2e  # this test process's server, and a launch it forks
def test_a_live_server_forks_from_one_thread_and_no_tensorflow_runtime(tmp_path):
    """TensorFlow, Keras, MLflow, pandas and scikit-learn imported (OpenBLAS's workers and pyarrow's allocator thread
    ended or never started), and so after it forked a launch that made its own runtime."""
    server = warm._warm_server()
    assert server is not None
    args = [sys.executable, "-m", "launcher", "explain=true", f"hydra.run.dir={tmp_path / 'run'}"]
    child = forkserver.ForkedProcess(server.path, args, cwd=ROOT, env=dict(os.environ))
    assert child.wait(300) == 0
    answer = health(server.path)
    assert answer["threads"] == 1, answer
    assert answer["tensorflow"] is None, answer


@pytest.mark.e2e  # a server of its own, whose interpreter starts a thread before it imports anything
def test_a_server_running_another_thread_starts_its_children_cold_and_says_why(tmp_path, monkeypatch, caplog):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(THREAD_AT_IMPORT)
    path = os.pathsep.join(p for p in (str(tmp_path / "site"), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    server = forkserver.Server(env)
    try:
        answer = health(server.path)
        assert answer["threads"] == 2 and answer["tensorflow"] is None, answer
        args = [sys.executable, "-m", "launcher", "explain=true", f"hydra.run.dir={tmp_path / 'run'}"]
        with pytest.raises(forkserver.Refused, match=r"a fork is not safe: 2 threads \(.*Python: started-at-import"):
            forkserver.ForkedProcess(server.path, args, cwd=ROOT, env=env)

        # The launcher's own route: that server refuses, and so would this process's own (started under the same
        # environment: the same server here), so the start is a new interpreter, and the debug log says why.
        cold = []
        monkeypatch.setattr(routing, "_own_server", lambda env: server.path)
        monkeypatch.setattr(routing.subprocess, "Popen", lambda args, **options: cold.append(args) or "cold")
        caplog.set_level(logging.DEBUG, logger="launcher.forkserver")
        started = forkserver.start(args, cwd=ROOT, env={**env, forkserver.SOCKET_ENV: server.path})
    finally:
        server.close()
    assert started == "cold" and cold == [args]
    (record,) = [r for r in caplog.records if r.name == "launcher.forkserver.routing"]
    assert record.levelno == logging.DEBUG
    assert "starts cold: a fork is not safe: 2 threads" in record.getMessage()
    assert "started-at-import" in record.getMessage()


@pytest.mark.parametrize("spelled", ["tf_logs=true", "tf_logs=True", "++tf_logs=TRUE", "tf_logs='true'"])
def test_tf_logs_true_starts_cold_however_hydra_spells_it(monkeypatch, caplog, spelled):
    """A sweep's jobs are given Hydra's spelling of their overrides (`tf_logs=True`): before, such a job was forked
    and its TensorFlow start-up lines, printed by the import, were lost. The debug log says why it is cold."""
    cold = []
    monkeypatch.setattr(routing, "_own_server", lambda env: pytest.fail("no server may start"))
    monkeypatch.setattr(routing.subprocess, "Popen", lambda args, **options: cold.append(args) or "cold")
    caplog.set_level(logging.DEBUG, logger="launcher.forkserver")
    args = [sys.executable, "-m", "launcher", "explain=true", spelled]
    assert forkserver.start(args, cwd=ROOT, env={**os.environ, forkserver.SOCKET_ENV: "/nowhere"}) == "cold"
    assert cold == [args]
    assert f"starts cold: {spelled} (TensorFlow's start-up lines come from its import)" in caplog.text
