"""Every point once: a validation inside an epoch (train.val_every_steps) that stops training (early stopping, a
pruned trial) is the epoch's only validation at that step: the callbacks' counters tick once, the study hears it
once, MLflow gets one point, and the checkpoint saved there says where training stopped (not a finished epoch);
an epoch end's validation counts as one more validation for early stopping.
The engine with the launch's real hook list (`hooks_for`) over fakes of the checkpointer, tracker and trial; then
the user's path through the real CLI: runs killed and continued into the same MLflow run.

The tracker's side (a continued run's points not logged again): tests/tracking/test_held_points.py.
"""

from __future__ import annotations

import json
import signal
from dataclasses import replace

import pytest
from support.config import TINY, config
from support.train import QUIET

from launcher.launch.context import Restored
from launcher.launch.hooks.assembly import hooks_for
from launcher.launch.hooks.preemption import PreemptionGuard

# 10 steps per epoch; validations every 3 global steps: at 3, 6 and 9 inside epoch 1, and at its end (10).
VALIDATING = [*TINY, *QUIET, "xla=false", "deterministic=true", "train.max_steps_per_epoch=10"]
VALIDATING += ["train.val_every_steps=3", "train.measure_utilization=false", "optimizer.learning_rate=0.002"]
# mode=max on a falling val_loss: the validation at step 3 is the best, the one at step 6 is no better.
EARLY_STOP = ["train.early_stopping.enabled=true", "train.early_stopping.patience=1", "train.early_stopping.mode=max"]
PLATEAU = ["train.reduce_lr_on_plateau.enabled=true", "train.reduce_lr_on_plateau.patience=1"]
PLATEAU += ["train.reduce_lr_on_plateau.mode=max", "train.reduce_lr_on_plateau.factor=0.5"]


class SavedPositions:
    """The checkpointer: records where each save says training is, and the sidecar it gets."""

    def __init__(self):
        self.saves: list[tuple[dict, dict]] = []

    def save(self, position, extra):
        self.saves.append((vars(position).copy(), extra))

    def save_best(self, position):
        pass


class Points:
    """The MLflow run: records every point logged."""

    run_id, resumed = "run-1", False

    def __init__(self):
        self.points: list[tuple[str, int]] = []

    def log_metrics(self, metrics, step):
        self.points += [(key, step) for key in metrics]

    def steps(self, key: str) -> list[int]:
        return [s for k, s in self.points if k == key]

    def logged_steps(self, metric):
        return set()

    def set_tags(self, tags):
        pass

    def flush(self):
        pass


class Trial:
    """An hparams_search trial: records each report; pruned at `prune_at` (a global step), or never."""

    number, objective = 0, "val_loss"

    def __init__(self, prune_at: int | None = None):
        self.prune_at = prune_at
        self.reports: list[int] = []

    def report(self, value, step):
        self.reports.append(step)

    def should_prune(self):
        return self.reports[-1] == self.prune_at


def fit(tmp_path, overrides, trial, epochs):
    """The launch's engine and hook list, trained `epochs`: (result, fit hooks, tracker, checkpointer, the global
    steps validated at, engine)."""
    from launcher.launch.training import TrainingLaunch
    from launcher.train.engine import Engine, EngineSettings

    launch = TrainingLaunch(config(*VALIDATING, *overrides), tmp_path / "run", tmp_path, {})
    launch.prepare()
    launch.build()
    tracker, checkpointer = Points(), SavedPositions()
    guard = PreemptionGuard(enabled=False)
    built, prepared = launch.context.built, replace(launch.context.prepared, trial=trial)
    restored = Restored(launch.context.plan, checkpointer)
    context = replace(launch.context, prepared=prepared, restored=restored, tracker=tracker, run_dir=tmp_path)
    hooks = hooks_for(context, guard)
    settings = EngineSettings(callbacks=built.callbacks, verbose=0)
    engine = Engine(built, context.plan, context.source, settings)
    validations: list[int] = []
    evaluate = engine.evaluate

    def counted(split="val"):
        validations.append(engine.optimizer.iterations.numpy().item())
        return evaluate(split)

    engine.evaluate = counted
    result = engine.fit(epochs, hooks=hooks.hooks)
    return result, hooks, tracker, checkpointer, validations, engine


def test_an_early_stop_at_a_validation_inside_the_last_epoch_validates_once_and_saves_where_it_stopped(tmp_path):
    import keras

    result, hooks, tracker, checkpointer, validations, engine = fit(tmp_path, EARLY_STOP + PLATEAU, Trial(), 1)
    assert validations == [3, 6]  # not a third at step 6 for the epoch's end
    assert tracker.steps("val_loss") == [3, 6]
    assert hooks.pruning.trial.reports == [3, 6]  # the study hears each validation once
    [early] = [c for c in engine.callbacks.callbacks if isinstance(c, keras.callbacks.EarlyStopping)]
    assert early.wait == 1  # one validation no better than step 3's
    assert float(engine.optimizer.learning_rate.numpy()) == pytest.approx(0.002 * 0.5)  # halved once, not twice
    # The epoch's checkpoint is where training stopped: 6 of its 10 steps, not a finished epoch.
    [(position, sidecar)] = checkpointer.saves
    assert position == {"epoch": 0, "step_in_epoch": 6, "global_step": 6}
    assert [(e["epoch"], e["global_step"]) for e in sidecar["history"]] == [(0, 6)]
    assert sidecar["early_stopping"]["wait"] == 1
    assert tracker.steps("loss") == [0]  # the partial epoch's training metrics, logged once as epoch 0
    assert result.stopped_early and hooks.stop_reason(result, engine.plan.schedule) == "early_stopping"


def test_a_trial_pruned_at_a_validation_inside_an_epoch_validates_once_and_saves_where_it_stopped(tmp_path):
    """A real Optuna study whose pruner stops every trial at its first report: the validation at step 3, which early
    stopping counts as its best. No epoch-end validation follows to count as a second one."""
    import optuna

    from launcher.config.samplers import STUDY_OBJECTIVES, STUDY_PRUNER
    from launcher.config.schema import SweepConfig
    from launcher.launch.trial import open_trial

    storage = f"sqlite:///{tmp_path}/study.db"
    study = optuna.create_study(study_name="s", storage=storage, direction="minimize")
    study.set_user_attr(STUDY_PRUNER, {"name": "threshold", "upper": 0.0})  # any val_loss is above it
    study.set_user_attr(STUDY_OBJECTIVES, ["val_loss"])
    trial, _ = open_trial(SweepConfig(trial=study.ask().number, study=storage, study_name="s"), 3, False)
    result, hooks, tracker, checkpointer, validations, engine = fit(tmp_path, EARLY_STOP, trial, 2)
    assert validations == [3]
    assert tracker.steps("val_loss") == [3]
    assert list(study.get_trials(deepcopy=False)[-1].intermediate_values) == [3]
    [(position, sidecar)] = checkpointer.saves
    assert position == {"epoch": 0, "step_in_epoch": 3, "global_step": 3}
    assert sidecar["early_stopping"]["wait"] == 0
    assert [e.epoch for e in result.epochs] == [0]
    assert hooks.pruning.tags(engine.plan.schedule.total_steps)["pruned.global_step"] == "3"
    assert hooks.stop_reason(result, engine.plan.schedule) == "pruned"


def test_early_stopping_counts_an_epoch_end_validation_as_one_of_its_validations(tmp_path):
    """Every 6 steps with 10-step epochs: validations at 6 (the best) and at epoch 1's end (no better). Patience 1
    is spent at that epoch end, which stops the run there (Keras never stops at its epoch 0: an epoch end must not be
    given the epoch index among validations counted from 1)."""
    result, hooks, tracker, checkpointer, validations, engine = fit(
        tmp_path, [*EARLY_STOP, "train.val_every_steps=6"], None, 3
    )
    assert validations == [6, 10]
    assert tracker.steps("val_loss") == [6, 10]
    assert [e.epoch for e in result.epochs] == [0]
    assert [position for position, _ in checkpointer.saves] == [{"epoch": 1, "step_in_epoch": 0, "global_step": 10}]
    assert hooks.stop_reason(result, engine.plan.schedule) == "early_stopping"


# ------------------------------------------------------------------ the user's path: the real CLI

# digits at batch 64: 23 steps per epoch; validations at 10, 20, 23 (epoch end), 30, 40, 46; step points every 5.
SMALL = ["model.hidden_units=[16]", "scaling.batch_size=64", "xla=false", "precision=fp32", "deterministic=true"]
CURVES = [*SMALL, "train.epochs=2", "train.val_every_steps=10", "tracking.step_metrics_every=5"]


def _run(tmp_path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("launcher").experiment_id])
    return client, runs


def test_runs_stopped_before_and_after_their_first_checkpoint_and_continued_log_every_point_once(
    cli, cli_here, tmp_path
):
    """A training failure at step 12 (no checkpoint yet: the rerun starts over in the same MLflow run), then a
    SIGKILL at step 30 in a process of its own (after the validation at 30 and step points past ckpt-23 reached
    MLflow: the rerun resumes from 23 and trains those steps again)."""
    failed = cli_here(*CURVES, env={"LAUNCHER_FAULT": "RAISE@steps:12"})
    assert failed.returncode == 1, failed.stderr[-2000:]
    killed = cli(*CURVES, env={"LAUNCHER_FAULT": "KILL@steps:30"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert "training starts over in it" in killed.stdout
    done = cli_here(*CURVES)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Resuming at epoch 2, step 0 (global step 23)" in done.stdout

    client, runs = _run(tmp_path)
    assert [r.info.status for r in runs] == ["FINISHED"]  # one run for the three launches
    run_id = runs[0].info.run_id
    curves = [key for key in runs[0].data.metrics if key.startswith(("step/", "val_"))]
    assert {"step/loss", "step/learning_rate", "val_loss", "val_accuracy"} <= set(curves)
    steps = {key: [m.step for m in client.get_metric_history(run_id, key)] for key in curves}
    assert {key: sorted(s) for key, s in steps.items() if len(s) != len(set(s))} == {}  # one point per step
    assert sorted(steps["val_loss"]) == [10, 20, 23, 30, 40, 46]
    assert sorted(steps["step/loss"]) == [5, 10, 15, 20, 25, 30, 35, 40, 45]
    assert sorted(m.step for m in client.get_metric_history(run_id, "loss")) == [0, 1]


def test_early_stopping_at_a_validation_inside_an_epoch_logs_it_once_and_checkpoints_where_it_stopped(
    cli_here, tmp_path
):
    """mode=max on a falling val_loss: the validation at step 20 is no better than step 10's and stops the run."""
    stop = ["train.early_stopping.enabled=true", "train.early_stopping.patience=1", "train.early_stopping.mode=max"]
    done = cli_here(*CURVES, *stop, "tracking.step_metrics_every=0")
    assert done.returncode == 0, done.stderr[-2000:]
    client, [run] = _run(tmp_path)
    assert run.data.tags["stop_reason"] == "early_stopping"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "val_loss")] == [10, 20]
    checkpoints = tmp_path / "run" / "checkpoints"
    assert sorted(p.name for p in checkpoints.glob("ckpt-*.json")) == ["ckpt-20.json"]
    sidecar = json.loads((checkpoints / "ckpt-20.json").read_text())
    assert sidecar["position"] == {"epoch": 0, "step_in_epoch": 20, "global_step": 20}  # 20 of epoch 1's 23 steps
    assert sidecar["early_stopping"]["wait"] == 1
