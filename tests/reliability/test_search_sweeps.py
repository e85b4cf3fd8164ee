"""The Optuna search end to end, through the real CLI: pruning, a killed search continued, a multi-objective
conditional search through submitit's local executor, fail-fast, and every refusal before anything runs."""

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
from support.tracking import store

from launcher.files import JOB_FILE, OUTCOME_FILE, SWEEP_FILE, read_json
from launcher.tracking.succession import remembered_run

# Half the space is hopeless: Adam at a learning rate above ~0.3 stays near chance on digits (val_accuracy
# 0.08-0.25 measured at 0.3, 3 and 10), below 0.1 it reaches 0.95.
HOPELESS = {
    "defaults": [{"override /hydra/sweeper": "search"}],
    "objective": "val_accuracy",
    "hydra": {
        "sweeper": {
            "n_trials": 8,
            "n_jobs": 2,
            "sampler": {"name": "tpe", "seed": 33},
            "pruner": {"name": "median", "n_startup_trials": 3, "n_warmup_steps": 0},
            "params": {"optimizer.learning_rate": {"low": 1.0e-3, "high": 10.0, "log": True}},
        }
    },
}
# Small trials with a pinned schedule: 1437 training examples at batch 64 without XLA (the ragged last batch
# trained on) are 23 steps an epoch. No model export or logged MLflow model (~1.5 s a trial): the searches are
# under test here, not what a trial ships (tests/e2e/test_cli.py and tests/export/test_serving.py test that).
SMALL = [
    "model.hidden_units=[32]",
    "train.epochs=3",
    "scaling.batch_size=64",
    "xla=false",
    "tracking.system_metrics=false",
    "checkpoint.export_model=false",
    "tracking.log_model=false",
]


def _search_config(tmp_path: Path, name: str, body: dict) -> Path:
    folder = tmp_path / "conf" / "hparams_search"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text("# @package _global_\n" + yaml.safe_dump(body, sort_keys=False))
    return tmp_path / "conf"


def _command(tmp_path: Path, *overrides: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "launcher",
        "-m",
        f"hydra.sweep.dir={tmp_path}/sweep",
        f"tracking.uri={store(tmp_path / 'mlflow.db')}",
        *overrides,
    ]


def _runs(tmp_path: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("launcher").experiment_id])
    parents = [r for r in runs if r.data.tags.get("sweep.role") == "parent"]
    assert len(parents) == 1, [r.info.run_name for r in runs]
    kids = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    return client, parents[0], kids


def _trial_dirs(sweep: Path) -> dict[int, Path]:
    """Trial number -> its job dir, from the overrides each job recorded."""
    found = {}
    for job in sweep.glob(f"*/{JOB_FILE}"):
        trial = [o for o in read_json(job)["overrides"] if o.startswith("sweep.trial=")]
        assert len(trial) == 1, job
        number = int(trial[0].split("=")[1])
        assert number not in found, f"trial {number} ran in two dirs: {found[number]} and {job.parent}"
        found[number] = job.parent
    return found


@pytest.mark.slow
def test_a_pruned_search_stops_hopeless_trials_early_and_a_killed_search_continues_its_study(tmp_path):
    conf = _search_config(tmp_path, "hopeless", HOPELESS)
    sweep = tmp_path / "sweep"
    command = _command(
        tmp_path, f"hydra.searchpath=[file://{conf}]", "hparams_search=hopeless", "hydra/launcher=parallel", *SMALL
    )
    # Killed once trials 0-3 have ended and trials 4 and 5 have started (trial 4's MLflow run exists).
    first = warm.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 600
    while not (all((sweep / str(n) / OUTCOME_FILE).exists() for n in range(4)) and remembered_run(sweep / "4")):
        assert first.poll() is None and time.time() < deadline, "the search ended before trial 4 started"
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    ended_before = {n: read_json(sweep / str(n) / OUTCOME_FILE) for n in range(4)}
    killed_run = remembered_run(sweep / "4")
    storage = f"sqlite:///{sweep}/optuna.db"
    before = {t.number: t for t in optuna.load_study(study_name="launcher", storage=storage).trials}
    assert before[4].state.name == "RUNNING"

    again = warm.run(command, cwd=ROOT, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "continuing: " in again.stdout and "Continuing sweep" in again.stdout

    study = optuna.load_study(study_name="launcher", storage=storage)
    trials = {t.number: t for t in study.trials}
    assert sorted(trials) == list(range(8))  # the study's 8, not 8 more
    assert {t.state.name for t in trials.values()} <= {"COMPLETE", "PRUNED"}, {n: t.state for n, t in trials.items()}
    for number, earlier in before.items():  # no trial asked again with other values
        assert trials[number].params == earlier.params
    dirs = _trial_dirs(sweep)
    assert sorted(dirs) == list(range(8)) and all(dirs[n] == sweep / str(n) for n in dirs)
    for number, outcome in ended_before.items():  # ended before the kill: not run again, same state
        assert read_json(dirs[number] / OUTCOME_FILE) == outcome
        assert trials[number].state.name == ("PRUNED" if outcome["stop_reason"] == "pruned" else "COMPLETE")
    assert read_json(dirs[4] / OUTCOME_FILE)["run_id"] == killed_run  # resumed into its own child run

    # The hopeless trials that started once the pruner had its 3 finished trials were pruned in the first epochs.
    learning_rate = {n: t.params["optimizer.learning_rate"] for n, t in trials.items()}
    hopeless = [n for n, lr in learning_rate.items() if lr >= 0.5 and n >= 4]
    # Seed 33 draws two (3.0 for trial 4, killed and resumed; 1.6 for trial 7, drawn after the restart).
    assert len(hopeless) >= 2, learning_rate
    for number in hopeless:
        assert trials[number].state.name == "PRUNED", (number, learning_rate[number])
        assert max(trials[number].intermediate_values) <= 2  # reported epochs before it stopped
    pruned = [n for n, t in trials.items() if t.state.name == "PRUNED"]

    # Steps: each trial's schedule (its plan.yaml) against where the pruned ones stopped.
    planned = {
        n: yaml.safe_load((d / "plan.yaml").read_text())["decisions"]["train.total_steps"]["value"]
        for n, d in dirs.items()
    }
    assert set(planned.values()) == {69}  # 3 epochs of 23 steps
    client, parent, kids = _runs(tmp_path)
    assert len(kids) == 8 and all(k.info.status == "FINISHED" for k in kids)
    by_trial = {int(k.data.params["sweep.trial"]): k for k in kids}
    ran = {n: int(by_trial[n].data.tags.get("pruned.global_step", planned[n])) for n in trials}
    assert sum(ran.values()) < sum(planned.values())
    saved = sum(planned[n] - ran[n] for n in pruned)
    assert parent.data.metrics["sweep.pruned_trials"] == len(pruned)
    assert parent.data.metrics["sweep.steps_saved"] == saved > 0
    assert {n for n, k in by_trial.items() if k.data.tags.get("pruned") == "true"} == set(pruned)
    for number in pruned:  # a pruned trial keeps its checkpoints (saved at the epoch it stopped)
        assert list((dirs[number] / "checkpoints").glob("ckpt-*.index")), number

    # The parent answers "what mattered": the best finished trial, the importances, the plots.
    best = study.best_trial
    assert (
        parent.data.tags["sweep.best_overrides"]
        == f"optimizer.learning_rate={best.params['optimizer.learning_rate']!r}"
    )
    assert best.params["optimizer.learning_rate"] < 0.3 and best.value > 0.9
    assert parent.data.metrics["best.val_accuracy"] == pytest.approx(best.value)
    assert parent.data.metrics["importance.optimizer.learning_rate"] == 1.0
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id, "summary/search")}
    for name in ("search.json", "optimization_history.png", "parallel_coordinates.png", "intermediate_values.png"):
        assert f"summary/search/{name}" in artifacts


PARETO = {
    "defaults": [{"override /hydra/sweeper": "search"}],
    "hydra": {
        "sweeper": {
            "n_trials": 2,
            "n_jobs": 2,
            "objectives": ["val_accuracy", "examples_per_sec"],
            "direction": ["maximize", "maximize"],
            "sampler": {"name": "random", "seed": 1},
            "params": {
                "optimizer.name": {"choices": ["adam", "sgd"]},
                "optimizer.momentum": {"low": 0.0, "high": 0.9, "when": {"optimizer.name": "sgd"}},
                "optimizer.learning_rate": {"low": 0.01, "high": 0.05, "log": True},
            },
        }
    },
}


@pytest.mark.slow
def test_a_conditional_two_objective_search_runs_through_the_cluster_launchers_local_mode(tmp_path):
    conf = _search_config(tmp_path, "pareto", PARETO)
    done = warm.run(
        _command(
            tmp_path, f"hydra.searchpath=[file://{conf}]", "hparams_search=pareto", "hydra/launcher=slurm_local", *SMALL
        ),
        cwd=ROOT,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    submitted = list((tmp_path / "sweep" / ".submitit").glob("*/*_result.pkl"))
    assert len(submitted) == 2  # each trial was a submitit job
    study = optuna.load_study(study_name="launcher", storage=f"sqlite:///{tmp_path}/sweep/optuna.db")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]
    names = sorted(t.params["optimizer.name"] for t in study.trials)
    assert names == ["adam", "sgd"]  # seed 1 draws one of each: the condition is seen both ways
    for trial in study.trials:
        assert ("optimizer.momentum" in trial.params) == (trial.params["optimizer.name"] == "sgd")
        assert len(trial.values) == 2
    _, parent, kids = _runs(tmp_path)
    assert len(kids) == 2 and all(k.info.status == "FINISHED" for k in kids)
    front = parent.data.tags["sweep.pareto_front"]
    for trial in study.best_trials:
        assert f"trial {trial.number}: val_accuracy={trial.values[0]:.4g}" in front
    sgd = next(k for k in kids if k.data.params["optimizer.name"] == "sgd")
    momentum = next(t for t in study.trials if t.params["optimizer.name"] == "sgd").params["optimizer.momentum"]
    assert float(sgd.data.params["optimizer.momentum"]) == pytest.approx(momentum)
    # Each submitit job (CUDA_VISIBLE_DEVICES set, as submitit does) is forked by the server the sweep shares, the
    # one this test process gave it: not by a server each job would start for its one launch (~12 CPU-s each).
    servers = {read_json(d / OUTCOME_FILE)["forked_by"] for d in _trial_dirs(tmp_path / "sweep").values()}
    assert os.environ.get(warm.COLD_ENV) == "1" or servers == {warm._server[0].process.pid}, servers


def test_a_fail_fast_sweep_stops_at_its_first_failed_job_and_the_parent_names_it(tmp_path):
    """Two jobs at a time: job 0 is refused while job 1 trains (30 epochs); job 1 is stopped, job 2 never starts."""
    done = warm.run(
        _command(
            tmp_path,
            "sweep.fail_fast=true",
            "hydra/launcher=parallel",
            "model.hidden_units=[0],[16],[16,8]",
            "train.epochs=30",
            "tracking.system_metrics=false",
        ),
        cwd=ROOT,
        timeout=600,
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "sweep.fail_fast=true: the sweep stopped at model.hidden_units=[0]" in done.stderr
    assert "model.hidden_units=[16]: stopped (the sweep stopped)" in done.stdout
    assert "model.hidden_units=[16,8]: not started, the sweep stopped at model.hidden_units=[0]" in done.stdout
    sweep = tmp_path / "sweep"
    assert read_json(sweep / "0" / OUTCOME_FILE)["status"] == "REFUSED"
    stopped = read_json(sweep / "1" / OUTCOME_FILE)  # None when the signal came before the launcher's guard
    assert stopped is None or stopped["status"] == "KILLED", stopped
    assert not (sweep / "2" / OUTCOME_FILE).exists()
    _, parent, kids = _runs(tmp_path)
    assert parent.info.status == "FAILED"
    assert parent.data.tags["sweep.stopped_by"] == "model.hidden_units=[0] (exit 2)"
    by_name = {k.info.run_name: k.info.status for k in kids}
    assert by_name.pop("model.hidden_units=[0]") == "FAILED"
    assert set(by_name.values()) <= {"KILLED"} and "model.hidden_units=[16,8]" not in by_name


BROKEN = {
    "defaults": [{"override /hydra/sweeper": "search"}],
    "hydra": {
        "sweeper": {
            "objectives": ["val_acc"],
            "pruner": {"name": "medain"},
            "sampler": {"name": "tpe", "foo": 1},
            "params": {
                "optimizer.learnig_rate": {"low": 0.1, "high": 1},
                "train.epochs": {"low": 0.5, "high": 3.0},
                "model.hidden_units": {"low": 1, "high": 3},
                "precision": {"choices": ["fp32", "fp64"]},
            },
        }
    },
}


def test_every_problem_of_a_search_is_refused_at_once_before_anything_runs(tmp_path):
    conf = _search_config(tmp_path, "broken", BROKEN)
    done = warm.run(
        _command(tmp_path, f"hydra.searchpath=[file://{conf}]", "hparams_search=broken"), cwd=ROOT, timeout=300
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Invalid configuration (7 problems):" in done.stderr
    for key in (
        "hydra.sweeper.params.optimizer.learnig_rate",
        "hydra.sweeper.params.train.epochs",
        "hydra.sweeper.params.model.hidden_units",
        "hydra.sweeper.params.precision",
        "hydra.sweeper.sampler.foo",
        "hydra.sweeper.pruner.name",
        "hydra.sweeper.objectives",
    ):
        assert f"  - {key}=" in done.stderr
    assert "did you mean optimizer.learning_rate" in done.stderr
    sweep = tmp_path / "sweep"
    assert not (sweep / "optuna.db").exists() and not (sweep / SWEEP_FILE).exists()
    assert not list(sweep.glob(f"*/{JOB_FILE}"))
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    experiment = client.get_experiment_by_name("launcher")
    assert client.search_runs([experiment.experiment_id]) == []  # the parent it had opened is withdrawn
