"""One search, several sweepers: the same `python -m launcher -m hparams_search=...` command started more than once on
one shared study (a real PostgreSQL on 127.0.0.1, a journal file, SQLite), as a person starts it on several machines.
Together they run exactly n_trials trials, each trained once, into one MLflow parent run; a sweeper killed mid-trial
leaves a trial another sweeper runs again. The pure parts: tests/sweep/test_shared_study.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import warm
import yaml
from support.config import ROOT
from support.databases import PASSWORD
from support.tracking import runs_in

from launcher.config.study_storage import open_storage
from launcher.files import JOB_FILE, read_json
from launcher.sweep.shared import SURPLUS, TOLD_BY
from launcher.tracking.succession import TRIAL_TAG, remembered_run

pytestmark = pytest.mark.slow

SEARCH = {
    "defaults": [{"override /hydra/sweeper": "search"}],
    "objective": "val_accuracy",
    "hydra": {
        "sweeper": {
            "heartbeat_interval": 1,
            "grace_period": 4,
            "params": {"optimizer.learning_rate": {"low": 1.0e-3, "high": 0.1, "log": True}},
        }
    },
}
# 1437 training examples at batch 64 without XLA: 23 steps an epoch. No exports: the search is under test.
SMALL = [
    "model.hidden_units=[16]",
    "scaling.batch_size=64",
    "xla=false",
    "tracking.system_metrics=false",
    "checkpoint.export_model=false",
    "tracking.log_model=false",
]


def _command(tmp_path: Path, storage: str, sweep: str, trials: int, epochs: int = 2) -> list[str]:
    """The search on `storage` into `sweep`: `trials` is its n_trials (each test runs as few as its case needs)."""
    conf = tmp_path / "conf" / "hparams_search"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "shared.yaml").write_text("# @package _global_\n" + yaml.safe_dump(SEARCH, sort_keys=False))
    return [
        sys.executable,
        "-m",
        "launcher",
        "-m",
        f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
        "hparams_search=shared",
        f"hydra.sweeper.storage={storage}",
        f"hydra.sweep.dir={tmp_path / sweep}",
        # A store no process made yet: the sweepers create it at the same moment.
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        f"hydra.sweeper.n_trials={trials}",
        f"train.epochs={epochs}",
        *SMALL,
    ]


def _start(command: list[str], **options) -> subprocess.Popen:
    return warm.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **options)


def _jobs(tmp_path: Path, sweeps: list[str]) -> dict[int, list[Path]]:
    """Trial number -> the job dirs that ran it, across the sweepers' sweep dirs."""
    found: dict[int, list[Path]] = {}
    for sweep in sweeps:
        for job in (tmp_path / sweep).glob(f"*/{JOB_FILE}"):
            trial = [o for o in read_json(job)["overrides"] if o.startswith("sweep.trial=")]
            found.setdefault(int(trial[0].split("=")[1]), []).append(job.parent)
    return found


def _one_parent(tmp_path: Path):
    runs = runs_in(tmp_path / "mlflow.db")
    parents = [r for r in runs if r.data.tags.get("sweep.role") == "parent"]
    assert len(parents) == 1, [(r.info.run_name, r.data.tags.get("sweep.role")) for r in runs]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    return parents[0], children, runs


def test_two_sweepers_started_together_on_postgres_run_the_study_once_into_one_parent(tmp_path, postgres):
    n_trials = 3  # one each and one more: each sweeper takes one at its start, so both tell the study
    first = _start(_command(tmp_path, postgres, "sweep-a", n_trials))
    second = _start(_command(tmp_path, postgres, "sweep-b", n_trials))
    outputs = [process.communicate(timeout=600)[0] for process in (first, second)]
    for process, output in zip((first, second), outputs, strict=True):
        assert process.returncode == 0, output[-3000:]
        assert "AttributeError" not in output
    assert sorted("created by this sweeper" in out for out in outputs) == [False, True], outputs
    seeds = [
        line.split("sampler seed ")[1].split(",")[0]
        for out in outputs
        for line in out.splitlines()
        if "sampler seed " in line
    ]
    assert len(seeds) == 2 and seeds[0] != seeds[1]  # each its own: no duplicate proposals from one seed

    study = optuna.load_study(study_name="launcher", storage=open_storage(postgres))
    trials = study.get_trials()
    assert [t.number for t in trials] == list(range(n_trials)) and {t.state.name for t in trials} == {"COMPLETE"}
    assert len({t.params["optimizer.learning_rate"] for t in trials}) == n_trials
    jobs = _jobs(tmp_path, ["sweep-a", "sweep-b"])
    assert sorted(jobs) == list(range(n_trials)) and all(len(dirs) == 1 for dirs in jobs.values())  # trained once
    tellers = {t.system_attrs[TOLD_BY].rsplit(":", 1)[0] for t in trials}  # host:pid:<a token of its own>
    assert tellers == {f"{os.uname().nodename}:{p.pid}" for p in (first, second)}

    parent, children, runs = _one_parent(tmp_path)
    assert parent.info.status == "FINISHED" and len(runs) == n_trials + 1
    assert sorted(int(c.data.params["sweep.trial"]) for c in children) == list(range(n_trials))
    assert {c.info.status for c in children} == {"FINISHED"}
    assert parent.data.metrics["best.val_accuracy"] == pytest.approx(study.best_value)
    # The password: nowhere in what the sweepers print, in MLflow, or in what a trial writes for people.
    assert not [out for out in outputs if PASSWORD in out]
    for run in runs:
        assert PASSWORD not in repr(run.data.params) + repr(run.data.tags)
    for dirs in jobs.values():
        for name in ("config.yaml", "plan.yaml", "job.log"):
            assert PASSWORD not in (dirs[0] / name).read_text(), name


def test_a_sweeper_killed_mid_trial_leaves_its_trial_to_the_other_which_runs_it_again(tmp_path):
    storage = f"journal://{tmp_path}/study/study.log"
    n_trials = 2  # the killed sweeper's trial and one more for the other: it runs both, the first again
    # Killed with everything it started (its own session: its job and the server that forked it), as a machine goes.
    # 3 epochs: the kill, a moment after the trial's MLflow run is made, lands before its training ends.
    first = _start(_command(tmp_path, storage, "sweep-a", n_trials, epochs=3), start_new_session=True)
    deadline = time.time() + 300
    while not [job for job in (tmp_path / "sweep-a").glob(f"*/{JOB_FILE}") if remembered_run(job.parent)]:
        assert first.poll() is None and time.time() < deadline, first.stdout.read()[-3000:]
        time.sleep(0.1)
    second = _start(_command(tmp_path, storage, "sweep-b", n_trials, epochs=3))
    os.killpg(first.pid, signal.SIGKILL)  # its trial's MLflow run made and running
    first.wait()
    killed = _jobs(tmp_path, ["sweep-a"])
    output = second.communicate(timeout=600)[0]
    assert second.returncode == 0, output[-3000:]

    study = optuna.load_study(study_name="launcher", storage=open_storage(storage))
    trials = study.get_trials()
    abandoned = [t for t in trials if t.state.name == "FAIL"]
    assert len(abandoned) >= 1 and not [t for t in trials if SURPLUS in t.user_attrs]
    retries = {t.system_attrs["failed_trial"]: t for t in trials if "failed_trial" in t.system_attrs}
    assert sorted(retries) == sorted(t.number for t in abandoned)  # each abandoned trial queued again, once
    for failed in abandoned:
        assert failed.number in killed  # it was the killed sweeper's
        assert retries[failed.number].params == failed.params and retries[failed.number].state.name == "COMPLETE"
    finished = [t for t in trials if t.state.name == "COMPLETE"]
    assert len(finished) == n_trials  # the retry counts, its failed first run does not
    report = read_json(tmp_path / "sweep-b" / "summary" / "search" / "search.json")
    assert report["trials"] == n_trials and report["states"]["complete"] == n_trials and report["states"]["fail"] == 0

    parent, children, _ = _one_parent(tmp_path)
    assert parent.info.status == "FINISHED"
    done = [c for c in children if c.info.status == "FINISHED"]
    assert sorted(int(c.data.params["sweep.trial"]) for c in done) == sorted(t.number for t in finished)
    (left,) = [c for c in children if c.info.status != "FINISHED"]  # the killed trial's run: FAILED, not RUNNING
    assert left.info.status == "FAILED" and "its sweeper stopped beating" in left.data.tags["error"]
    # Its trial by the tag the run has from its creation: the kill can land before its params are logged.
    assert int(left.data.tags[TRIAL_TAG]) in {t.number for t in abandoned}
    assert left.data.tags["sweep.retried"] == "true"
    assert parent.data.tags["sweep.failed_jobs"] == "0"  # a trial run again is no failed job


def test_a_second_sweeper_on_the_same_sqlite_study_and_sweep_dir_takes_no_running_trial(tmp_path):
    """The issue's case: the second sweeper, started while the first's trial ran, trained that trial again and
    crashed telling it (`Cannot tell a COMPLETE trial`), its parent left RUNNING."""
    storage = f"sqlite:///{tmp_path}/study.db"
    n_trials = 3  # trials left for the first sweeper to run when the second, started in its first trial, joins
    command = _command(tmp_path, storage, "sweep", n_trials, epochs=4)
    first = _start(command)
    deadline = time.time() + 300
    while not list((tmp_path / "sweep").glob(f"*/{JOB_FILE}")):
        assert first.poll() is None and time.time() < deadline
        time.sleep(0.1)
    second = _start(command)
    outputs = [process.communicate(timeout=600)[0] for process in (first, second)]
    for process, output in zip((first, second), outputs, strict=True):
        assert process.returncode == 0, output[-3000:]
        assert "Cannot tell" not in output
    trials = optuna.load_study(study_name="launcher", storage=open_storage(storage)).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE"] * n_trials
    assert all(len(dirs) == 1 for dirs in _jobs(tmp_path, ["sweep"]).values())
    parent, children, _ = _one_parent(tmp_path)
    assert parent.info.status == "FINISHED" and len(children) == n_trials

    # Another search started on the same study by mistake (another key): refused before it runs or tells anything,
    # and the study's parent run and state stay as they were (before: a refused sweeper deleted the parent).
    other = [*command, "scaling.batch_size=choice(32,64)"]
    refused = warm.run(other, cwd=ROOT, timeout=300)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "a study that searches what this sweeper searches" in refused.stderr and "Traceback" not in refused.stderr
    again, children_again, _ = _one_parent(tmp_path)
    assert again.info.run_id == parent.info.run_id and again.info.status == "FINISHED"
    assert len(children_again) == n_trials
    assert read_json(tmp_path / "sweep" / "sweep.json")["parent_run_id"] == parent.info.run_id
