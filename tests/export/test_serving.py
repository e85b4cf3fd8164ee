"""Ship it: the SavedModel and TFLite exports answer like the trained model, in a process that never imports the
launcher, and the MLflow model answers the same predictions from a real `mlflow models serve`."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import warm
from support.config import TINY
from support.serving import invoke, mlflow_server
from support.tracking import runs_in

# Loaded the way a serving stack loads them: TensorFlow alone, the launcher never imported.
CONSUMER = textwrap.dedent(
    """
    import json, sys
    import numpy as np, tensorflow as tf, keras
    run = sys.argv[1]
    x = np.load(run + "/inputs.npy")
    # model.keras is the trained network: it takes the scaled features (raw / 16); the exports take raw 0..16.
    logits = keras.saving.load_model(run + "/model.keras", compile=False).predict(x / 16.0, verbose=0)
    served = tf.saved_model.load(run + "/saved_model").signatures["serving_default"](inputs=tf.constant(x))
    lite = tf.lite.Interpreter(model_path=run + "/model.tflite").get_signature_runner("serving_default")(inputs=x)
    print(json.dumps({
        "keras_probabilities": tf.nn.softmax(logits).numpy().tolist(),
        "saved_probabilities": served["probabilities"].numpy().tolist(),
        "saved_label": served["label"].numpy().tolist(),
        "tflite_probabilities": np.asarray(lite["probabilities"]).tolist(),
        "logits": np.asarray(logits).tolist(),
        "launcher_imported": any(m == "launcher" or m.startswith("launcher.") for m in sys.modules),
    }))
    """
)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """One float16 mirrored run exported as keras, saved_model and tflite, 16 validation inputs, and what the bare
    consumer (a new interpreter that never imports the launcher) answered on them: one process for both tests."""
    from sklearn.datasets import load_digits
    from support.tracking import store

    folder = tmp_path_factory.mktemp("shipped")
    done = warm.run(
        [
            sys.executable,
            "-m",
            "launcher",
            f"hydra.run.dir={folder}/run",
            f"tracking.uri={store(folder / 'mlflow.db')}",
            *TINY,
            "precision=mixed",
            "strategy=mirrored",
            "export.formats=[keras,saved_model,tflite]",
        ],
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    x = load_digits().images[-16:].astype("float32")[..., None]  # raw intensities 0..16, as a client has them
    np.save(folder / "run" / "inputs.npy", x)
    bare = subprocess.run(
        [sys.executable, "-c", CONSUMER, str(folder / "run")], capture_output=True, text=True, timeout=300
    )
    return folder, done.stdout + done.stderr, bare


@pytest.mark.xdist_group("shipped")  # one worker makes the module's run once
def test_savedmodel_and_tflite_answer_like_the_keras_model_without_the_launcher(shipped):
    folder, stdout, answer = shipped
    assert "export   saved_model" in stdout and "export   tflite" in stdout
    assert "XNNPACK" not in stdout and "tflite_converter" not in stdout  # TFLite's C++ notes, set aside
    assert answer.returncode == 0, answer.stderr[-3000:]
    got = json.loads(answer.stdout.strip().splitlines()[-1])
    assert got["launcher_imported"] is False
    keras_probabilities = np.array(got["keras_probabilities"])
    # The SavedModel is the trained network itself (float16 compute, float32 output): the same numbers.
    np.testing.assert_allclose(got["saved_probabilities"], keras_probabilities, atol=1e-6)
    assert got["saved_label"] == keras_probabilities.argmax(axis=-1).tolist()
    # TFLite runs its float32 twin: within float16's rounding of the trained model's activations.
    np.testing.assert_allclose(got["tflite_probabilities"], keras_probabilities, atol=2e-3)
    [run] = [r for r in runs_in(folder / "mlflow.db") if r.data.tags.get("launcher.mode") != "predict"]
    assert run.data.tags["export.tflite"].startswith("TFLite vs SavedModel on 8 examples: label 100% equal")


@pytest.mark.xdist_group("shipped")
def test_four_artifacts_give_one_answer_on_the_same_raw_inputs_and_a_bad_request_gets_400(shipped, tmp_path):
    """`mlflow models serve` (a real server), the SavedModel in a bare process, TFLite and `mode=predict` on a CSV
    of the same 16 digits: the first three and predict to the bit, TFLite within its float32 twin's rounding."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    folder, _, bare = shipped
    x = np.load(folder / "run" / "inputs.npy")
    flat = x.reshape(len(x), -1)
    pcsv.write_csv(pa.table({f"inputs_{j}": flat[:, j] for j in range(flat.shape[1])}), tmp_path / "digits.csv")
    predicted = warm.run(
        [
            sys.executable,
            "-m",
            "launcher",
            f"hydra.run.dir={tmp_path}/predict",
            f"tracking.uri=sqlite:///{folder / 'mlflow.db'}",
            "mode=predict",
            f"eval.run={folder / 'run'}",
            f"eval.input={tmp_path / 'digits.csv'}",
        ],
        timeout=300,
    )
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    table = pq.read_table(tmp_path / "predict" / "predictions.parquet")
    assert bare.returncode == 0, bare.stderr[-3000:]
    consumer = json.loads(bare.stdout.strip().splitlines()[-1])
    [run] = [r for r in runs_in(folder / "mlflow.db") if r.data.tags.get("launcher.mode") != "predict"]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    logged = {a.path for a in client.list_artifacts(run.info.run_id, "model")}
    assert {"model/model.keras", "model/model.tflite", "model/saved_model"} <= logged
    with mlflow_server(
        f"runs:/{run.info.run_id}/mlflow_model", f"sqlite:///{folder / 'mlflow.db'}", tmp_path / "serve.log"
    ) as port:
        answered = json.loads(invoke(port, {"inputs": x.tolist()}).read())["predictions"]
        # One input form: each example flat as the CSV's row (a JSON list of 64, or the CSV's columns) is taken too.
        as_rows = json.loads(invoke(port, {"inputs": flat.tolist()}).read())["predictions"]
        as_columns = {"columns": [f"inputs_{j}" for j in range(64)], "data": flat.tolist()}
        as_table = json.loads(invoke(port, {"dataframe_split": as_columns}).read())["predictions"]
        refusals = {
            why: invoke(port, body)
            for why, body in {
                "shape": {"inputs": x[:, :4].tolist()},
                "names": {"inputs": {"pixels": x.tolist()}},
                "dtype": {"inputs": [[["a"] * 8] * 8]},
            }.items()
        }
    import tensorflow as tf

    served = tf.saved_model.load(str(folder / "run" / "saved_model")).signatures["serving_default"]
    want = {key: value.numpy() for key, value in served(inputs=tf.constant(x)).items()}
    assert set(answered) == {"probabilities", "label"}  # the task's served form, not logits
    np.testing.assert_array_equal(np.array(answered["probabilities"], "float32"), want["probabilities"])
    assert answered["label"] == want["label"].tolist()
    bare_savedmodel = np.array(consumer["saved_probabilities"], "float32")
    np.testing.assert_array_equal(bare_savedmodel, want["probabilities"])
    assert consumer["saved_label"] == answered["label"]
    by_predict = np.stack(table.column("probabilities").to_numpy(zero_copy_only=False))
    np.testing.assert_array_equal(by_predict, want["probabilities"])
    assert table.column("label").to_pylist() == answered["label"]
    np.testing.assert_allclose(consumer["tflite_probabilities"], want["probabilities"], atol=2e-3)
    assert all(refused.status == 400 for refused in refusals.values()), {k: v.status for k, v in refusals.items()}
    said = {why: json.loads(refused.read())["message"] for why, refused in refusals.items()}
    assert as_rows == answered and as_table == answered
    # Refused by the served code itself (the signature names no inputs, so MLflow lets the flat form through).
    assert (
        "has shape [16, 4, 8, 1]; the model takes ['n', 8, 8, 1] (n examples), or each example flat: ['n', 64]"
        in (said["shape"])
    )
    assert "takes the inputs ['inputs']; the request is missing ['inputs'] and has ['pixels']" in said["names"]
    assert "input 'inputs' holds <U1 values; the model takes float32 numbers" in said["dtype"]
    served_log = (tmp_path / "serve.log").read_text()
    assert "━━" not in served_log  # no Keras progress bar per request
    for noise in ("cuInit", "cuda drivers", "cpu_feature_guard", "oneDNN custom operations"):  # TF's start-up lines
        assert noise not in served_log, served_log[-3000:]


def test_export_formats_are_checked_and_keras_is_always_among_them():
    from fakes import CPU_PLAIN
    from support.config import config

    from launcher.plan.resolve import resolve, resolve_all

    plan = resolve(config("export.formats=[tflite]"), CPU_PLAIN)
    assert plan.export.formats == ["keras", "tflite"] and "keras added" in plan.export.reason("formats")
    _, refused = resolve_all(config("export.formats=[keras,onnx]"), CPU_PLAIN)
    assert [(v.key, v.fix) for v in refused] == [("export.formats", "export.formats=[keras]")]
    off = resolve(config("export.formats=[saved_model]", "checkpoint.export_model=false"), CPU_PLAIN)
    assert off.export.formats == [] and any("nothing is exported" in w for w in off.warnings)


def test_the_tflite_twin_computes_in_float32_with_the_same_weights():
    import keras

    from launcher.export.serving import float32_twin

    keras.config.set_dtype_policy("mixed_float16")
    try:
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(2, dtype="float32")])
    finally:
        keras.config.set_dtype_policy("float32")
    twin = float32_twin(model)
    assert model.layers[0].compute_dtype == "float16" and twin.layers[0].compute_dtype == "float32"
    for mine, theirs in zip(model.get_weights(), twin.get_weights(), strict=True):
        np.testing.assert_array_equal(mine, theirs)


def test_a_model_tflite_cannot_express_is_named_by_its_operations():
    from launcher.export.serving import _unsupported

    said = _unsupported(
        RuntimeError(
            "Could not translate MLIR to FlatBuffer. error: loc(...): 'tf.Erfc' op is neither a custom op nor a "
            "flex op\nerror: 'tf.Erfc' op is neither a custom op nor a flex op"
        )
    )
    assert said.startswith("TFLite's builtin ops have no Erfc (") and "SavedModel serves this model" in said
