"""MultiWorkerMirroredStrategy as a person runs it: `strategy.local_workers=N` starts N worker processes on
127.0.0.1; workers started by hand (a TF_CONFIG as a TFJob writes it; strategy.workers) are checked against each
other; bad clusters are refused
before anything waits, and a peer that never comes is named.

A worker that cannot join is killed by its watchdog (`launcher.train.cluster_watchdog`).

The workers' agreement on one Plan and on the final weights: `launcher.launch.agree`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import warm
from support.cli import digits_shards
from support.config import ROOT, TINY, compose
from support.tracking import free_ports, runs_in, store

QUIET = ["tracking.system_metrics=false"]


def launcher(*overrides, run_dir, db):
    return [
        sys.executable,
        "-m",
        "launcher",
        *TINY,
        *QUIET,
        *overrides,
        f"hydra.run.dir={run_dir}",
        f"tracking.uri={store(db)}",
    ]


def outcome(directory):
    return json.loads((directory / "outcome.json").read_text())


def mlflow_runs(db):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    return client.search_runs([client.get_experiment_by_name("launcher").experiment_id])


@pytest.mark.forking  # the launcher's own children: its workers
@pytest.mark.slow
def test_two_local_workers_train_like_one_process_with_the_same_global_batch(tmp_path):
    """float16 + XLA on two workers: one MLflow run (the chief's), identical final weights on both workers,
    the loss of a single process with the same global batch (64), a profile traced by the chief only."""
    job = tmp_path / "job"
    args = launcher(
        "strategy=multi_worker",
        "strategy.local_workers=2",
        "precision=mixed",
        "xla=true",
        "train.profile.steps=4",
        "train.profile.skip_steps=4",
        run_dir=job,
        db=tmp_path / "mlflow.db",
    )
    done = warm.run(args, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    out = done.stdout
    assert re.search(r"\[worker 0\]\s+replicas\s+2\s+2 worker\(s\) x 1 device\(s\)", out)
    assert re.search(r"\[worker 0\]\s+loss_scale.optimizer\s+replica_safe", out)
    # One Plan on the job's console, the chief's; the other worker's is in its own console.log.
    assert len(re.findall(r"^\[worker \d\] Plan:$", out, re.M)) == 1 and "[worker 1] Plan: the chief's" in out
    assert "[worker 1] Plan, decided by" not in out  # the records decided later, too
    assert re.search(r"^\s+process.is_chief\s+False", (job / "workers" / "worker1" / "console.log").read_text(), re.M)
    assert "All 2 workers finished with identical weights" in out
    chief, other = outcome(job), outcome(job / "workers" / "worker1")
    assert chief["status"] == other["status"] == "FINISHED"
    assert chief["weights_sha256"] == other["weights_sha256"]
    assert chief["metrics"]["loss"] == other["metrics"]["loss"]  # reduced across both workers
    assert chief["forked_by"] == other["forked_by"] is not None  # both forked by one forkserver, warm
    # Only the chief tracks, exports and traces; the other worker's temporary checkpoints are gone.
    (run,) = mlflow_runs(tmp_path / "mlflow.db")
    assert run.info.status == "FINISHED" and run.data.tags["plan.strategy"] == "multi_worker"
    assert run.data.tags["multi_worker.weights_identical"] == "true"
    assert (job / "model.keras").exists() and not (job / "workers" / "worker1" / "model.keras").exists()
    assert (job / "profile" / "top_ops.txt").exists() and not (job / "workers" / "worker1" / "profile").exists()
    assert sorted(p.name for p in (job / "checkpoints").glob("ckpt-*.index")) == ["ckpt-22.index", "ckpt-44.index"]
    assert not list((job / "checkpoints").glob(".worker*"))
    assert (job / "workers" / "worker1.log").read_text().count("Done.") == 1

    from launcher.launch.training import execute

    single = execute(
        compose(
            *TINY,
            *QUIET,
            "precision=mixed",
            "xla=true",
            "scaling.batch_size=64",
            "tracking.enabled=false",
            "checkpoint=off",
        ),
        tmp_path / "single",
        tmp_path,
    )
    assert abs(single.result.final["loss"] - chief["metrics"]["loss"]) < 0.02


@pytest.mark.slow
def test_workers_started_by_hand_with_the_tf_config_a_tfjob_writes_train_one_run(tmp_path):
    """The chief + worker layout Kubernetes' TFJob (and JobSet recipes) set in TF_CONFIG, one process each, the
    same command and run dir: one MLflow run (the chief's), the same weights on both."""
    ports = free_ports(2)
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"]}
    job, db = tmp_path / "job", tmp_path / "mlflow.db"
    procs = []
    for task in ({"type": "chief", "index": 0}, {"type": "worker", "index": 0}):
        env = {**os.environ, "TF_CONFIG": json.dumps({"cluster": cluster, "task": task})}
        args = launcher("strategy=multi_worker", "xla=false", run_dir=job, db=db)
        procs.append(warm.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = [p.communicate(timeout=300) for p in procs]
    for proc, (out, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, (out + err)[-3000:]
    assert re.search(r"replicas\s+2\s+2 worker\(s\) x 1 device\(s\)", results[0][0])
    assert "Plan: the chief's (worker 0 prints it)" in results[1][0]  # the worker's own is in its console.log
    assert re.search(r"process.is_chief\s+False", (job / "workers" / "worker1" / "console.log").read_text())
    chief, other = outcome(job), outcome(job / "workers" / "worker1")
    assert chief["status"] == other["status"] == "FINISHED"
    assert chief["weights_sha256"] == other["weights_sha256"]
    (run,) = mlflow_runs(db)
    assert run.info.status == "FINISHED" and run.data.tags["plan.strategy"] == "multi_worker"


def start_job(args, log, job, step, err=None):
    """The job running in the background until the chief's checkpoint at `step` exists."""
    out = open(log, "a")  # noqa: SIM115 - a pipe nobody reads would block the workers
    errors = open(err, "a") if err else subprocess.PIPE  # noqa: SIM115 - closed with `out` by the caller
    proc = warm.Popen(args, cwd=ROOT, stdout=out, stderr=errors, text=True)
    deadline = time.time() + 180
    while not (job / "checkpoints" / f"ckpt-{step}.json").exists():
        assert proc.poll() is None and time.time() < deadline, f"no checkpoint at step {step}"
        time.sleep(0.2)
    return proc, out


def wait_for(path: Path, pattern: str, proc, seconds: float = 180) -> re.Match:
    deadline = time.time() + seconds
    while not (found := re.search(pattern, path.read_text() if path.exists() else "")):
        assert proc.poll() is None and time.time() < deadline, f"{pattern!r} not in {path}"
        time.sleep(0.2)
    return found


@pytest.mark.slow
def test_a_killed_worker_stops_the_job_which_restarts_by_itself_a_signal_stops_every_worker_and_reruns_resume(
    tmp_path,
):
    """Two workers on their own TFRecord files (file sharding). Worker 1 killed: the job stops within seconds
    naming it, and (train.max_restarts=1) restarts by itself: both workers resume from the chief's newest
    checkpoint. SIGTERM to the launcher: both workers save at the same step and exit 143, not restarted.
    Rerun: both resume there and finish, in the chief's MLflow run, with identical weights."""
    job, db, log, err = tmp_path / "job", tmp_path / "mlflow.db", tmp_path / "job.out", tmp_path / "job.err"
    args = launcher(
        "strategy=multi_worker",
        "strategy.local_workers=2",
        "xla=false",
        "train.epochs=40",
        "checkpoint.interval_steps=8",
        "dataset=tfrecord",
        f"dataset.train={digits_shards(tmp_path, 6)}",
        "train.max_restarts=1",
        "train.restart_backoff=0",
        run_dir=job,
        db=db,
    )
    proc, out = start_job(args, log, job, 16, err)
    pgrep = subprocess.run(
        ["pgrep", "-f", f"strategy.task_index=1 hydra.run.dir={job} "], capture_output=True, text=True
    ).stdout.split()
    assert len(pgrep) == 1, pgrep
    worker1 = int(pgrep[0])
    os.kill(worker1, signal.SIGKILL)
    wait_for(err, r"Restart 1 of 1 in 0 s \(the training process was killed by SIGKILL\)", proc)
    # The chief is stopped by the job, or its collective with the dead worker failed first and it had ended (which
    # one is a race on two busy cores; tests/supervise/test_local_workers.py makes each happen): either way it is
    # accounted for.
    assert re.search(
        rf"Worker 1 \(pid {worker1}\) was killed by SIGKILL; (the other 1 running worker\(s\) were stopped"
        r"|worker 0 had already ended: it exited with code \d+)\.",
        err.read_text(),
    ), err.read_text()[-2000:]
    assert re.search(r"\[worker 0\]\s+data.sharding\s+file\s+6 training files >= 2 workers", log.read_text())
    saved = int(wait_for(log, r"\[worker 1\] Resuming at .*global step (\d+)\)", proc)[1])
    wait_for(log, rf"\[worker 0\] Resuming at .*global step {saved}\)", proc)  # the same step on both
    while not (job / "checkpoints" / f"ckpt-{saved + 8}.json").exists():
        assert proc.poll() is None, err.read_text()[-2000:]
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    out.close()
    assert proc.returncode == 143, err.read_text()[-2000:]  # a signal from the person is never restarted
    assert "Restart 2" not in err.read_text() and "Not restarting" not in err.read_text()
    stops = [outcome(d)["error"] for d in (job, job / "workers" / "worker1")]
    assert all(o["status"] == "KILLED" for o in (outcome(job), outcome(job / "workers" / "worker1")))
    steps = {re.search(r"global step (\d+)", e)[1] for e in stops}
    assert len(steps) == 1, stops  # both workers stopped (and saved) at the same step
    stopped = int(steps.pop())
    assert (job / "checkpoints" / f"ckpt-{stopped}.json").exists()

    short = [a if not a.startswith("train.epochs=") else "train.epochs=3" for a in args]
    done = warm.run(short, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    assert re.search(rf"\[worker 1\] Resuming at .*global step {stopped}\)", done.stdout)
    (run,) = mlflow_runs(db)  # the chief continued its MLflow run through both interruptions
    assert run.info.status == "FINISHED"
    assert run.data.tags["restart.1.error"] == "the training process was killed by SIGKILL"
    assert outcome(job)["weights_sha256"] == outcome(job / "workers" / "worker1")["weights_sha256"]


@pytest.mark.slow
def test_bad_cluster_specs_are_refused_before_any_wait_and_a_missing_peer_is_named(tmp_path, launcher_here):
    """Malformed, duplicate and out-of-range specs: refused by the resolver, before any waiting. A peer that
    never comes: killed after strategy.connect_timeout (5 s here) naming its address. Workers started with
    different overrides: every worker stops, naming the keys."""
    db = tmp_path / "mlflow.db"
    bad = launcher_here(  # the entry in this process: a refusal that made a strategy would hang or fail here
        launcher(
            "strategy=multi_worker",
            "strategy.workers=[127.0.0.1:7000,127.0.0.1:7000,nohost]",
            "strategy.task_index=3",
            run_dir=tmp_path / "bad",
            db=db,
        )[3:],
        ROOT,
    )
    assert bad.returncode == 2
    assert "Plan:" not in bad.stdout  # refused by the resolver: no strategy made, nothing joined or waited for
    assert "listed twice" in bad.stderr and "'nohost'" in bad.stderr and "strategy.task_index=3" in bad.stderr
    assert "Traceback" not in bad.stderr

    ports = free_ports(2)
    workers = f"strategy.workers=[127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}]"
    alone = warm.run(
        launcher("strategy=multi_worker", workers, "strategy.connect_timeout=5", run_dir=tmp_path / "alone", db=db),
        cwd=ROOT,
        timeout=120,
    )
    assert alone.returncode == -signal.SIGKILL  # killed by its watchdog process, after its message below
    assert f"worker 1 at 127.0.0.1:{ports[1]} (Connection refused)" in alone.stderr
    assert "strategy.connect_timeout=5 s" in alone.stderr
    assert not mlflow_runs_exist(db)

    ports = free_ports(2)
    workers = f"strategy.workers=[127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}]"
    procs = [
        warm.Popen(
            launcher(
                "strategy=multi_worker",
                workers,
                f"strategy.task_index={i}",
                f"optimizer.learning_rate={0.001 * (i + 1)}",
                run_dir=tmp_path / f"w{i}",
                db=db,
            ),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    results = [p.communicate(timeout=180) for p in procs]
    for proc, (_, err) in zip(procs, results, strict=True):
        assert proc.returncode == 2, err[-2000:]
        assert "optimizer.learning_rate=0.001: expected the chief's value on every worker; worker 1 has 0.002" in err
    assert not mlflow_runs_exist(db)

    refused = warm.run(
        launcher(
            "strategy=multi_worker",
            "strategy.local_workers=2",
            "optimizer.learning_rate=-1",
            run_dir=tmp_path / "local",
            db=db,
        ),
        cwd=ROOT,
        timeout=120,
    )
    assert refused.returncode == 2
    assert re.search(r"Worker \d \(pid \d+\) exited with code 2", refused.stderr)
    assert "Its configuration was refused (above)" in refused.stderr
    assert "optimizer.learning_rate=-1" in refused.stdout  # the worker's refusal, streamed with its prefix


def mlflow_runs_exist(db) -> bool:
    return bool(runs_in(db))


class EndedWorker:
    """Stands in for a local worker whose process has already ended with `code` (negative: killed by a signal)."""

    def __init__(self, index: int, code: int):
        from types import SimpleNamespace

        self.index, self.tail = index, [f"worker {index}'s last line"]
        self.process = SimpleNamespace(pid=1000 + index, returncode=code, poll=lambda: code, wait=lambda timeout: code)
        self.thread = SimpleNamespace(join=lambda timeout: None)

    def poll(self):
        return self.process.returncode

    def signal(self, signum):
        raise AssertionError("an ended worker is not signalled")

    def describe_exit(self):
        return f"ended with {self.process.returncode}"


def test_of_workers_found_ended_in_one_look_the_one_killed_by_a_signal_is_blamed(capfd):
    """Worker 1 SIGKILLed fails worker 0's next collective a moment later; on a loaded machine the job may see both
    ended in one look. The job is named after the killed worker (its restart says "killed by SIGKILL"), not after
    the lowest index; among errors alone, the lowest index."""
    from launcher.supervise.local_workers import _Job, blamed

    chief, killed = EndedWorker(0, 1), EndedWorker(1, -signal.SIGKILL)
    job = _Job([chief, killed])
    assert job.wait() == 1
    assert job.failed is killed
    assert "Worker 1 (pid 1001) ended with -9" in capfd.readouterr().err
    assert blamed([(EndedWorker(0, 1), 1), (EndedWorker(1, 3), 3)]).index == 0
    assert blamed([]) is None
