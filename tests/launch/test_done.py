"""The Done block (`launcher.launch.done`): the best epoch with its file, the exports with their paths, the run id,
the model's `runs:/` URI and the serve command, each left out when there is none. The default job's real block is
asserted in tests/e2e/test_cli.py."""

from __future__ import annotations

from pathlib import Path

from launcher.launch.done import DoneFacts, done_lines

RUN = Path("/work/outputs/runs/exp1")
RUN_ID = "0123456789abcdef0123456789abcdef"


def test_the_done_block_names_the_best_epoch_its_file_the_exports_and_how_to_serve_the_model():
    facts = DoneFacts(
        run_dir=RUN,
        tracking_hint="http://127.0.0.1:5000/#/experiments/1/runs/x",
        final={"loss": 0.25, "accuracy": 0.9, "val_loss": 0.3, "val_accuracy": 0.875, "examples_per_sec": 40759.8},
        metrics=["accuracy"],
        best={"monitor": "val_accuracy", "mode": "max", "value": 0.9125, "epoch": 3, "global_step": 40},
        best_file=RUN / "best.keras",
        exported={"model.keras": RUN / "model.keras", "best.keras": RUN / "best.keras", "tflite": RUN / "model.tflite"},
        run_id=RUN_ID,
        tracking_uri="sqlite:////work/outputs/mlflow.db",
        mlflow_model="mlflow_model",
        curves=RUN / "curves.png",
    )
    text = "\n".join(done_lines(facts))
    assert f"  curves               {RUN}/curves.png" in text
    assert f"  best                 val_accuracy 0.9125 at epoch 4 -> {RUN}/best.keras" in text
    assert "  val_accuracy         0.875" in text and "  examples_per_sec     40,760" in text
    assert f"  exported tflite      {RUN}/model.tflite" in text and f"exported best.keras  {RUN}/best.keras" in text
    assert f"  MLflow run id        {RUN_ID}" in text
    assert f"  MLflow model         runs:/{RUN_ID}/mlflow_model" in text
    assert (
        "MLFLOW_TRACKING_URI=sqlite:////work/outputs/mlflow.db mlflow models serve "
        f"-m runs:/{RUN_ID}/mlflow_model --env-manager local -p 5001"
    ) in text
    # The best comes before the final values: what a person looks for first.
    assert text.index("best ") < text.index("val_accuracy         0.875")


def test_without_tracking_a_best_model_or_exports_the_block_says_only_what_there_is():
    lines = done_lines(
        DoneFacts(run_dir=RUN, tracking_hint="tracking disabled (tracking.enabled=false)", final={"loss": 1.5})
    )
    assert lines == [
        "",
        "Done.",
        "  loss                 1.5",
        f"  run dir              {RUN}",
        "  MLflow               tracking disabled (tracking.enabled=false)",
    ]


def test_a_run_with_nothing_left_to_train_says_so_before_its_done_block():
    lines = done_lines(DoneFacts(run_dir=RUN, tracking_hint="-", nothing_trained=True, stopped_early=False))
    assert lines[:4] == ["", "Nothing to train: the checkpoint already covers every epoch.", "", "Done."]
