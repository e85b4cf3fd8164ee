"""Strings as features, end to end (issue 63, items 1 and 10): a loader returning a pandas DataFrame with a string
category (keras.io's structured-data form) and a builder with a StringLookup inside the model, trained through the
CLI under `precision=auto strategy=mirrored xla=auto`. The Plan keeps float32 and the graph step, saying why (auto
picked bf16 and XLA before and the run failed); the SavedModel and the MLflow model take the raw strings and answer
alike, and `mode=predict` reads a CSV with the string column."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import yaml
from support.tracking import store

STRING_RUN = (
    "model=custom",
    "model.builder=user_parts:string_lookup_model",
    "dataset=custom",
    "dataset.loader=user_parts:string_categories",
    "train.epochs=2",
    "scaling.batch_size=16",
    "precision=auto",
    "strategy=mirrored",
    "xla=auto",
    "export.formats=[keras,saved_model]",
)
COLORS = ["red", "blue", "green", "red", "purple"]  # purple: never seen, StringLookup's out-of-vocabulary slot
SIZES = np.array([0.1, 2.0, -1.0, -0.5, 0.3], dtype="float32")


def test_string_categories_train_under_auto_and_are_served_raw_by_every_export(cli_here, launcher_here, tmp_path):
    import mlflow.pyfunc
    import pandas as pd
    import tensorflow as tf
    from mlflow.pyfunc.scoring_server import infer_and_parse_data

    done = cli_here(*STRING_RUN)
    assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "run"
    decided = yaml.safe_load((run / "plan.yaml").read_text())["decisions"]
    assert decided["precision"]["value"] == "fp32" and "string inputs ('color')" in decided["precision"]["reason"]
    assert decided["xla"]["value"] is False and "string inputs ('color')" in decided["xla"]["reason"]
    assert decided["step"]["value"] in ("graph", "hybrid") and decided["replicas"]["value"] == 2

    served = tf.saved_model.load(str(run / "saved_model")).signatures["serving_default"]
    assert served.structured_input_signature[1]["color"].dtype == tf.string
    want = served(color=tf.constant(COLORS), size=tf.constant(SIZES))
    model = mlflow.pyfunc.load_model(str(run / "mlflow_model"))
    schema = {column.name: str(column.type) for column in model.metadata.get_input_schema().inputs}
    assert schema == {"color": "DataType.string", "size": "DataType.float"}
    answer = model.predict(pd.DataFrame({"color": COLORS, "size": SIZES}))
    np.testing.assert_allclose(answer["probabilities"], want["probabilities"].numpy(), rtol=1e-6)
    records = [{"color": c, "size": float(s)} for c, s in zip(COLORS, SIZES, strict=True)]  # a JSON request's body
    request = infer_and_parse_data({"dataframe_records": records}, model.metadata.get_input_schema())  # as served
    np.testing.assert_array_equal(model.predict(request)["label"], want["label"].numpy())

    pcsv.write_csv(pa.table({"id": [f"row-{i}" for i in range(5)], "color": COLORS, "size": SIZES}), tmp_path / "x.csv")
    predicted = launcher_here(
        [
            f"hydra.run.dir={tmp_path}/predict",
            f"tracking.uri={store(tmp_path / 'mlflow.db')}",
            "mode=predict",
            f"eval.run={run}",
            f"eval.input={tmp_path}/x.csv",
            "eval.ids=id",
        ],
        tmp_path,
    )
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    table = pq.read_table(tmp_path / "predict" / "predictions.parquet")
    assert table.column("id").to_pylist() == [f"row-{i}" for i in range(5)]
    np.testing.assert_array_equal(table.column("label").to_numpy(), want["label"].numpy())
