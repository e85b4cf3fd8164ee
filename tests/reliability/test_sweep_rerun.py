"""Re-running the same named sweep continues it: finished jobs skipped, a killed job resumed from its
checkpoint into the same MLflow child run, a second sweeper on the live sweep refused, a finished sweep's summary
logged once (a search's study: tests/reliability/test_search_sweeps.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import warm
from support.config import ROOT
from support.tracking import store

from launcher.files import OUTCOME_FILE, read_json

# Job 0 (batch 32) saves at steps 45 and 90; job 1 (batch 64) at 23 and 46: a fault at ckpt-23 is job 1's, and
# its rerun trains its second (last) epoch.
# (xla=false: the ragged last batch is trained on, on every machine.) No export or logged MLflow model (~1.5 s a
# job): the rerun is under test, not what a job ships.
SWEEP = [
    "-m",
    "name=rerun",
    "scaling.batch_size=32,64",
    "model.hidden_units=[16]",
    "train.epochs=2",
    "xla=false",
    "checkpoint.export_model=false",
    "tracking.log_model=false",
]


def _command(tmp_path, *overrides):
    return [
        sys.executable,
        "-m",
        "launcher",
        *overrides,
        f"hydra.sweep.dir={tmp_path}/sweep",
        f"tracking.uri={store(tmp_path / 'mlflow.db')}",
    ]


def _read(path):
    return path.read_text() if path.exists() else ""


def _children(tmp_path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("launcher").experiment_id])
    parents = [r for r in runs if r.data.tags.get("sweep.role") == "parent"]
    assert len(parents) == 1, [r.info.run_name for r in runs]
    kids = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    return client, parents[0], {k.info.run_name: k for k in kids}


@pytest.mark.slow
def test_a_killed_sweep_rerun_skips_finished_jobs_and_resumes_the_killed_one(tmp_path):
    sweep = tmp_path / "sweep"
    # Job 0 finishes; job 1 waits after its first checkpoint, where the whole sweep is killed.
    env = dict(os.environ, LAUNCHER_FAULT="PAUSE@after_save:23", LAUNCHER_FAULT_RESUME=str(tmp_path / "never"))
    first = warm.Popen(
        _command(tmp_path, *SWEEP),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )
    deadline = time.time() + 600
    while "paused at after_save 23" not in _read(sweep / "1" / "job.log"):
        assert first.poll() is None and time.time() < deadline, "the sweep ended before job 1's first checkpoint"
        time.sleep(0.1)
    _, _, running = _children(tmp_path)
    # The same named sweep started again while it runs: refused at once, recording nothing (before: its job was
    # refused by the run-dir lock and recorded as a FAILED child, or it marked the first's live child FAILED).
    second = warm.run(_command(tmp_path, *SWEEP), cwd=ROOT, timeout=300)
    assert second.returncode == 2, second.stderr[-3000:]
    assert "hydra.sweep.dir" in second.stderr and f"held by pid {first.pid}" in second.stderr
    assert "Traceback" not in second.stderr
    _, _, after_second = _children(tmp_path)
    assert {k: r.info.status for k, r in after_second.items()} == {k: r.info.status for k, r in running.items()}
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert read_json(sweep / "0" / OUTCOME_FILE)["status"] == "FINISHED"
    assert not (sweep / "1" / OUTCOME_FILE).exists()
    finished_pid = read_json(sweep / "0" / OUTCOME_FILE)["pid"]
    # Its jobs were forked by a forkserver the sweep started in its own session (the test process's is in
    # another), killed with that session: job 1 died with it, and the rerun's jobs come from another server.
    first_server = read_json(sweep / "0" / OUTCOME_FILE)["forked_by"]
    assert first_server is not None
    _, _, before = _children(tmp_path)
    killed_run = before["scaling.batch_size=64"].info.run_id

    again = warm.run(_command(tmp_path, *SWEEP), cwd=ROOT, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Continuing sweep" in again.stdout
    assert "scaling.batch_size=32: finished in an earlier run of this sweep" in again.stdout
    assert read_json(sweep / "0" / OUTCOME_FILE)["pid"] == finished_pid  # not run again
    assert "Resuming at epoch 2, step 0 (global step 23)" in (sweep / "1" / "job.log").read_text()
    assert read_json(sweep / "1" / OUTCOME_FILE)["forked_by"] not in (None, first_server)
    client, parent, kids = _children(tmp_path)
    assert sorted(kids) == ["scaling.batch_size=32", "scaling.batch_size=64"]  # no duplicate child runs
    assert kids["scaling.batch_size=64"].info.run_id == killed_run
    assert all(k.info.status == "FINISHED" for k in kids.values()) and parent.info.status == "FINISHED"
    assert sorted(m.step for m in client.get_metric_history(killed_run, "val_loss")) == [0, 1]  # train.epochs=2

    # The finished sweep run again: nothing trains, and the parent's summary is not logged a second time.
    summary = {k: len(client.get_metric_history(parent.info.run_id, k)) for k in parent.data.metrics}
    assert summary and set(summary.values()) == {1}
    third = warm.run(_command(tmp_path, *SWEEP), cwd=ROOT, timeout=600)
    assert third.returncode == 0, third.stderr[-3000:]
    assert {k: len(client.get_metric_history(parent.info.run_id, k)) for k in parent.data.metrics} == summary
