"""A user's project that hands its own preprocessing and class names to the launcher (`launcher.train.user_data`):
training reads the raw features through it, and the exports take the raw features and answer `kind` by name."""

from __future__ import annotations

import heads_parts
import numpy as np
import pytest
from support.config import TINY
from support.tracking import store
from support.train import predicted_in_process, shipped_in_process

HEADS = "+task.heads={kind: {name: classification, metrics: [accuracy]}, size: {name: regression, loss_weight: 0.5}}"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):

    folder = tmp_path_factory.mktemp("project")
    given = [
        *[o for o in TINY if not o.startswith("model.")],
        "model=custom",
        "model.builder=heads_parts:build",
        "dataset=custom",
        "dataset.loader=heads_parts:load_raw",
        HEADS,
        "precision=fp32",
        "export.formats=[keras,saved_model]",
    ]
    outcome, given = shipped_in_process(folder, *given)
    return outcome, folder, given


@pytest.mark.slow  # a short training in this process
def test_the_exports_take_raw_features_and_answer_as_the_model_on_the_preprocessed_ones(trained):
    import mlflow.pyfunc
    import tensorflow as tf

    outcome, folder, _ = trained
    raw = heads_parts.load_raw()["val"][0]
    scaled = heads_parts.load()["val"][0]  # what the model trained on
    served = tf.saved_model.load(str(folder / "run" / "saved_model")).signatures["serving_default"]
    answer = served(**{name: tf.constant(value) for name, value in raw.items()})
    want = tf.nn.softmax(outcome.model(scaled, training=False)["kind"]).numpy()
    np.testing.assert_allclose(answer["kind_probabilities"].numpy(), want, atol=1e-5)
    labels = [name.decode() for name in answer["kind_label"].numpy()]
    assert labels == [heads_parts.KINDS[i] for i in want.argmax(-1)]
    assert answer["kind_label_id"].numpy().tolist() == want.argmax(-1).tolist()
    mlflow_answer = mlflow.pyfunc.load_model(str(folder / "run" / "mlflow_model")).predict(raw)
    assert list(mlflow_answer["kind_label"]) == labels


def test_class_names_that_do_not_match_the_output_are_refused_naming_the_head(tmp_path):
    from launcher.config.errors import ConfigError
    from launcher.train.tasks import class_names_of

    source = type("Source", (), {"class_names": {"kind": ("low", "high")}})()
    with pytest.raises(ConfigError, match=r"dataset class_names\['kind'\].*a name for each of the output's 3 classes"):
        class_names_of(source, "kind", 3)


@pytest.mark.slow  # a real server: ~10 s to start
def test_serve_savedmodel_and_predict_give_one_answer_on_the_project_s_raw_features(trained, tmp_path):
    """`mlflow models serve`, the SavedModel and `mode=predict` on a CSV of the same raw rows, to the bit."""
    import json

    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq
    import tensorflow as tf
    from support.serving import invoke, mlflow_server

    _, folder, given = trained
    raw = {name: value[:12] for name, value in heads_parts.load_raw()["val"][0].items()}
    columns = {f"{name}_{j}": value[:, j] for name, value in raw.items() for j in range(value.shape[1])}
    pcsv.write_csv(pa.table(columns), tmp_path / "rows.csv")
    with mlflow_server(str(folder / "run" / "mlflow_model"), store(folder / "mlflow.db"), tmp_path / "log") as port:
        body = {"inputs": {name: value.tolist() for name, value in raw.items()}}
        served = json.loads(invoke(port, body).read())["predictions"]
    predicted_in_process(folder, given, tmp_path / "predict", f"eval.input={tmp_path / 'rows.csv'}")
    table = pq.read_table(tmp_path / "predict" / "predictions.parquet")
    signature = tf.saved_model.load(str(folder / "run" / "saved_model")).signatures["serving_default"]
    want = {key: value.numpy() for key, value in signature(**{n: tf.constant(v) for n, v in raw.items()}).items()}
    names = [name.decode() for name in want["kind_label"]]
    assert served["kind_label"] == names and table.column("kind_label").to_pylist() == names
    for key in ("kind_probabilities", "size_values"):
        np.testing.assert_array_equal(np.array(served[key], "float32"), want[key])
        np.testing.assert_array_equal(np.stack(table.column(key).to_numpy(zero_copy_only=False)), want[key])


@pytest.mark.parametrize("form", ["one-array-reshaped", "tuple"])
def test_a_loader_s_preprocessing_is_exported_as_training_runs_it_whatever_the_features_form(form, tmp_path):
    """The export takes the raw features (their own shape, not the preprocessed one) and passes a tuple of them to
    the preprocessing whole, as the data pipeline does (`launcher.export.serving`)."""
    import keras
    import tensorflow as tf

    from launcher.export.serving import export_saved_model, served_inputs
    from launcher.train.data import split_arrays
    from launcher.train.preprocessing import users
    from launcher.train.tasks import Task

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 40)
    if form == "tuple":
        x = (rng.normal(size=(40, 3)).astype("float32") * 100, rng.normal(size=(40, 2)).astype("float32"))
        given = tf.function(lambda f: (f[0] / 100.0, f[1]))
        a, b = keras.Input((3,), name="a"), keras.Input((2,), name="b")
        model = keras.Model([a, b], keras.layers.Dense(2)(keras.layers.Concatenate()([a, b])))
    else:
        x = rng.normal(size=(40, 3)).astype("float32")
        given = tf.function(lambda f: tf.concat([f, f * f], axis=-1))  # 3 raw values -> 6 features
        inputs = keras.Input((6,))
        model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    source = split_arrays(x, y, 0.25, 0, kind="tabular")
    source.preprocessing = users(given)
    if form != "tuple":
        source.input_shape = (6,)  # what the model takes, as the loader path records it (`user_data`)
    trained_on = next(iter(source.pipeline("val", 4, False, None)))[0]
    served = served_inputs(source, model)
    export_saved_model(model, Task("classification", None), served, tmp_path / "saved_model")
    signature = tf.saved_model.load(str(tmp_path / "saved_model")).signatures["serving_default"]
    raw = served.named(source.first_raw(4))
    answer = signature(**{name: tf.constant(value) for name, value in raw.items()})
    want = tf.nn.softmax(model(trained_on if form != "tuple" else list(trained_on), training=False)).numpy()
    np.testing.assert_allclose(answer["probabilities"].numpy(), want, atol=1e-6)
