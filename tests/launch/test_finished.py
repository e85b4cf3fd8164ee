"""A finished run launched again with the same settings (`launcher.launch.finished`): nothing to train or export,
found from the run dir's files alone; any difference (a setting, a failed or unfinished training, a missing file,
writes an outage left) takes the whole launch. The real rerun: tests/e2e/test_cli.py::
test_a_named_run_refuses_other_models_resumes_for_more_epochs_and_a_rerun_trains_nothing."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf
from support.config import TINY, config

from launcher.files import CONFIG_FILE, RUN_FILE, write_json_atomic
from launcher.launch.finished import finished_already, nothing_to_do
from launcher.launch.preflight import settings_of
from launcher.outcome import FINISHED, OutcomeRecord
from launcher.tracking.spool import PENDING_FILE

METRICS = {"loss": 0.5, "accuracy": 0.875, "val_loss": 0.625, "val_accuracy": 0.8125, "learning_rate": 0.001}


def finished_run(run_dir, cfg, **record):
    """A run dir as a finished training leaves it: outcome.json, config.yaml, the checkpoint, the exports."""
    run_dir.mkdir(parents=True, exist_ok=True)
    given = {"status": FINISHED, "exit_code": 0, "run_id": "r1", "stop_reason": "epochs", "metrics": METRICS}
    OutcomeRecord(**{**given, **record}).write(run_dir)
    (run_dir / CONFIG_FILE).write_text(OmegaConf.to_yaml(settings_of(cfg)))
    (run_dir / "checkpoints").mkdir(exist_ok=True)
    (run_dir / "checkpoints" / "checkpoint").write_text("model_checkpoint_path: 'ckpt-90'\n")
    for name in ("model.keras", "best.keras"):
        (run_dir / name).write_text("a model")
    best = {"monitor": "val_accuracy", "mode": "max", "value": 0.8125, "epoch": 1}
    write_json_atomic(run_dir / "checkpoints" / "ckpt-45.json", {"best": {**best, "value": 0.5, "epoch": 0}})
    write_json_atomic(run_dir / "checkpoints" / "ckpt-90.json", {"best": best})
    write_json_atomic(run_dir / RUN_FILE, {"run_id": "r1", "experiment_id": "7"})
    return run_dir


def again(run_dir, *overrides):
    cfg = config(*TINY, *overrides)
    return finished_already(cfg, settings_of(cfg), run_dir, run_dir / "checkpoints")


def test_the_same_settings_after_a_finished_training_have_nothing_to_do(tmp_path, capsys):
    run_dir = finished_run(tmp_path / "run", config(*TINY))
    record = again(run_dir)
    assert record is not None and record.run_id == "r1"
    said = nothing_to_do(config(*TINY), record, run_dir, tmp_path, run_dir / "checkpoints")
    out = capsys.readouterr().out
    assert f"best                 val_accuracy 0.8125 at epoch 2 -> {run_dir / 'best.keras'}" in out  # the newest
    assert "Nothing to train" in out and "nothing is trained or exported again" in out
    assert f"exported best.keras  {run_dir / 'best.keras'}" in out and "  val_accuracy         0.8125" in out
    assert "MLflow run id        r1" in out and "runs:/r1/mlflow_model" in out and "/#/experiments/7/runs/r1" in out
    assert said.status == FINISHED and said.metrics == METRICS  # a sweep reading it finds the run's objective


@pytest.mark.parametrize(
    ("change", "overrides"),
    [
        ("more epochs", ("train.epochs=3",)),
        ("another export format", ("export.formats=[keras,tflite]",)),
        ("explain", ("explain=true",)),
        ("a fresh start", ("checkpoint.resume=never",)),
    ],
)
def test_a_changed_setting_takes_the_whole_launch(tmp_path, change, overrides):
    assert again(finished_run(tmp_path / "run", config(*TINY)), *overrides) is None, change


@pytest.mark.parametrize(
    ("what", "spoil"),
    [
        ("a failed export", lambda d: OutcomeRecord("FAILED", 1, failure="export_failure").write(d)),
        ("a time budget's stop", lambda d: OutcomeRecord(FINISHED, 0, run_id="r1", stop_reason="max_time").write(d)),
        ("early stopping", lambda d: OutcomeRecord(FINISHED, 0, run_id="r1", stop_reason="early_stopping").write(d)),
        ("a deleted model", lambda d: (d / "model.keras").unlink()),
        ("no best model", lambda d: (d / "best.keras").unlink()),
        ("no checkpoint", lambda d: (d / "checkpoints" / "checkpoint").unlink()),
        ("an outage's writes", lambda d: (d / PENDING_FILE).write_text("{}\n")),
        ("no config.yaml", lambda d: (d / CONFIG_FILE).unlink()),
    ],
)
def test_a_run_that_did_not_finish_whole_takes_the_whole_launch(tmp_path, what, spoil):
    run_dir = finished_run(tmp_path / "run", config(*TINY))
    spoil(run_dir)
    assert again(run_dir) is None, what


def test_a_persons_own_export_format_needs_its_file_on_disk(tmp_path, capsys):
    """export.formats may name a writer of the person's own: a rerun finds its file (listed in the Done block), and
    without it takes the whole launch, which writes it."""
    theirs = ("export.formats=[keras,user_parts:WeightsNpz]",)
    run_dir = finished_run(tmp_path / "run", config(*TINY, *theirs))
    assert again(run_dir, *theirs) is None  # weights.npz was never written
    (run_dir / "weights.npz").write_text("weights")
    record = again(run_dir, *theirs)
    assert record is not None
    nothing_to_do(config(*TINY, *theirs), record, run_dir, tmp_path, run_dir / "checkpoints")
    assert f"exported user_parts:WeightsNpz {run_dir / 'weights.npz'}" in capsys.readouterr().out
