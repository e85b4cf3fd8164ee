"""Issue 62, item 7: an adapted TextVectorization in a loader's "preprocess" left no SavedModel and no MLflow model
(`untracked resource`), found after the whole training, and the run ended FINISHED, exit 0. Its lookup table is now
exported with the served function; a format the model cannot be written to is refused before training; an export
that still fails at the end fails the launch, and the same command again only exports."""

from __future__ import annotations

import json

from support.tracking import runs_in

from launcher.contract import StopContext, ending_of
from launcher.export.trained import ExportFailed
from launcher.outcome import EXIT_FAILED, EXPORT_FAILURE, FAILED

LOOKUP_TABLE_RUN = (
    "dataset=custom",
    "dataset.loader=user_parts:words_with_a_lookup_table",
    "train.epochs=1",
    "model.hidden_units=[8]",
    "scaling.batch_size=16",
)


def test_a_failed_export_ends_the_launch_failed_with_how_to_finish_it_and_no_traceback():
    failed = ExportFailed({"export.formats saved_model": "AssertionError: untracked resource"})
    ending = ending_of(failed, StopContext())
    assert (ending.status, ending.exit_code, ending.failure) == (FAILED, EXIT_FAILED, EXPORT_FAILURE)
    assert ending.error == "ExportFailed: export.formats saved_model: AssertionError: untracked resource"
    assert ending.tags == {"error": ending.error} and not ending.traceback
    assert "run the same command again; it only exports" in ending.message


def test_a_lookup_table_is_refused_for_tflite_served_by_the_savedmodel_and_a_failed_export_is_finished_by_a_rerun(
    cli_here, tmp_path, monkeypatch
):
    """One training for both stories: a format the model cannot take (tflite) is refused before training; trained
    with [keras,saved_model], the lookup table is served with the model (its SavedModel takes raw strings) while
    the MLflow model fails to save (a full disk): an export that fails at the end fails the launch, and the same
    command again only exports."""
    refused = cli_here(*LOOKUP_TABLE_RUN, "export.formats=[keras,saved_model,tflite]")
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "export.formats='tflite': expected a format this model can be written to; tried before training" in (
        refused.stderr
    )
    assert "TFLite's builtin ops have no" in refused.stderr and "fix: export.formats=[keras,saved_model]" in (
        refused.stderr
    )
    assert "epoch 1/1" not in refused.stdout and runs_in(tmp_path / "mlflow.db") == []

    from launcher.export import mlflow_model

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(mlflow_model, "save_mlflow_model", full_disk)
    done = cli_here(*LOOKUP_TABLE_RUN, "export.formats=[keras,saved_model]")
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Not exported: tracking.log_model: OSError: [Errno 28] No space left on device" in done.stderr
    assert "Traceback" not in done.stderr
    import tensorflow as tf

    served = tf.saved_model.load(str(tmp_path / "run" / "saved_model")).signatures["serving_default"]
    answer = served(tf.constant(["red green", "blue sky"]))  # raw strings in: the table travels with the model
    assert answer["probabilities"].shape == (2, 2)
    outcome = json.loads((tmp_path / "run" / "outcome.json").read_text())
    assert (outcome["status"], outcome["failure"]) == ("FAILED", "export")
    (run,) = runs_in(tmp_path / "mlflow.db")
    assert run.info.status == "FAILED" and "No space left on device" in run.data.tags["error"]
    assert (tmp_path / "run" / "model.keras").is_file() and list((tmp_path / "run" / "checkpoints").glob("ckpt-*"))
    monkeypatch.undo()
    again = cli_here(*LOOKUP_TABLE_RUN, "export.formats=[keras,saved_model]")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "epoch 1/1" not in again.stdout  # nothing trained again: it only exports
    (run,) = runs_in(tmp_path / "mlflow.db")
    assert run.info.status == "FINISHED" and (tmp_path / "run" / "mlflow_model" / "MLmodel").is_file()
    served = tf.saved_model.load(str(tmp_path / "run" / "saved_model")).signatures["serving_default"]
    assert served(tf.constant(["red green", "blue sky"]))["probabilities"].shape == (2, 2)


def test_a_feature_space_preprocess_adapts_under_bf16_trains_and_serves_raw_named_features(cli_here, tmp_path):
    """Issue 63, items 2 and 10: Keras's FeatureSpace as the loader's preprocess (named features in, one tensor out)
    was refused, and adapting it under precision=bf16's policy failed; the loader now runs under float32, the model
    under bf16, and the SavedModel takes the raw named features, its lookup table included."""
    import tensorflow as tf

    done = cli_here(
        "dataset=custom",
        "dataset.loader=user_parts:feature_space",
        "model.hidden_units=[8]",
        "train.epochs=1",
        "scaling.batch_size=16",
        "precision=bf16",
        "export.formats=[keras,saved_model]",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "precision                bf16" in done.stdout
    served = tf.saved_model.load(str(tmp_path / "run" / "saved_model")).signatures["serving_default"]
    answer = served(color=tf.constant(["red", "blue", "purple"]), size=tf.constant([0.1, 2.0, -1.0]))
    assert answer["probabilities"].shape == (3, 2)
    assert (tmp_path / "run" / "mlflow_model" / "MLmodel").is_file()
