"""Checkpoint policy: exact resume after SIGKILL, SIGTERM preemption, corruption fallback, keep-N, best.

The restore step: `launcher.launch.restore`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import warm
from support.cli import digits_shards
from support.config import ROOT
from support.tracking import store

from launcher.contract import Position

# digits: 1438 training examples / batch 32 -> 45 steps per epoch (xla=false keeps the ragged last batch), 90 in all.
STEPS_PER_EPOCH = 45
EPOCHS = 2  # every kill point (the last at step 82) falls before the end of epoch 2
TOTAL = STEPS_PER_EPOCH * EPOCHS
EXACT = [
    "model.hidden_units=[32]",
    "scaling.batch_size=32",
    f"train.epochs={EPOCHS}",
    "train.steps_per_execution=1",
    "xla=false",
    "deterministic=true",
    "checkpoint.interval_steps=5",
    "checkpoint.max_to_keep=50",
]


def command(run_dir: Path, *overrides: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "launcher",
        f"hydra.run.dir={run_dir}",
        f"tracking.uri={store(run_dir.parent / f'{run_dir.name}.db')}",
        *overrides,
    ]


def run_to_end(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    done = warm.run(command(run_dir, *overrides), cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def run_here(launcher_here, run_dir: Path, *overrides: str):
    """`run_to_end` through the same entry in this process, for a launch nothing kills (a resume after a killed
    process, a reference run)."""
    done = launcher_here(command(run_dir, *overrides)[3:], run_dir.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def checkpoint_tensors(run_dir: Path, step: int | None = None) -> dict[str, np.ndarray]:
    import tensorflow as tf

    directory = run_dir / "checkpoints"
    prefix = str(directory / f"ckpt-{step}") if step is not None else tf.train.latest_checkpoint(str(directory))
    reader = tf.train.load_checkpoint(prefix)
    return {
        name: reader.get_tensor(name)
        for name in reader.get_variable_to_shape_map()
        if not name.startswith("_CHECKPOINTABLE_OBJECT_GRAPH")
    }


def assert_identical(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def mlflow_runs(run_dir: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{run_dir.parent}/{run_dir.name}.db")
    experiment = client.get_experiment_by_name("launcher")
    return client, client.search_runs([experiment.experiment_id])


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run every interrupted one must match."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    run_to_end(run_dir, *EXACT, "precision=mixed")
    return checkpoint_tensors(run_dir, TOTAL)


def run_with_fault(run_dir: Path, fault: str, *overrides: str) -> subprocess.CompletedProcess:
    """Run until the test-only fault (LAUNCHER_FAULT, see launcher/launch/faults.py) fires at its exact point."""
    env = {**os.environ, "LAUNCHER_FAULT": fault}
    return warm.run(command(run_dir, *overrides), cwd=ROOT, timeout=600, env=env)


def newest_checkpoint(run_dir: Path, suffix: str = ".index") -> int:
    return max(int(p.name[5 : -len(suffix)]) for p in (run_dir / "checkpoints").glob(f"ckpt-*{suffix}"))


@pytest.mark.slow
@pytest.mark.xdist_group("checkpoint-reference")  # one worker makes the module's reference run once
@pytest.mark.parametrize(
    ("fault", "newest", "resumed_from"),
    [
        ("KILL@steps:22", 20, 20),  # two steps after the last save: they are trained again
        ("KILL@after_save:45", 45, 45),  # the epoch-end save done, its metrics not yet in MLflow
        ("KILL@before_sidecar:65", 65, 60),  # TF files written, sidecar not: the previous one is used
        ("KILL@steps:82", 80, 75),  # then the newest checkpoint's data is overwritten on disk
    ],
    ids=["mid-epoch", "epoch-boundary", "during-checkpoint-write", "corrupt-newest"],
)
def test_sigkill_and_resume_reaches_identical_state(reference, tmp_path, launcher_here, fault, newest, resumed_from):
    run_dir = tmp_path / "run"
    killed = run_with_fault(run_dir, fault, *EXACT, "precision=mixed")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert newest_checkpoint(run_dir) == newest
    if fault == "KILL@steps:82":
        (run_dir / "checkpoints" / f"ckpt-{newest}.data-00000-of-00001").write_bytes(b"\0" * 64)
    resumed = run_here(launcher_here, run_dir, *EXACT, "precision=mixed")
    assert f"global step {resumed_from})" in resumed.stdout
    assert (
        f"Resuming at epoch {resumed_from // STEPS_PER_EPOCH + 1}, step {resumed_from % STEPS_PER_EPOCH}"
        in resumed.stdout
    )
    if "before_sidecar" in fault:
        assert f"ckpt-{newest} has no sidecar" in resumed.stderr and "falling back" in resumed.stderr
    if "steps:82" in fault:
        assert f"ckpt-{newest} is unreadable" in resumed.stderr and "falling back" in resumed.stderr
    if "after_save" in fault:
        # Killed between the save and the MLflow log: the sidecar's history fills the gap.
        assert "re-logged 1 epoch(s) of metrics" in resumed.stdout
    final = checkpoint_tensors(run_dir, TOTAL)
    assert "optimizer/dynamic_scale/.ATTRIBUTES/VARIABLE_VALUE" in final  # loss scale is part of the state
    assert_identical(final, reference)
    # Exactly once: the step counter equals the planned number of steps.
    assert int(final["global_step/.ATTRIBUTES/VARIABLE_VALUE"]) == TOTAL
    client, runs = mlflow_runs(run_dir)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(runs[0].info.run_id, "loss")]
    assert steps == list(range(EPOCHS))


@pytest.mark.slow
@pytest.mark.xdist_group("checkpoint-reference")
def test_negative_control_without_the_data_position_the_weights_differ(reference, tmp_path, launcher_here):
    run_dir = tmp_path / "run"
    assert run_with_fault(run_dir, "KILL@steps:22", *EXACT, "precision=mixed").returncode == -signal.SIGKILL
    for sidecar in (run_dir / "checkpoints").glob("ckpt-*.json"):
        state = json.loads(sidecar.read_text())
        state["position"]["step_in_epoch"] = 0  # forget where in the epoch we were
        sidecar.write_text(json.dumps(state))
    run_here(launcher_here, run_dir, *EXACT, "precision=mixed")
    final = checkpoint_tensors(run_dir)
    # Model weights are saved once, under the optimizer's path to them.
    weights = [name for name in reference if "_trainable_variables" in name]
    assert weights and all(name in final for name in weights)
    assert any(not np.array_equal(final[name], reference[name]) for name in weights)


@pytest.mark.slow
@pytest.mark.xdist_group("checkpoint-reference")
def test_a_training_process_that_dies_restarts_by_itself_and_reaches_identical_state(reference, tmp_path):
    run_dir = tmp_path / "run"
    # SIGKILL at global step 22 (saves every 5) in the first two attempts: two restarts, both from ckpt-20.
    restarts = ["train.max_restarts=2", "train.restart_backoff=0.1"]
    done = run_with_fault(run_dir, "KILL@steps:22#2", *EXACT, "precision=mixed", *restarts)
    assert done.returncode == 0, done.stderr[-3000:]
    for k in (1, 2):
        assert f"Restart {k} of 2 in {0.1 * 2 ** (k - 1):g} s (the training process was killed by SIGKILL)" in (
            done.stderr
        )
    assert done.stdout.count("Resuming at epoch 1, step 20 (global step 20)") == 2
    assert_identical(checkpoint_tensors(run_dir, TOTAL), reference)
    client, runs = mlflow_runs(run_dir)
    assert [r.info.status for r in runs] == ["FINISHED"]  # one run through three processes
    tags = runs[0].data.tags
    assert tags["restart.count"] == "2"
    assert (
        tags["restart.1.error"]
        == tags["restart.2.error"]
        == tags["error"]
        == ("the training process was killed by SIGKILL")
    )
    assert [m.step for m in client.get_metric_history(runs[0].info.run_id, "val_loss")] == list(range(EPOCHS))


@pytest.mark.slow
def test_mirrored_resume_from_tfrecord_shards_reaches_identical_state(tmp_path, launcher_here):
    """Streamed data: the digits as 6 TFRecord shards (the converter's output), killed mid-epoch under mirrored,
    resumed exactly (the epoch's first batches re-read and skipped)."""
    mirrored = [
        *EXACT,
        "strategy=mirrored",
        "precision=fp32",
        "dataset=tfrecord",
        f"dataset.train={digits_shards(tmp_path, 6)}",
    ]
    steps = 1438 // 64  # global batch 64, remainder dropped
    total = steps * EPOCHS
    reference_dir = tmp_path / "ref"
    run_here(launcher_here, reference_dir, *mirrored)
    run_dir = tmp_path / "run"
    assert run_with_fault(run_dir, "KILL@steps:32", *mirrored).returncode == -signal.SIGKILL
    assert newest_checkpoint(run_dir) == 30
    resumed = run_here(launcher_here, run_dir, *mirrored)
    assert f"Resuming at epoch 2, step {30 - steps} (global step 30)" in resumed.stdout
    assert re.search(r"data.resume\s+exact \(skips\)", resumed.stdout)
    final = checkpoint_tensors(run_dir, total)
    assert_identical(final, checkpoint_tensors(reference_dir, total))
    assert int(final["global_step/.ATTRIBUTES/VARIABLE_VALUE"]) == total
    client, runs = mlflow_runs(run_dir)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(runs[0].info.run_id, "loss")] == list(range(EPOCHS))


@pytest.mark.slow
def test_xla_resume_reaches_identical_state_and_a_run_keeps_n_and_exports_the_best_model(tmp_path, launcher_here):
    """Under XLA, a run killed at step 22 resumes and ends where the uninterrupted one does. That uninterrupted run
    (one training for both) also keeps the newest 2 checkpoints (checkpoint.max_to_keep=2) and exports the best one
    by val_loss (checkpoint.monitor, checkpoint.mode) as best.keras beside model.keras, both logged to MLflow."""
    import keras

    per_epoch = 1438 // 32  # XLA drops the ragged last batch
    total = per_epoch * EPOCHS
    # "Best" = highest val_loss: the first epoch (val_loss falls while training), so best != last.
    keep = ["checkpoint.max_to_keep=2", "checkpoint.monitor=val_loss", "checkpoint.mode=max"]
    compiled = [*EXACT, "precision=fp32", "xla=true", *keep]
    reference_dir = tmp_path / "ref"
    run_here(launcher_here, reference_dir, *compiled)
    run_dir = tmp_path / "run"
    assert run_with_fault(run_dir, "KILL@steps:22", *compiled).returncode == -signal.SIGKILL
    resumed = run_here(launcher_here, run_dir, *compiled)
    assert "Resuming at epoch 1, step 20 (global step 20)" in resumed.stdout
    assert_identical(checkpoint_tensors(run_dir, total), checkpoint_tensors(reference_dir, total))

    directory = reference_dir / "checkpoints"
    step_save = total - total % 5  # the last save every 5 steps (85) before the run's end (88)
    indexes = sorted(p.name for p in directory.glob("ckpt-*.index"))
    assert indexes == [f"ckpt-{step_save}.index", f"ckpt-{total}.index"]
    assert sorted(p.name for p in directory.glob("ckpt-*.json")) == [f"ckpt-{step_save}.json", f"ckpt-{total}.json"]
    assert [p.name for p in (directory / "best").glob("*.index")] == [f"ckpt-{per_epoch}.index"]
    sidecar = json.loads((directory / f"ckpt-{total}.json").read_text())
    losses = [entry["val_loss"] for entry in sidecar["history"]]
    assert sidecar["best"]["value"] == max(losses)
    assert sidecar["best"]["epoch"] == losses.index(max(losses)) == 0
    best, last = (keras.saving.load_model(reference_dir / f"{n}.keras") for n in ("best", "model"))
    assert any(not np.array_equal(a, b) for a, b in zip(best.get_weights(), last.get_weights(), strict=True))
    client, runs = mlflow_runs(reference_dir)
    artifacts = {a.path for a in client.list_artifacts(runs[0].info.run_id, "model")}
    assert artifacts == {"model/model.keras", "model/best.keras"}


@pytest.mark.slow
def test_sigterm_saves_at_that_step_marks_killed_and_resumes_the_same_run(tmp_path, launcher_here):
    run_dir = tmp_path / "run"
    epochs = EPOCHS
    args = [*EXACT, "precision=fp32", "checkpoint.interval_steps=0", f"train.epochs={epochs}"]
    # SIGTERM arrives after global step 50, five steps into epoch 2 of 2 (no step saves configured).
    stopped = run_with_fault(run_dir, "TERM@steps:50", *args)
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr[-2000:]
    assert "Preempted" in stopped.stdout and "re-run the same command to resume" in stopped.stdout
    assert newest_checkpoint(run_dir, ".json") == 50 > STEPS_PER_EPOCH
    assert "at epoch 2, step 5 (global step 50)" in stopped.stdout
    client, runs = mlflow_runs(run_dir)
    assert [r.info.status for r in runs] == ["KILLED"]
    run_id = runs[0].info.run_id

    resumed = run_here(launcher_here, run_dir, *args)
    assert "Resuming at epoch 2, step 5 (global step 50)" in resumed.stdout
    client, runs = mlflow_runs(run_dir)
    assert [(r.info.run_id, r.info.status) for r in runs] == [(run_id, "FINISHED")]
    assert [m.step for m in client.get_metric_history(run_id, "val_loss")] == list(range(epochs))
    final = checkpoint_tensors(run_dir, STEPS_PER_EPOCH * epochs)
    assert int(final["global_step/.ATTRIBUTES/VARIABLE_VALUE"]) == STEPS_PER_EPOCH * epochs


def test_exported_model_predicts_like_the_trained_one(tmp_path):
    import keras
    from support.config import TINY, compose

    from launcher.launch.training import execute

    outcome = execute(compose(*TINY, "precision=bf16", "tracking.enabled=false"), tmp_path / "run", tmp_path)
    x = np.random.default_rng(0).random((16, 8, 8, 1)).astype("float32")
    expected = outcome.model.predict(x, verbose=0)
    loaded = keras.saving.load_model(tmp_path / "run" / "model.keras")
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), expected)


@pytest.mark.parametrize(
    ("resume", "message"),
    [("/nonexistent/ckpt-3", "existing checkpoint prefix"), ("sometimes", "existing checkpoint prefix")],
)
def test_bad_resume_values_are_clear_errors(tmp_path, resume, message, launcher_here):
    done = launcher_here(command(tmp_path / "run", "train.epochs=1", f"checkpoint.resume={resume}")[3:], tmp_path)
    assert done.returncode == 2
    assert f"checkpoint.resume='{resume}'" in done.stderr and message in done.stderr
    assert "fix: checkpoint.resume=auto" in done.stderr


def test_resume_from_a_given_checkpoint_path_and_resume_never_moves_old_checkpoints_aside(tmp_path, launcher_here):
    """One trained run for both (they each trained a small fp32 MLP on the same run dir first)."""
    run_dir = tmp_path / "run"
    args = [
        "model.hidden_units=[16]",
        "scaling.batch_size=32",
        "xla=false",
        "precision=fp32",
        "train.epochs=2",
        "checkpoint.interval_steps=20",
        "checkpoint.max_to_keep=10",
    ]
    run_here(launcher_here, run_dir, *args)
    again = run_here(launcher_here, run_dir, *args, f"checkpoint.resume={run_dir}/checkpoints/ckpt-20")
    assert "Resuming at epoch 1, step 20 (global step 20)" in again.stdout
    assert "epoch 1/2:" in again.stdout and "epoch 2/2:" in again.stdout
    # checkpoint.resume=never on the same run dir starts over, the old checkpoints moved aside.
    never = run_here(launcher_here, run_dir, *args, "checkpoint.resume=never")
    assert "moved to" in never.stderr
    assert list((run_dir / "checkpoints.replaced").glob("ckpt-*.index"))
    assert list((run_dir / "checkpoints").glob("ckpt-*.index"))


def test_the_first_save_is_restored_into_fresh_objects_and_a_mismatch_fails_at_once(tmp_path):
    import keras
    from support.config import TINY, config

    from launcher.launch.checkpointer import Checkpointer, CheckpointVerifyError
    from launcher.launch.training import TrainingLaunch

    launch = TrainingLaunch(config(*TINY, "precision=fp32", "tracking.enabled=false"), tmp_path / "run", tmp_path, {})
    launch.prepare()
    launch.build()
    context = launch.context
    checkpointer = Checkpointer(context.config.checkpoint, tmp_path / "ckpt", context.built, {"name": "mlp"})
    checkpointer.save(Position(global_step=1), {})
    assert checkpointer.verified
    # A restore path that would not bring every variable back is caught on the first save.
    real_rebuild = context.built.rebuild

    def rebuild_with_another_model():
        twin = real_rebuild()
        with twin.strategy.scope():
            twin.model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(), keras.layers.Dense(3)])
        return twin

    context.built.rebuild = rebuild_with_another_model
    fresh = Checkpointer(context.config.checkpoint, tmp_path / "ckpt2", context.built, {"name": "mlp"})
    with pytest.raises(CheckpointVerifyError, match="does not restore into a freshly built model"):
        fresh.save(Position(global_step=1), {})
    assert not fresh.verified


@pytest.mark.slow  # a training of 400 steps, seconds of CPU in this process
def test_the_frequent_preset_saves_every_50_steps_and_every_epoch_and_keeps_5(tmp_path):
    """checkpoint=frequent as it behaves: saves at each multiple of 50 global steps and at each epoch end, the
    newest 5 kept, the best model by val_loss exported (steps per epoch read from the Plan)."""
    from support.config import TINY, compose

    from launcher.launch.training import execute

    node = compose(*TINY, "checkpoint=frequent", "train.epochs=4", "precision=fp32", "tracking.enabled=false")
    outcome = execute(node, tmp_path / "run", tmp_path)
    per_epoch = outcome.plan.schedule.steps_per_epoch
    last = per_epoch * 4
    saved = sorted({*range(50, last + 1, 50), *range(per_epoch, last + 1, per_epoch)})
    kept = sorted(int(p.stem.split("-")[1]) for p in (tmp_path / "run" / "checkpoints").glob("ckpt-*.json"))
    assert kept == saved[-5:] and len(saved) > 5, (kept, saved)
    assert (tmp_path / "run" / "best.keras").exists()


def test_named_run_resumes_under_another_strategy_and_the_plan_says_so(tmp_path, launcher_here):
    common = [
        "name=my-run",
        "model.hidden_units=[16]",
        "precision=fp32",
        "scaling=global",
        "scaling.batch_size=64",
        f"tracking.uri=sqlite:///{tmp_path}/m.db",
    ]
    first = launcher_here([*common, "train.epochs=1"], tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    assert (tmp_path / "outputs" / "runs" / "my-run" / "checkpoints").is_dir()
    second = launcher_here([*common, "train.epochs=2", "strategy=mirrored"], tmp_path)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "allowed: checkpoint written with strategy=default, replicas=1" in second.stdout
    import yaml

    plan = yaml.safe_load((tmp_path / "outputs" / "runs" / "my-run" / "plan.yaml").read_text())
    assert "now strategy=mirrored, replicas=2" in plan["decisions"]["resume"]["reason"]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/m.db")
    runs = client.search_runs([client.get_experiment_by_name("launcher").experiment_id])
    assert [r.info.run_name for r in runs] == ["my-run"]
    assert [m.step for m in client.get_metric_history(runs[0].info.run_id, "loss")] == [0, 1]
    assert runs[0].data.tags["plan.resume"].startswith("epoch 2, step 0")


@pytest.mark.unit
def test_local_workers_probing_one_checkpoint_directory_at_once_do_not_remove_each_other_s_probe(tmp_path):
    """Each process writes and removes a probe of its own: a peer's probe mid-check is left alone, so neither is
    refused (`launcher.launch.checkpointer.check_writable`; with one shared name, a worker was refused at random)."""
    from launcher.launch.checkpointer import check_writable

    peer = tmp_path / f".write-test-{os.getpid() + 1}"
    peer.write_bytes(b"0")  # another worker's probe, between its write and its unlink
    check_writable(tmp_path)
    assert peer.exists() and sorted(p.name for p in tmp_path.iterdir()) == [peer.name]
