"""A finished launch exits 0: no thread of the launcher's is inside TensorFlow when the interpreter shuts down
(`launcher.background`; issue 67: float16 + mirrored ended in exit 134 after its Done block)."""

from __future__ import annotations

import json
import threading
import time

import pytest
from support.cli import run_python
from support.tracking import runs_in

from launcher import background


def test_settle_waits_for_every_thread_started_and_names_one_that_does_not_end():
    release, hung = threading.Event(), threading.Event()
    background.start(lambda: (time.sleep(0.3), release.wait()), "slow-drop")
    background.start(hung.wait, "hung-drop")
    release.set()
    try:
        left = background.settle(timeout=1.0)
        assert left == ["hung-drop"]
        assert [t.name for t in background.running()] == ["hung-drop"]
    finally:
        hung.set()
    assert background.settle(timeout=5.0) == []
    assert background.running() == []


# A thread inside a TensorFlow call that releases Python's lock (a gfile read, a distributed iterator made) when the
# interpreter finalizes aborts the process: `terminate called after throwing an instance of '#'`, exit 134 (3 of 3
# on an AMD EPYC with this snippet when the settle is left out). The entry point settles before it returns.
IN_TENSORFLOW_AT_EXIT = """
import tensorflow as tf
from launcher import background
path = {path!r}
def read():
    for _ in range(8):
        tf.io.gfile.GFile(path, "rb").read()
background.start(read, "reader")
print("left", background.settle())
"""


def test_a_thread_inside_tensorflow_when_the_launch_ends_is_waited_for_and_the_process_exits_0(tmp_path):
    path = tmp_path / "blob"
    path.write_bytes(b"\0" * 50_000_000)
    ran = run_python(IN_TENSORFLOW_AT_EXIT.format(path=str(path)))
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "left []" in ran.stdout
    assert "exception not rethrown" not in ran.stderr


# The issue's command, kept small: float16 + MirroredStrategy, checkpoints every epoch, determinism on.
ISSUE_67 = (
    "train.epochs=2",
    "dataset=synthetic",
    "dataset.kind=tabular",
    "dataset.shape=[16]",
    "dataset.num_examples=600",
    "model=mlp",
    "model.hidden_units=[32]",
    "checkpoint=frequent",
    "deterministic=true",
    "precision=mixed",
    "strategy=mirrored",
    "xla=false",
)


@pytest.mark.slow
@pytest.mark.parametrize("attempt", range(3))
def test_a_finished_float16_mirrored_run_exits_0_from_a_cold_start(cli, tmp_path, attempt):
    ran = cli(*ISSUE_67, cold=True)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "exception not rethrown" not in ran.stderr
    outcome = json.loads((tmp_path / "run" / "outcome.json").read_text())
    assert (outcome["status"], outcome["exit_code"]) == ("FINISHED", 0)
    assert [r.info.status for r in runs_in(tmp_path / "mlflow.db")] == ["FINISHED"]
