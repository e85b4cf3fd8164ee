"""Batch predictions by the real CLI: a tiny digits run trained, then `python -m launcher mode=predict
eval.input=<a CSV of features>` in a process of its own writes predictions.parquet with the CSV's ids, the answer
of the SavedModel it exported (`launcher.inference.batch_predict`), logged to MLflow; a CSV missing a column the model
needs is refused (exit 2) naming the missing and present columns, leaving no predictions and no MLflow run. Without
hydra.run.dir, a predict writes in the run it read (<run>/predict/<time>/) and an eval.output given lands where the
command runs (`launcher.launch.run_dirs`)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
from support.config import TINY
from support.tracking import runs_in, store

ROWS = 300


def digits_csv(path, drop: tuple[str, ...] = ()) -> np.ndarray:
    """The first ROWS digits as a CSV of `inputs_0..inputs_63` (raw intensities 0..16), an `id` and a `label`."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = digits.images[:ROWS].astype("float32")
    flat = x.reshape(ROWS, -1)
    columns = {"id": [f"digit-{i}" for i in range(ROWS)], "label": digits.target[:ROWS]}
    columns.update({f"inputs_{j}": flat[:, j] for j in range(64) if f"inputs_{j}" not in drop})
    pcsv.write_csv(pa.table(columns), path)
    return x[..., None]


def test_predict_a_csv_writes_the_savedmodel_s_answer_to_parquet_and_refuses_a_missing_column(
    cli, launcher_here, tmp_path
):
    import tensorflow as tf

    db = tmp_path / "mlflow.db"
    trained = launcher_here(
        [f"hydra.run.dir={tmp_path}/train", f"tracking.uri={store(db)}", *TINY, "precision=fp32", "xla=false"],
        tmp_path,
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    x = digits_csv(tmp_path / "digits.csv")

    done = cli("mode=predict", f"eval.run={tmp_path}/train", f"eval.input={tmp_path}/digits.csv", "eval.ids=id")
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = tmp_path / "run"
    table = pq.read_table(run_dir / "predictions.parquet")  # the default predictions.npz became .parquet
    assert table.column_names[0] == "id" and set(table.column_names[1:]) == {"label", "probabilities"}
    assert table.column("id").to_pylist() == [f"digit-{i}" for i in range(ROWS)]
    summary = json.loads((run_dir / "batch.json").read_text())
    assert summary["saved_model"] == str(run_dir / "saved_model")  # the run exported none: exported from model.keras
    served = tf.saved_model.load(summary["saved_model"]).signatures["serving_default"]
    want = served(inputs=tf.constant(x))
    np.testing.assert_array_equal(
        np.stack(table.column("probabilities").to_numpy(zero_copy_only=False)), want["probabilities"].numpy()
    )
    np.testing.assert_array_equal(table.column("label").to_numpy(), want["label"].numpy())
    assert "it/s" not in done.stderr  # no terminal: no progress bar

    from mlflow.tracking import MlflowClient

    (predict,) = [r for r in runs_in(db) if r.data.tags.get("launcher.mode") == "predict"]
    assert predict.data.metrics["input_examples"] == ROWS
    artifacts = {a.path for a in MlflowClient(store(db)).list_artifacts(predict.info.run_id, "predictions")}
    assert artifacts == {"predictions/predictions.parquet", "predictions/batch.json"}

    digits_csv(tmp_path / "short.csv", drop=tuple(f"inputs_{j}" for j in range(60, 64)))
    refused = launcher_here(
        [
            f"hydra.run.dir={tmp_path}/refused",
            f"tracking.uri={store(db)}",
            "mode=predict",
            f"eval.run={tmp_path}/train",
            f"eval.input={tmp_path}/short.csv",
        ],
        tmp_path,
    )
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "Traceback" not in refused.stderr
    assert f"eval.input='{tmp_path}/short.csv'" in refused.stderr
    assert "missing: inputs_60..inputs_63 (4); present: id, label, inputs_0..inputs_59 (60)" in refused.stderr
    assert not (tmp_path / "refused" / "predictions.parquet").exists()
    assert len([r for r in runs_in(db) if r.data.tags.get("launcher.mode") == "predict"]) == 1

    # Without hydra.run.dir: in a dir of its own inside the run it read; eval.output given is a path from here.
    mine = launcher_here(
        [
            f"tracking.uri={store(db)}",
            "mode=predict",
            "eval.run=train",
            "eval.input=digits.csv",
            "eval.output=mine/p.csv",
        ],
        tmp_path,
    )
    assert mine.returncode == 0, mine.stderr[-3000:]
    assert pcsv.read_csv(tmp_path / "mine" / "p.csv").num_rows == ROWS
    (nested,) = (tmp_path / "train" / "predict").glob("*/*")  # <date>/<time>
    assert {"batch.json", "console.log", "outcome.json", "saved_model"} <= {p.name for p in nested.iterdir()}
    assert f"predict run dir: {nested}" in mine.stdout
    assert not (tmp_path / "outputs").exists()
    # A file that is there (the input itself, or those predictions) is never written over: refused with a new name.
    before = (tmp_path / "digits.csv").read_bytes()
    over = launcher_here(
        [
            f"tracking.uri={store(db)}",
            "mode=predict",
            "eval.run=train",
            "eval.input=digits.csv",
            "eval.output=digits.csv",
        ],
        tmp_path,
    )
    assert over.returncode == 2 and "fix: eval.output=digits_2.csv" in over.stderr, over.stderr[-2000:]
    assert (tmp_path / "digits.csv").read_bytes() == before
