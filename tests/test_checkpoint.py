"""Checkpoint policy: exact resume after SIGKILL, SIGTERM preemption, corruption fallback, keep-N, best."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

# digits: 1438 training examples / batch 32 -> 45 steps per epoch (xla=false keeps the ragged last batch).
STEPS_PER_EPOCH = 45
EPOCHS = 3
TOTAL = STEPS_PER_EPOCH * EPOCHS
EXACT = [
    "model.hidden_units=[32]", "scaling.batch_size=32", f"train.epochs={EPOCHS}", "train.steps_per_execution=1",
    "xla=false", "deterministic=true", "checkpoint.interval_steps=5", "checkpoint.max_to_keep=50",
]


def command(run_dir: Path, *overrides: str) -> list[str]:
    return [sys.executable, "-m", "launcher", f"hydra.run.dir={run_dir}",
            f"tracking.uri=sqlite:///{run_dir.parent}/{run_dir.name}.db", *overrides]


def run_to_end(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    done = subprocess.run(command(run_dir, *overrides), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def start(run_dir: Path, *overrides: str) -> subprocess.Popen:
    return subprocess.Popen(command(run_dir, *overrides), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while not path.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"run ended before {path.name} appeared: {err[-2000:]}")
        if time.time() > deadline:
            proc.kill()
            pytest.fail(f"{path} never appeared")
        time.sleep(0.01)


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


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kill_after", "damage"),
    [(20, None), (STEPS_PER_EPOCH, None), (65, "mid-write"), (80, "corrupt")],
    ids=["mid-epoch", "epoch-boundary", "during-checkpoint-write", "corrupt-newest"],
)
def test_sigkill_and_resume_reaches_identical_state(reference, tmp_path, kill_after, damage):
    run_dir = tmp_path / "run"
    proc = start(run_dir, *EXACT, "precision=mixed")
    wait_for(run_dir / "checkpoints" / f"ckpt-{kill_after}.json", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    newest = max(int(p.name[5:-6]) for p in (run_dir / "checkpoints").glob("ckpt-*.index"))
    data = run_dir / "checkpoints" / f"ckpt-{newest}.data-00000-of-00001"
    if damage == "mid-write":
        # What a kill during a write leaves: data without its sidecar, possibly truncated.
        (run_dir / "checkpoints" / f"ckpt-{newest}.json").unlink(missing_ok=True)
        data.write_bytes(data.read_bytes()[:100])
    elif damage == "corrupt":
        # A complete-looking checkpoint whose data file was overwritten on disk.
        data.write_bytes(b"\0" * 64)
    resumed = run_to_end(run_dir, *EXACT, "precision=mixed")
    assert "Resuming at epoch" in resumed.stdout
    if damage == "mid-write":
        assert f"ckpt-{newest} has no sidecar" in resumed.stderr and "falling back" in resumed.stderr
    elif damage == "corrupt":
        assert f"ckpt-{newest} is unreadable" in resumed.stderr and "falling back" in resumed.stderr
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
def test_negative_control_without_the_data_position_the_weights_differ(reference, tmp_path):
    run_dir = tmp_path / "run"
    proc = start(run_dir, *EXACT, "precision=mixed")
    wait_for(run_dir / "checkpoints" / "ckpt-20.json", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for sidecar in (run_dir / "checkpoints").glob("ckpt-*.json"):
        state = json.loads(sidecar.read_text())
        state["position"]["step_in_epoch"] = 0  # forget where in the epoch we were
        sidecar.write_text(json.dumps(state))
    run_to_end(run_dir, *EXACT, "precision=mixed")
    final = checkpoint_tensors(run_dir)
    # Model weights are saved once, under the optimizer's path to them.
    weights = [name for name in reference if "_trainable_variables" in name]
    assert weights and all(name in final for name in weights)
    assert any(not np.array_equal(final[name], reference[name]) for name in weights)


@pytest.mark.slow
def test_mirrored_resume_is_all_close(tmp_path):
    mirrored = [*EXACT, "strategy=mirrored", "precision=fp32"]
    steps = 1438 // 64  # global batch 64, remainder dropped
    total = steps * EPOCHS
    reference_dir = tmp_path / "ref"
    run_to_end(reference_dir, *mirrored)
    run_dir = tmp_path / "run"
    proc = start(run_dir, *mirrored)
    wait_for(run_dir / "checkpoints" / "ckpt-30.json", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    run_to_end(run_dir, *mirrored)
    a, b = checkpoint_tensors(reference_dir, total), checkpoint_tensors(run_dir, total)
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.slow
def test_sigterm_saves_marks_killed_and_resumes_the_same_run(tmp_path):
    run_dir = tmp_path / "run"
    epochs = 20  # long enough that the signal lands while training
    args = [*EXACT, "precision=fp32", "checkpoint.interval_steps=0", f"train.epochs={epochs}"]
    proc = start(run_dir, *args)
    wait_for(run_dir / "checkpoints" / f"ckpt-{STEPS_PER_EPOCH}.json", proc)
    time.sleep(0.3)  # somewhere in epoch 2, at whatever step the run has reached
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "Preempted" in out and "re-run the same command to resume" in out
    newest = max(int(p.name[5:-5]) for p in (run_dir / "checkpoints").glob("ckpt-*.json"))
    # Saved at the step boundary where the signal was seen (the epoch end if it came during evaluation).
    assert newest >= STEPS_PER_EPOCH
    assert f"global step {newest})" in out
    client, runs = mlflow_runs(run_dir)
    assert [r.info.status for r in runs] == ["KILLED"]
    run_id = runs[0].info.run_id

    resumed = run_to_end(run_dir, *args)
    assert f"global step {newest}" in resumed.stdout
    client, runs = mlflow_runs(run_dir)
    assert [(r.info.run_id, r.info.status) for r in runs] == [(run_id, "FINISHED")]
    assert [m.step for m in client.get_metric_history(run_id, "val_loss")] == list(range(epochs))
    final = checkpoint_tensors(run_dir, STEPS_PER_EPOCH * epochs)
    assert int(final["global_step/.ATTRIBUTES/VARIABLE_VALUE"]) == STEPS_PER_EPOCH * epochs


@pytest.mark.slow
def test_keep_n_best_model_and_export(tmp_path):
    run_dir = tmp_path / "run"
    run_to_end(run_dir, *EXACT, "precision=fp32", "checkpoint.max_to_keep=2", "checkpoint.monitor=val_accuracy",
               "checkpoint.mode=max")
    directory = run_dir / "checkpoints"
    indexes = sorted(p.name for p in directory.glob("ckpt-*.index"))
    assert indexes == [f"ckpt-{TOTAL - 5}.index", f"ckpt-{TOTAL}.index"]
    assert sorted(p.name for p in directory.glob("ckpt-*.json")) == [f"ckpt-{TOTAL - 5}.json", f"ckpt-{TOTAL}.json"]
    assert len(list((directory / "best").glob("*.index"))) == 1
    sidecar = json.loads((directory / f"ckpt-{TOTAL}.json").read_text())
    accuracies = [entry["val_accuracy"] for entry in sidecar["history"]]
    assert sidecar["best"]["value"] == max(accuracies)
    assert sidecar["best"]["epoch"] == accuracies.index(max(accuracies))
    client, runs = mlflow_runs(run_dir)
    artifacts = {a.path for a in client.list_artifacts(runs[0].info.run_id, "model")}
    assert artifacts == {"model/model.keras", "model/best.keras"}


def test_exported_model_predicts_like_the_trained_one(tmp_path):
    import keras
    from conftest import TINY, compose

    from launcher.run.runner import execute

    outcome = execute(compose(*TINY, "precision=bf16", "tracking.enabled=false"), tmp_path / "run", tmp_path)
    x = np.random.default_rng(0).random((16, 8, 8, 1)).astype("float32")
    expected = outcome.model.predict(x, verbose=0)
    loaded = keras.saving.load_model(tmp_path / "run" / "model.keras")
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), expected)


@pytest.mark.parametrize(
    ("resume", "message"),
    [("/nonexistent/ckpt-3", "existing checkpoint prefix"), ("sometimes", "existing checkpoint prefix")],
)
def test_bad_resume_values_are_clear_errors(tmp_path, resume, message):
    done = subprocess.run(command(tmp_path / "run", "train.epochs=1", f"checkpoint.resume={resume}"), cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert done.returncode == 2
    assert f"checkpoint.resume='{resume}'" in done.stderr and message in done.stderr
    assert "fix: checkpoint.resume=auto" in done.stderr


def test_resume_never_moves_old_checkpoints_aside(tmp_path):
    run_dir = tmp_path / "run"
    run_to_end(run_dir, "model.hidden_units=[16]", "train.epochs=1", "precision=fp32")
    again = run_to_end(
        run_dir, "model.hidden_units=[16]", "train.epochs=1", "precision=fp32", "checkpoint.resume=never"
    )
    assert "moved to" in again.stderr
    assert list((tmp_path / "run" / "checkpoints.replaced").glob("ckpt-*.index"))
    assert list((tmp_path / "run" / "checkpoints").glob("ckpt-*.index"))


def test_named_run_resumes_under_another_strategy_and_the_plan_says_so(tmp_path):
    common = [sys.executable, "-m", "launcher", "name=my-run", "model.hidden_units=[16]", "precision=fp32",
              "scaling=global", "scaling.batch_size=64", f"tracking.uri=sqlite:///{tmp_path}/m.db"]
    first = subprocess.run([*common, "train.epochs=1"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    assert (tmp_path / "outputs" / "runs" / "my-run" / "checkpoints").is_dir()
    second = subprocess.run([*common, "train.epochs=2", "strategy=mirrored"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
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
