"""A forkserver killed while launches wait on what it forked (the OOM killer picks the largest process: often the
server, which holds every import) loses nothing: a supervised run's attempt and a sweep's job run on, watched by
the process that asked for them, to their end; an attempt that died with it is restarted cold; a child started to
die with its parent dies with that process, not with the server; and the run dirs' locks are free after.

The test starts a server of its own (`forkserver.Server`, as a launch does) and kills it with SIGKILL while the
launches it forked (supervised attempts, a sweep's job, local workers: one server and one kill for all of them)
wait at a pause point (LAUNCHER_FAULT=PAUSE).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import warm
from support.config import ROOT, TINY
from support.tracking import store

from launcher import forkserver
from launcher.launch.lock import RunDirLock
from launcher.outcome import FINISHED, OutcomeRecord

PAUSED = "paused at steps 2"
NOTICED = "the forkserver ended before process"  # the requester saw its server die and watches the child itself
pytestmark = pytest.mark.forking  # `make test` runs them again with the launches cold, as a person's are


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as listed:
        return [int(child) for child in listed.read().split()]


def running(pid: int) -> bool:
    """Whether `pid` runs (an ended process nobody reaped yet does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def forked_for(server: int, argument: str) -> int:
    """The process the server forked with `argument` on its command line."""
    for pid in children(server):
        with open(f"/proc/{pid}/cmdline") as cmdline:
            if argument in cmdline.read().replace("\0", " ").split():
                return pid
    raise AssertionError(f"the server forked nothing with {argument}")


def wait_for(log: Path, text: str, process, times: int = 1) -> None:
    """Until `text` is in `log` (`times` times); fails when `process` (which writes it) ends first."""
    deadline = time.time() + 600
    while (log.read_text() if log.exists() else "").count(text) < times:
        assert process.poll() is None, f"ended (exit {process.returncode}) before {text!r}:\n{log.read_text()[-3000:]}"
        assert time.time() < deadline, f"no {text!r} in {log}"
        time.sleep(0.1)


def wait_gone(pid: int) -> None:
    deadline = time.time() + 60
    while running(pid) and time.time() < deadline:
        time.sleep(0.1)


def lock_is_free(run_dir: Path) -> bool:
    """A new launch on `run_dir` would not be refused: its lock can be taken (and is given back)."""
    with RunDirLock(run_dir):
        return True


def mlflow_runs(db: Path) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    return client.search_runs([client.get_experiment_by_name("launcher").experiment_id])


@pytest.fixture
def doomed_server():
    """A server of this test's own, killed by the test (the suite's stays up for the other tests)."""
    server = forkserver.Server(warm.baseline())
    yield server
    server.process.kill()
    server.process.wait()
    server.close()


def _launch(args: list[str], log: Path, env: dict):
    """`python -m launcher <args>` (warm, as the suite starts it) writing to `log`."""
    with open(log, "w") as out:
        return warm.Popen(
            [sys.executable, "-m", "launcher", *args], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )


@pytest.mark.slow
def test_supervised_runs_sweep_jobs_and_local_workers_whose_forkserver_is_killed_finish_restart_cold_or_die(
    tmp_path, doomed_server
):
    """One server forks the attempts of three `train.max_restarts=2` runs, a sweep's job and two local workers; it is
    killed while all of them are paused.

    Supervised runs:
    - `lives`: its attempt runs on and finishes; its supervisor waited (no second training), one MLflow run;
    - `dies`: its attempt is killed too (the OOM killer's second pick): restarted as a crash, in a new interpreter,
      into the same MLflow run;
    - `orphaned`: its supervisor is killed too: the attempt, started to die with its parent, dies with it.
    Before: each attempt died with the server (its death signal was the server's) and each supervisor died of
    ChildProcessError.

    The sweep's job runs on: the sweep watches it to its end and records it finished, and no job process outlives
    the sweep. Before: the job's wait raised ChildProcessError, failing the sweep while its job ran on, unobserved.

    `strategy.local_workers=2`: both workers, started to die with the launcher, run on; the launcher watches them to
    their end and the job finishes as one (one MLflow run, identical weights). Before: both died with the server and
    the launcher of ChildProcessError.

    Every run dir's lock is free after."""
    resume = tmp_path / "resume"
    base = {**os.environ, forkserver.SOCKET_ENV: doomed_server.path, "LAUNCHER_FAULT_RESUME": str(resume)}
    paused = {**base, "LAUNCHER_FAULT": "PAUSE@steps:2"}
    # No exports: what the launches do when their server dies is under test, not what they ship.
    quiet = [
        "train.epochs=1",
        "tracking.system_metrics=false",
        "checkpoint.export_model=false",
        "tracking.log_model=false",
    ]
    runs = {name: tmp_path / name for name in ("lives", "dies", "orphaned")}
    sweep_log, job_dir = tmp_path / "sweep.log", tmp_path / "sweep" / "0"
    workers_dir, workers_log = tmp_path / "job", tmp_path / "job.log"
    supervisors, sweep, launcher, job = {}, None, None, None
    try:
        for name, run_dir in runs.items():
            supervisors[name] = _launch(
                [
                    *TINY,
                    *quiet,
                    "train.max_restarts=2",
                    "train.restart_backoff=0",
                    f"hydra.run.dir={run_dir}",
                    f"tracking.uri={store(tmp_path / f'{name}.db')}",
                ],
                tmp_path / f"{name}.log",
                {**base, "LAUNCHER_FAULT": "PAUSE@steps:2#1"},  # the first attempt only: a restart runs through
            )
        sweep = _launch(
            [
                "-m",
                *TINY,
                *quiet,
                "scaling.batch_size=32",
                f"hydra.sweep.dir={tmp_path}/sweep",
                f"tracking.uri={store(tmp_path / 'sweep.db')}",
            ],
            sweep_log,
            paused,
        )
        launcher = _launch(
            [
                *TINY,
                *quiet,
                "xla=false",
                "strategy=multi_worker",
                "strategy.local_workers=2",
                f"hydra.run.dir={workers_dir}",
                f"tracking.uri={store(tmp_path / 'workers.db')}",
            ],
            workers_log,
            paused,
        )
        for name, supervisor in supervisors.items():
            wait_for(tmp_path / f"{name}.log", PAUSED, supervisor)
        wait_for(job_dir / "job.log", PAUSED, sweep)
        wait_for(workers_log, PAUSED, launcher, times=2)

        server = doomed_server.process.pid
        attempts = {name: forked_for(server, f"hydra.run.dir={run}") for name, run in runs.items()}
        workers = [forked_for(server, f"strategy.task_index={i}") for i in (0, 1)]
        [job] = [pid for pid in children(server) if pid not in [*attempts.values(), *workers]]
        doomed_server.process.kill()
        doomed_server.process.wait()
        for name, supervisor in supervisors.items():
            wait_for(tmp_path / f"{name}.log", NOTICED, supervisor)
        wait_for(sweep_log, NOTICED, sweep)
        wait_for(workers_log, NOTICED, launcher, times=2)
        assert all(running(pid) for pid in attempts.values())  # none died with the server
        assert running(job) and all(running(pid) for pid in workers)

        os.kill(attempts["dies"], signal.SIGKILL)
        supervisors["orphaned"].kill()
        supervisors["orphaned"].wait()
        resume.touch()
        codes = {name: supervisors[name].wait(600) for name in ("lives", "dies")}
        sweep_code, workers_code = sweep.wait(600), launcher.wait(600)
    finally:
        for process in [*supervisors.values(), sweep, launcher]:
            if process is not None:
                process.kill()
        if job is not None and running(job):  # a job the sweep left behind: not paused for the next 10 minutes
            os.kill(job, signal.SIGKILL)
    logs = {name: (tmp_path / f"{name}.log").read_text() for name in runs}
    assert codes == {"lives": 0, "dies": 0}, logs
    wait_gone(attempts["orphaned"])
    assert not running(attempts["orphaned"]), "the attempt outlived the supervisor it was started to die with"

    lived = OutcomeRecord.read(runs["lives"])
    assert lived.status == FINISHED and lived.pid == attempts["lives"]  # the attempt that was waiting
    assert lived.forked_by == doomed_server.process.pid
    assert "Restart 1" not in logs["lives"]

    restarted = OutcomeRecord.read(runs["dies"])
    assert "Restart 1 of 2" in logs["dies"] and "killed by SIGKILL" in logs["dies"]
    assert restarted.status == FINISHED and restarted.pid != attempts["dies"]
    assert restarted.forked_by is None  # cold: a new interpreter, not another server

    for name in ("lives", "dies"):
        [run] = mlflow_runs(tmp_path / f"{name}.db")
        assert run.info.status == FINISHED
    assert "restart.1.error" in mlflow_runs(tmp_path / "dies.db")[0].data.tags
    assert OutcomeRecord.read(runs["orphaned"]) is None  # killed while paused

    # The sweep's job.
    assert sweep_code == 0, sweep_log.read_text()[-3000:]
    assert not running(job), "the job outlived the sweep"
    outcome = OutcomeRecord.read(job_dir)
    assert outcome.status == FINISHED and outcome.pid == job
    kids = [r for r in mlflow_runs(tmp_path / "sweep.db") if r.data.tags.get("sweep.role") == "child"]
    assert [kid.info.status for kid in kids] == [FINISHED]

    # The local workers.
    assert workers_code == 0, workers_log.read_text()[-3000:]
    assert "All 2 workers finished with identical weights" in workers_log.read_text()
    chief = OutcomeRecord.read(workers_dir)
    assert chief.status == FINISHED and chief.pid == workers[0]
    assert OutcomeRecord.read(workers_dir / "workers" / "worker1").pid == workers[1]
    [run] = mlflow_runs(tmp_path / "workers.db")
    assert run.info.status == FINISHED

    assert all(lock_is_free(run_dir) for run_dir in [*runs.values(), job_dir, workers_dir])
