"""The tracking server goes away: unreachable at start (fail fast, or the local store with a warning)
and mid-run against a real `mlflow server` stopped and restarted, counting every epoch and step point:
none lost, none twice."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import warm
from support.config import ROOT, TINY
from support.tracking import MlflowServer, free_port

from launcher.tracking.spool import PENDING_FILE

EPOCHS = 4
EPOCH_METRICS = ("loss", "accuracy", "val_loss", "val_accuracy", "learning_rate")
STEP_METRICS = ("step/loss", "step/learning_rate")
EVERY = 10  # tracking.step_metrics_every: a step point every 10 global steps
# One step per chunk: the pause lands on global step 50, early in epoch 2 (epoch 1's metrics delivered).
RUN = [*TINY, f"train.epochs={EPOCHS}", "train.steps_per_execution=1", f"tracking.step_metrics_every={EVERY}"]


def _start_launch(tmp_path, run_dir, server_url, *extra):
    """A launch into `run_dir` paused at global step 50 until `tmp_path/resume` exists."""
    resume = tmp_path / "resume"
    env = {**os.environ, "LAUNCHER_FAULT": "PAUSE@steps:50", "LAUNCHER_FAULT_RESUME": str(resume)}
    args = [
        sys.executable,
        "-m",
        "launcher",
        f"hydra.run.dir={run_dir}",
        f"tracking.uri={server_url}",
        *RUN,
        *extra,
    ]
    proc = warm.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "paused at steps 50" in line:
            return proc, seen
    proc.wait()
    pytest.fail("the launch ended before its pause:\n" + "".join(seen[-40:]))


def _finish(proc, seen, timeout=300):
    deadline = time.time() + timeout
    for line in proc.stdout:
        seen.append(line)
        assert time.time() < deadline, "".join(seen[-40:])
    proc.wait(timeout=60)
    return "".join(seen)


def _metric_points(server_url, run_dir):
    """`run_dir`'s one run and, per epoch and step metric, the steps of its points (a point delivered twice shows
    twice)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(server_url)
    runs = client.search_runs([client.get_experiment_by_name("launcher").experiment_id])
    (run,) = [r for r in runs if r.data.tags.get("run_dir") == str(run_dir)]
    metrics = EPOCH_METRICS + STEP_METRICS
    return run, {m: sorted(p.step for p in client.get_metric_history(run.info.run_id, m)) for m in metrics}


def _expected(run_dir) -> dict[str, list[int]]:
    """Every epoch point once, and a step point every EVERY global steps up to the run's last step (the steps per
    epoch read from the run's plan.yaml: they depend on the batch and drop_remainder)."""
    import yaml

    plan = yaml.safe_load((run_dir / "plan.yaml").read_text())["decisions"]
    last = plan["train.steps_per_epoch"]["value"] * EPOCHS
    steps = list(range(EVERY, last + 1, EVERY))
    return {**{m: list(range(EPOCHS)) for m in EPOCH_METRICS}, **{m: steps for m in STEP_METRICS}}


@pytest.mark.slow
def test_server_restarted_mid_run_gets_every_metric_point_and_writes_kept_while_it_stays_away_are_synced(tmp_path):
    """One real server, stopped while two runs wait at global step 50 (epoch 1 delivered, epochs 2..4 not yet):
    - `waits` (tracking.outage_wait=240) meets the dead server, waits, and once the server is restarted on the same
      port and store delivers the rest: every epoch and step point, each exactly once, nothing left in its run dir;
    - `gives_up` (tracking.outage_wait=1) finishes training while the server stays away, its writes kept in its run
      dir (tracking is behind, not lost), and `python -m launcher.tracking.sync` delivers them once the server is
      back: every point, each exactly once."""
    server = MlflowServer(tmp_path).start()
    waits, gives_up = tmp_path / "waits", tmp_path / "gives_up"
    launches = []
    try:
        launches.append(_start_launch(tmp_path, waits, server.url, "tracking.outage_wait=240"))
        launches.append(_start_launch(tmp_path, gives_up, server.url, "tracking.outage_wait=1"))
        (proc, seen), (spooling, spooled) = launches
        server.stop()  # mid-run: epoch 1 delivered, epochs 2..4 not yet
        (tmp_path / "resume").touch()
        kept_output = _finish(spooling, spooled)  # while the server stays away
        while "unreachable" not in "".join(seen):  # the next epoch's write meets the dead server
            line = proc.stdout.readline()
            assert line, "".join(seen[-40:])
            seen.append(line)
        server.start()  # same port, same store
        output = _finish(proc, seen)
        assert proc.returncode == 0, output[-3000:]
        assert "Traceback" not in output
        assert "Tracking server back" in output or "delivered" in output
        run, points = _metric_points(server.url, waits)
        assert run.info.status == "FINISHED"
        assert points == _expected(waits), points  # every epoch and step point, each exactly once
        assert not (waits / PENDING_FILE).exists()

        assert spooling.returncode == 0, kept_output[-3000:]  # training finished; tracking is behind, not lost
        spool = gives_up / PENDING_FILE
        assert spool.exists() and "python -m launcher.tracking.sync" in kept_output
        sync = subprocess.run(
            [sys.executable, "-m", "launcher.tracking.sync", str(gives_up)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert sync.returncode == 0, sync.stderr[-2000:]
        run, points = _metric_points(server.url, gives_up)
    finally:
        for launch, _ in launches:
            if launch.poll() is None:
                launch.kill()
        server.stop()
    assert not spool.exists()
    assert run.info.status == "FINISHED"
    assert points == _expected(gives_up), points


def test_unreachable_at_start_fails_fast_by_default_or_falls_back_to_the_local_store(cli_here, tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"
    refused = cli_here(*TINY, f"tracking.uri={dead}")
    assert refused.returncode == 2 and "a reachable MLflow tracking server" in refused.stderr
    local = f"sqlite:///{tmp_path}/fallback.db"
    done = cli_here(*TINY, f"tracking.uri={dead}", "tracking.on_unreachable=local", f"tracking.fallback_uri={local}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "unreachable at start" in done.stdout and "logging to" in done.stdout
    from mlflow.tracking import MlflowClient

    client = MlflowClient(local)
    (run,) = client.search_runs([client.get_experiment_by_name("launcher").experiment_id])
    assert run.info.status == "FINISHED" and run.data.tags["tracking.intended_uri"] == dead
    assert len(client.get_metric_history(run.info.run_id, "val_loss")) == 2
