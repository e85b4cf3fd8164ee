"""No ghost runs: a launch killed after its MLflow run exists and before its first checkpoint leaves no run
RUNNING forever and no second run for one training; the rerun trains again in the same run."""

from __future__ import annotations

import os
import signal
import sys

import pytest
import warm
from support.config import ROOT
from support.tracking import store

from launcher.files import RUN_FILE, read_json

# digits at batch 64: 23 steps per epoch (xla=false keeps the ragged last batch); saves at epoch ends only.
SMALL = [
    "model.hidden_units=[16]",
    "scaling.batch_size=64",
    "xla=false",
    "train.epochs=2",
    "checkpoint.interval_steps=0",
]


def _runs(db):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    return client, client.search_runs([client.get_experiment_by_name("launcher").experiment_id])


def _launch(tmp_path, *overrides, fault=None):
    env = {k: v for k, v in os.environ.items() if k != "LAUNCHER_FAULT"}
    if fault:
        env["LAUNCHER_FAULT"] = fault
    args = [sys.executable, "-m", "launcher", *overrides, f"tracking.uri={store(tmp_path / 'mlflow.db')}"]
    return warm.run(args, cwd=ROOT, timeout=600, env=env)


@pytest.mark.slow
def test_a_run_killed_before_its_first_checkpoint_trains_again_in_the_same_mlflow_run(tmp_path, launcher_here):
    run = [f"hydra.run.dir={tmp_path}/run", *SMALL, "tracking.step_metrics_every=4"]
    # SIGKILL at global step 8 of epoch 1: step points are in flight, no checkpoint exists yet.
    killed = _launch(tmp_path, *run, fault="KILL@steps:8")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not list((tmp_path / "run" / "checkpoints").glob("ckpt-*"))
    client, runs = _runs(tmp_path / "mlflow.db")
    assert [r.info.status for r in runs] == ["RUNNING"]  # the ghost the kill leaves
    ghost = runs[0].info.run_id
    assert read_json(tmp_path / "run" / RUN_FILE)["run_id"] == ghost  # remembered from the moment it was made

    again = launcher_here([*run, f"tracking.uri={store(tmp_path / 'mlflow.db')}"], ROOT)  # in this process
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"the earlier run {ghost} was left RUNNING by a launch that is gone" in again.stdout
    client, runs = _runs(tmp_path / "mlflow.db")
    assert [(r.info.run_id, r.info.status) for r in runs] == [(ghost, "FINISHED")]
    assert [m.step for m in client.get_metric_history(ghost, "loss")] == [0, 1]  # every epoch once
    assert runs[0].data.tags["launcher.starts"] == "2"


@pytest.mark.slow
def test_a_sweep_job_killed_right_after_its_run_was_created_continues_in_it_when_the_sweep_is_rerun(tmp_path):
    sweep = ["-m", "name=ghost", "scaling.batch_size=64", f"hydra.sweep.dir={tmp_path}/sweep", *SMALL[:1], *SMALL[2:]]
    first = _launch(tmp_path, *sweep, fault="KILL@run_created:0")
    assert first.returncode == 0, first.stderr[-3000:]  # the sweep carries on past a failed job
    assert "failed (exit -9" in first.stdout
    client, runs = _runs(tmp_path / "mlflow.db")
    kids = [r for r in runs if r.data.tags.get("sweep.role") == "child"]
    assert [(k.info.status, k.data.tags["exit_code"]) for k in kids] == [("FAILED", "-9")]  # settled, not RUNNING
    child = kids[0].info.run_id

    again = _launch(tmp_path, *sweep)
    assert again.returncode == 0, again.stderr[-3000:]
    client, runs = _runs(tmp_path / "mlflow.db")
    kids = [r for r in runs if r.data.tags.get("sweep.role") == "child"]
    assert [(k.info.run_id, k.info.status) for k in kids] == [(child, "FINISHED")]  # one child, the same run
    assert [m.step for m in client.get_metric_history(child, "val_loss")] == [0, 1]
    assert "training starts over in it" in (tmp_path / "sweep" / "0" / "job.log").read_text()
