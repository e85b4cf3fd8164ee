"""Issue 62, item 7: an adapted TextVectorization in a loader's "preprocess" left no SavedModel and no MLflow model
(`untracked resource`), and the run ended FINISHED, exit 0. Its lookup table is now exported with the served
function; an export that still cannot be written (TFLite has no string ops) fails the launch."""

from __future__ import annotations

import json

from support.tracking import runs_in

from launcher.contract import StopContext, ending_of
from launcher.launch.export import ExportFailed
from launcher.outcome import EXIT_FAILED, EXPORT_FAILURE, FAILED

LOOKUP_TABLE_RUN = (
    "dataset=custom",
    "dataset.loader=user_parts:words_with_a_lookup_table",
    "train.epochs=1",
    "model.hidden_units=[8]",
    "scaling.batch_size=16",
    "export.formats=[keras,saved_model,tflite]",
)


def test_a_failed_export_ends_the_launch_failed_with_how_to_finish_it_and_no_traceback():
    ending = ending_of(
        ExportFailed({"export.formats saved_model": "AssertionError: untracked resource"}), StopContext()
    )
    assert (ending.status, ending.exit_code, ending.failure) == (FAILED, EXIT_FAILED, EXPORT_FAILURE)
    assert ending.error == "ExportFailed: export.formats saved_model: AssertionError: untracked resource"
    assert ending.tags == {"error": ending.error} and not ending.traceback
    assert "run the same command again; it only exports" in ending.message


def test_a_run_whose_export_fails_exits_1_failed_in_mlflow_and_its_rerun_only_exports(cli_here, tmp_path):
    done = cli_here(*LOOKUP_TABLE_RUN)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Not exported: export.formats tflite: TFLite's builtin ops have no" in done.stderr
    assert "Traceback" not in done.stderr and "saved_model" not in done.stderr.split("Not exported:")[1]
    import tensorflow as tf

    served = tf.saved_model.load(str(tmp_path / "run" / "saved_model")).signatures["serving_default"]
    answer = served(tf.constant(["red green", "blue sky"]))  # raw strings in: the table travels with the model
    assert answer["probabilities"].shape == (2, 2)
    assert (tmp_path / "run" / "mlflow_model" / "MLmodel").is_file()
    outcome = json.loads((tmp_path / "run" / "outcome.json").read_text())
    assert (outcome["status"], outcome["failure"]) == ("FAILED", "export")
    (run,) = runs_in(tmp_path / "mlflow.db")
    assert run.info.status == "FAILED" and "tflite" in run.data.tags["error"]
    assert (tmp_path / "run" / "model.keras").is_file() and list((tmp_path / "run" / "checkpoints").glob("ckpt-*"))
    again = cli_here(*LOOKUP_TABLE_RUN)
    assert again.returncode == 1 and "Not exported" in again.stderr
    assert "epoch 1/1" not in again.stdout  # nothing trained again: it only exports
    assert len(runs_in(tmp_path / "mlflow.db")) == 1
