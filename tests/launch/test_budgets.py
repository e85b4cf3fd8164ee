"""train.max_steps, train.max_time and train.val_every_steps: training by budget, validating inside epochs. The
rules (pure), then real launches in this process reading what MLflow and the checkpoints hold.

The time budget's hook: `launcher.launch.hooks.budget`.
"""

from __future__ import annotations

import numpy as np
import pytest
from fakes import CPU_PLAIN
from support.config import config

from launcher.config.durations import parse_duration, show_duration
from launcher.contract import Position
from launcher.plan.resolve import resolve, resolve_all
from launcher.plan.schedule import schedule

# digits: 1438 training examples; at batch 64 without XLA (ragged last batch kept) 23 steps per epoch.
DIGITS = 1438
SMALL = ["model.hidden_units=[16]", "scaling.batch_size=64", "xla=false", "precision=fp32", "deterministic=true"]
# The launches: what they read is MLflow's history and tags and the checkpoints, never the MLflow model (~0.5 CPU-s
# a launch to save).
LAUNCHED = [*SMALL, "tracking.log_model=false"]


def test_durations_parse_as_people_write_them():
    assert [parse_duration(t) for t in ("2h30m", "45m", "90s", "1.5h", "1d", "600", " 1h 5s ")] == [
        9000,
        2700,
        90,
        5400,
        86400,
        600,
        3605,
    ]
    assert [parse_duration(t) for t in ("", "soon", "2x", "0", "-5m", "1h1h", "m", "inf")] == [None] * 8
    assert [show_duration(s) for s in (9000, 90, 0.4, 0)] == ["2h30m", "1m30s", "0.4s", "0s"]  # < 1 s as written


def test_max_steps_shortens_the_last_epoch_and_the_schedule_says_so():
    cfg = config(*SMALL, "train.epochs=5", "train.max_steps=30")
    plan = schedule(cfg, resolve(cfg, CPU_PLAIN), DIGITS, 359)
    s = plan.schedule
    assert (s.steps_per_epoch, s.total_steps, s.epochs) == (23, 30, 2)
    assert [s.steps_in_epoch(Position(epoch=e, global_step=23 * e)) for e in range(3)] == [23, 7, 0]
    # A later launch with a larger budget after that partial epoch stops at exactly its global step too.
    later = schedule(config(*SMALL, "train.epochs=5", "train.max_steps=60"), resolve(cfg, CPU_PLAIN), DIGITS, 359)
    assert later.schedule.steps_in_epoch(Position(epoch=2, global_step=30)) == 23
    assert later.schedule.steps_in_epoch(Position(epoch=3, global_step=53)) == 7
    assert later.schedule.steps_in_epoch(Position(epoch=3, step_in_epoch=4, global_step=57)) == 7
    assert "ends epoch 2 after 7 of its 23 steps" in s.reason("epochs")
    full = schedule(config(*SMALL, "train.epochs=5"), resolve(cfg, CPU_PLAIN), DIGITS, 359).schedule
    assert (full.total_steps, full.epochs, full.steps_in_epoch(Position(epoch=4, global_step=92))) == (115, 5, 23)
    more = schedule(config(*SMALL, "train.epochs=2", "train.max_steps=1000"), resolve(cfg, CPU_PLAIN), DIGITS, 359)
    assert (more.schedule.total_steps, more.schedule.epochs) == (46, 2)  # the epochs end it first


def test_a_budget_that_does_not_parse_is_refused_with_the_others():
    _, problems = resolve_all(config("train.max_time=soon", "train.max_steps=-1"), CPU_PLAIN)
    keys = {p.key: p for p in problems}
    assert {"train.max_time", "train.max_steps"} <= set(keys)
    assert keys["train.max_time"].value == "soon" and "2h30m" in keys["train.max_time"].fix


def test_max_time_without_checkpoints_warns_that_a_rerun_starts_over():
    cfg = config(*SMALL, "train.max_time=1h", "checkpoint=off")
    plan = schedule(cfg, resolve(cfg, CPU_PLAIN), DIGITS, 359)
    assert plan.schedule.max_time_seconds == 3600
    assert any("starts over" in w for w in plan.warnings)


def _history(tmp_path, metric):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("launcher").experiment_id])
    return run, [m.step for m in client.get_metric_history(run.info.run_id, metric)]


def test_max_steps_trains_exactly_that_many_steps_with_a_partial_last_epoch(cli_here, tmp_path):
    done = cli_here(*LAUNCHED, "train.epochs=5", "train.max_steps=30", "tracking.step_metrics_every=10")
    assert done.returncode == 0, done.stderr[-2000:]
    run, epochs = _history(tmp_path, "val_loss")
    assert epochs == [0, 1]  # epoch 2 (7 of 23 steps) is validated and logged like any epoch
    assert _history(tmp_path, "step/loss")[1] == [10, 20, 30]
    assert run.data.tags["stop_reason"] == "max_steps"
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("ckpt-*.json")) == [
        "ckpt-23.json",
        "ckpt-30.json",
    ]
    # A larger budget later: training continues from global step 30 and stops at exactly 60.
    more = cli_here(*LAUNCHED, "train.epochs=5", "train.max_steps=60", "tracking.step_metrics_every=10")
    assert more.returncode == 0, more.stderr[-2000:]
    assert _history(tmp_path, "val_loss")[1] == [0, 1, 2, 3]
    assert _history(tmp_path, "step/loss")[1] == [10, 20, 30, 40, 50, 60]
    newest = max(int(p.stem.split("-")[1]) for p in (tmp_path / "run" / "checkpoints").glob("ckpt-*.json"))
    assert newest == 60


def test_max_time_saves_stops_finished_exit_0_and_the_same_command_continues(cli_here, tmp_path):
    """A 10 ms budget of training time is spent by the first step (it compiles): the run stops at global step 1,
    the first boundary, saved; without a budget the same run dir continues from there."""
    stopped = cli_here(*LAUNCHED, "train.epochs=2", "train.max_time=0.01s")
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    assert "train.max_time=0.01s reached at epoch 1, step 1 (global step 1)" in stopped.stdout
    run, epochs = _history(tmp_path, "val_loss")
    assert run.info.status == "FINISHED" and run.data.tags["stop_reason"] == "max_time" and epochs == []
    assert (tmp_path / "run" / "checkpoints" / "ckpt-1.json").exists()

    again = cli_here(*LAUNCHED, "train.epochs=2")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "Resuming at epoch 1, step 1 (global step 1)" in again.stdout
    continued, epochs = _history(tmp_path, "val_loss")
    assert continued.info.run_id == run.info.run_id and epochs == [0, 1]
    assert continued.data.tags["stop_reason"] == "epochs"


def test_max_time_counts_training_from_its_first_step_not_the_start_up():
    from launcher.launch.hooks.budget import TimeBudgetHook

    asked = []
    guard = type("Guard", (), {"request": lambda self, reason: asked.append(reason)})()
    now = iter([100.0, 100.5, 101.2])  # the process is already 100 s old when training begins
    hook = TimeBudgetHook(1.0, guard, clock=lambda: next(now))
    hook.on_train_begin(Position(), None)
    hook.after_steps(Position(global_step=1), {})
    assert asked == []  # 0.5 s of training
    hook.after_steps(Position(global_step=2), {})
    assert len(asked) == 1  # 1.2 s


VALIDATED = [
    *LAUNCHED,
    "train.epochs=2",
    "train.val_every_steps=10",
    "checkpoint.interval_steps=10",
    "checkpoint.monitor=val_loss",
    "checkpoint.mode=max",  # the worst validation is "best": the first one, at step 10, inside epoch 1
    "train.reduce_lr_on_plateau.enabled=true",
    "train.reduce_lr_on_plateau.patience=0",
    "train.reduce_lr_on_plateau.mode=max",  # every validation after the first is "no better": the rate halves
    "tracking.step_metrics_every=0",
]  # 23 steps per epoch (1438 / 64, the ragged last batch kept): validations at 10, 20, 23, 30, 40, 46


def checkpoint_values(run_dir, step: int) -> dict:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(run_dir / "checkpoints" / f"ckpt-{step}"))
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map() if "OBJECT_GRAPH" not in n}


def test_val_every_steps_validates_inside_epochs_drives_the_best_model_and_plateau_and_resumes_exactly(
    cli_here, tmp_path
):
    done = cli_here(*VALIDATED)
    assert done.returncode == 0, done.stderr[-2000:]
    run, steps = _history(tmp_path, "val_loss")
    assert steps == [10, 20, 23, 30, 40, 46]  # by global step, inside epochs and at their ends
    assert (tmp_path / "run" / "checkpoints" / "best" / "ckpt-10.index").is_file()
    whole = checkpoint_values(tmp_path / "run", 46)
    [rate] = [v for n, v in whole.items() if "learning_rate" in n]
    assert float(rate) == pytest.approx(0.001 * 0.5**5)  # halved by the five validations after the first

    failed = cli_here(*VALIDATED, "hydra.run.dir=again", env={"LAUNCHER_FAULT": "RAISE@steps:30"})
    assert failed.returncode == 1
    resumed = cli_here(*VALIDATED, "hydra.run.dir=again")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "Resuming at epoch 2, step 0 (global step 23)" in resumed.stdout  # the validation at 30 is redone
    again = checkpoint_values(tmp_path / "again", 46)
    assert again.keys() == whole.keys()
    for name in whole:
        np.testing.assert_array_equal(again[name], whole[name], err_msg=name)
