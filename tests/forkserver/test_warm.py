"""The suite's warm launches (tests/warm.py) are the processes a cold `python -m launcher` would be: the same
console and exit code, a pid, session and signals of their own; and a start whose environment TensorFlow reads at
import is cold."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import warm
from support.config import ROOT, TINY
from support.tracking import store

from launcher.forkserver import ForkedProcess


def launch(tmp_path, name: str, *overrides: str) -> list[str]:
    return [sys.executable, "-m", "launcher", f"hydra.run.dir={tmp_path / name}", *overrides]


def same_console(text: str, tmp_path) -> str:
    return text.replace(str(tmp_path / "warm"), "<run>").replace(str(tmp_path / "cold"), "<run>")


@pytest.fixture(autouse=True)
def warm_even_if_told_cold(monkeypatch):
    """These tests are about the warm start: they make it whatever LAUNCHER_TEST_COLD says."""
    monkeypatch.delenv(warm.COLD_ENV, raising=False)


def test_a_warm_launch_prints_and_exits_as_a_cold_one(tmp_path):
    """The Plan of float16 + mirrored + XLA (TensorFlow's runtime made in the child: two logical devices), then a
    refusal: line for line the same console and exit code."""
    for overrides, code in (
        (["explain=true", "precision=mixed", "strategy=mirrored", "xla=true"], 0),
        (["precision=mixed", "loss_scale=none", "tracking.enabled=false"], 2),
    ):
        warm_done = warm.run(launch(tmp_path, "warm", *overrides), cwd=ROOT, timeout=300)
        cold_done = warm.run(launch(tmp_path, "cold", *overrides), cwd=ROOT, timeout=300, cold=True)
        assert warm_done.returncode == cold_done.returncode == code, warm_done.stderr[-2000:]
        assert same_console(warm_done.stdout, tmp_path) == same_console(cold_done.stdout, tmp_path)
        assert same_console(warm_done.stderr, tmp_path) == same_console(cold_done.stderr, tmp_path)
    assert "replicas" in warm_done.stdout or "Invalid configuration" in warm_done.stderr


def test_a_warm_launch_is_a_process_of_its_own_with_its_session_and_signals(tmp_path):
    """Not the test's process nor the server's; with start_new_session it leads its own session from the moment
    Popen returns (as after an exec); SIGKILL to that session's group, while it waits in training, is its exit
    status."""
    resume = tmp_path / "never"
    env = {**os.environ, "LAUNCHER_FAULT": "PAUSE@steps:2", "LAUNCHER_FAULT_RESUME": str(resume)}
    args = launch(tmp_path, "run", *TINY, f"tracking.uri={store(tmp_path / 'mlflow.db')}")
    process = warm.Popen(
        args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    assert isinstance(process, ForkedProcess)
    assert process.pid not in (os.getpid(), warm._server[0].process.pid)
    assert os.getsid(process.pid) == process.pid
    deadline = time.time() + 240
    while "paused at steps 2" not in (line := process.stdout.readline()):
        assert line and time.time() < deadline, "the launch ended before its pause"
    os.killpg(process.pid, signal.SIGKILL)
    assert process.wait(60) == -signal.SIGKILL
    process.stdout.close()


@pytest.mark.parametrize(
    ("extra", "env", "warm_start"),
    [
        ([], {}, True),
        ([], {"TF_CONFIG": "{}"}, True),  # read when the strategy is made, in the child
        ([], {"LAUNCHER_FAULT": "RAISE@steps:1"}, True),
        ([], {"TF_ENABLE_ONEDNN_OPTS": "0"}, False),  # read when TensorFlow loads
        ([], {"PYTHONPATH": "/elsewhere"}, False),
        ([], {"KERAS_HOME": "/elsewhere"}, False),
        (["tf_logs=true"], {}, False),  # TensorFlow's start-up lines are printed by its import
        (["-m", "precision=fp32,bf16"], {}, False),  # a sweep's process records that it never loaded TensorFlow
    ],
)
def test_a_start_is_warm_only_when_nothing_read_at_import_differs(extra, env, warm_start):
    """Against the server's own environment, as this test process has it wherever it runs in the suite: a launch
    with no variable of its own starts warm (an earlier launch or test left nothing behind that turns it cold)."""
    given, imported_under = {**os.environ, **env}, warm.baseline()
    differ = sorted(k for k in set(given) | set(imported_under) if given.get(k) != imported_under.get(k))
    assert warm.forks_alike(["explain=true", *extra], given, imported_under) is warm_start, differ
    assert warm.launcher_args([sys.executable, "-c", "pass"]) is None  # anything but the launcher: cold
