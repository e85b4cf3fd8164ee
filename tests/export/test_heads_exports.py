"""Everything downstream of a model of two named inputs and two heads, trained in this process: the SavedModel (in a
process that never imports the launcher) and TFLite take each feature by name and answer each head's served keys as
the trained model does (`launcher.export.serving`); the MLflow model's signature names every input and output
(`launcher.launch.mlflow_record`, `launcher.export.trained`); mode=eval reports every head's metrics under the names
training logs and mode=predict writes every head's predictions (`launcher.inference.evaluate`).

Both runs (heads as a dict, heads as a list) are trained once per module, in one test process (`xdist_group`), and
one bare process answers for both."""

from __future__ import annotations

import json
import textwrap

import heads_parts
import numpy as np
import pytest
from support.cli import run_python
from support.config import TINY, compose
from support.tracking import store

HEADS = (
    "+task.heads={kind: {name: classification, metrics: [accuracy], class_weight: balanced}, "
    "size: {name: regression, loss_weight: 0.5, metrics: [mae]}}"
)
SERVED = {"kind_probabilities", "kind_label", "size_values"}
VAL_METRICS = {"val_loss", "val_kind_loss", "val_kind_accuracy", "val_size_loss", "val_size_mae"}

# Loaded the way a serving stack loads them: TensorFlow alone, the launcher never imported. One line per run dir.
CONSUMER = textwrap.dedent(
    """
    import json, sys
    import numpy as np, tensorflow as tf
    for run in sys.argv[1:]:
        x = dict(np.load(run + "/features.npz"))
        serve = tf.saved_model.load(run + "/saved_model").signatures["serving_default"]
        saved = serve(**{name: tf.constant(value) for name, value in x.items()})
        lite = tf.lite.Interpreter(model_path=run + "/model.tflite").get_signature_runner("serving_default")(**x)
        print(json.dumps({
            "run": run,
            "inputs": sorted(serve.structured_input_signature[1]),
            "saved": {key: value.numpy().tolist() for key, value in saved.items()},
            "tflite": {key: np.asarray(value).tolist() for key, value in lite.items()},
            "launcher_imported": any(m == "launcher" or m.startswith("launcher.") for m in sys.modules),
        }))
    """
)
BUILDERS = {"dict-heads": "build", "list-heads": "build_list"}  # heads as a dict, or as a list
pytestmark = pytest.mark.xdist_group("heads-exports")  # one test process trains the module's two runs once


def overrides(builder: str, folder) -> list[str]:
    return [
        *[o for o in TINY if not o.startswith("model.")],
        "model=custom",
        f"model.builder=heads_parts:{builder}",
        "dataset=custom",
        "dataset.loader=heads_parts:load",
        HEADS,
        "precision=mixed",
        "checkpoint.enabled=false",
        f"tracking.uri={store(folder / 'mlflow.db')}",
        "export.formats=[keras,saved_model,tflite]",
    ]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """Per builder: a mixed-precision run of the two-input two-head model, exported in every format, with the
    validation split's features on disk for the bare process."""
    from launcher.launch.training import execute

    made = {}
    for name, builder in BUILDERS.items():
        folder = tmp_path_factory.mktemp(name)
        given = overrides(builder, folder)
        outcome = execute(compose(*given), folder / "run", folder)
        assert outcome.error is None, outcome.error
        features = heads_parts.load()["val"][0]
        np.savez(folder / "run" / "features.npz", **features)
        made[name] = outcome, given, folder
    return made


@pytest.fixture(params=list(BUILDERS))
def trained(request, runs):
    """One of the module's runs: heads as a dict, or as a list."""
    return runs[request.param]


@pytest.fixture(scope="module")
def served_bare(runs) -> dict:
    """By run folder: what its SavedModel and TFLite answer, both runs in one new interpreter that never imports the
    launcher."""
    folders = [folder for _, _, folder in runs.values()]
    done = run_python(f"import sys; sys.argv = ['consumer', *{[str(f / 'run') for f in folders]!r}]\n" + CONSUMER)
    assert done.returncode == 0, done.stderr[-3000:]
    answers = {answer["run"]: answer for answer in map(json.loads, done.stdout.strip().splitlines()[-len(folders) :])}
    return {folder: answers[str(folder / "run")] for folder in folders}


def served_in_process(model, features) -> dict:
    """What the trained model serves on `features`: each head's task's served form (kind a classification, size a
    regression), in the model's output order."""
    import keras

    from launcher.train.tasks import Heads, Task

    heads = {"kind": Task("classification", None), "size": Task("regression", None)}
    answered = Heads(heads, {"kind": 1.0, "size": 0.5}, ["kind", "size"]).served(model(features, training=False))
    return {key: keras.ops.convert_to_numpy(value) for key, value in answered.items()}


@pytest.mark.slow  # a short training per builder, seconds of CPU in this process
@pytest.mark.e2e  # the bare consumer is a new interpreter
def test_savedmodel_and_tflite_take_named_features_and_answer_every_head(trained, served_bare):
    outcome, _, folder = trained
    answer = served_bare[folder]
    assert not answer["launcher_imported"]
    assert answer["inputs"] == ["cat", "num"]
    assert set(answer["saved"]) == SERVED and set(answer["tflite"]) == SERVED
    want = served_in_process(outcome.model, heads_parts.load()["val"][0])
    saved = {key: np.asarray(value) for key, value in answer["saved"].items()}
    np.testing.assert_allclose(saved["kind_probabilities"], want["kind_probabilities"], atol=2e-3)
    np.testing.assert_allclose(saved["size_values"], want["size_values"], rtol=1e-2, atol=2e-2)
    assert np.array_equal(saved["kind_label"], saved["kind_probabilities"].argmax(-1))
    lite = {key: np.asarray(value) for key, value in answer["tflite"].items()}
    # The TFLite twin computes in float32, the SavedModel in float16: within float16's precision.
    np.testing.assert_allclose(lite["kind_probabilities"], saved["kind_probabilities"], atol=1e-2)
    np.testing.assert_allclose(lite["size_values"], saved["size_values"], rtol=2e-2, atol=5e-2)


@pytest.mark.slow
def test_the_mlflow_model_names_every_feature_and_served_output_and_answers_as_the_savedmodel(trained):
    import mlflow.pyfunc
    import tensorflow as tf
    from mlflow.models import Model

    _, _, folder = trained
    model = Model.load(str(folder / "run" / "mlflow_model"))
    assert sorted(model.signature.inputs.input_names()) == ["cat", "num"]
    assert set(model.signature.outputs.input_names()) == SERVED
    example = json.loads((folder / "run" / "mlflow_model" / "serving_input_example.json").read_text())
    assert set(example["inputs"]) == {"num", "cat"}  # a raw example, as a client sends it
    features = heads_parts.load()["val"][0]
    answered = mlflow.pyfunc.load_model(str(folder / "run" / "mlflow_model")).predict(features)
    serve = tf.saved_model.load(str(folder / "run" / "saved_model")).signatures["serving_default"]
    want = serve(**{name: tf.constant(value) for name, value in features.items()})
    assert set(answered) == SERVED
    for key, value in want.items():
        np.testing.assert_array_equal(answered[key], value.numpy())  # the same function: the same numbers


def evaluation(trained, mode: str, *more: str):
    from launcher.inference.evaluate import Evaluation

    _, given, folder = trained
    node = compose(*given, f"mode={mode}", f"eval.run={folder / 'run'}", *more)
    out = folder / f"{mode}-{len(more)}"
    return Evaluation(node, folder / "run", out, folder, mode).execute()[1], out


@pytest.mark.slow
def test_eval_reports_every_head_s_metrics_as_training_logged_them(trained):
    outcome, _, _ = trained
    metrics, _ = evaluation(trained, "eval")
    assert set(metrics) >= VAL_METRICS, sorted(metrics)
    last = outcome.result.epochs[-1].logs
    for name in VAL_METRICS:
        assert metrics[name] == pytest.approx(last[name], rel=1e-3, abs=1e-4), name


@pytest.mark.slow
def test_predict_writes_each_head_s_predictions_as_the_savedmodel_serves_them(trained):
    import tensorflow as tf

    _, _, folder = trained
    metrics, out = evaluation(trained, "predict")
    written = dict(np.load(out / "predictions.npz"))
    # The served answer of every head (what the SavedModel answers: one format) and each head's label as `target`.
    assert set(written) == {"row", *SERVED, "kind_target", "size_target"}
    assert metrics["val_examples"] == len(written["kind_target"]) == 96
    features = dict(np.load(folder / "run" / "features.npz"))
    serve = tf.saved_model.load(str(folder / "run" / "saved_model")).signatures["serving_default"]
    saved = {k: v.numpy() for k, v in serve(**{n: tf.constant(v) for n, v in features.items()}).items()}
    # Both compute in float16 (precision=mixed), in batches of different sizes: equal within float16's precision.
    np.testing.assert_allclose(written["kind_probabilities"], saved["kind_probabilities"], atol=2e-3)
    top2 = np.sort(saved["kind_probabilities"], axis=-1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 1e-2  # a near tie may fall either way
    assert np.array_equal(written["kind_label"][clear], saved["kind_label"][clear])
    np.testing.assert_allclose(written["size_values"], saved["size_values"], rtol=1e-2, atol=1e-2)
    assert np.array_equal(written["kind_target"], heads_parts.load()["val"][1]["kind"])


@pytest.mark.slow
def test_predict_to_csv_names_each_head_s_columns(trained):
    _, out = evaluation(trained, "predict", "eval.output=predictions.csv")
    header = [name.strip('"') for name in (out / "predictions.csv").read_text().splitlines()[0].split(",")]
    # Named as file predictions name the served answer in CSV (`<key>_<j>` for a vector), each head's target after.
    assert header == [
        "row",
        "kind_probabilities_0",
        "kind_probabilities_1",
        "kind_probabilities_2",
        "kind_label",
        "size_values_0",
        "kind_target",
        "size_target",
    ]
