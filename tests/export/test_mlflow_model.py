"""The MLflow model is the SavedModel's served function (`launcher.export.mlflow_model`, the code MLflow runs:
`launcher.export.served_pyfunc`): it answers what the signature answers, names every input and output, and
refuses a request it cannot answer with a message naming the input (an HTTP 400 under `mlflow models serve`)."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A SavedModel whose serving_default takes `age` (float32, 2 values) and `code` (int32 id) by name and
    answers `score` and `label`."""
    import tensorflow as tf

    class Served(tf.Module):
        def __init__(self):
            self.w = tf.Variable([[0.5], [-1.0]])

        @tf.function(
            input_signature=[
                {
                    "age": tf.TensorSpec([None, 2], tf.float32, name="age"),
                    "code": tf.TensorSpec([None], tf.int32, name="code"),
                }
            ]
        )
        def serve(self, given):
            score = tf.matmul(given["age"], self.w)[:, 0] + tf.cast(given["code"], tf.float32)
            return {"score": score, "label": tf.cast(score > 0, tf.int32)}

    module = Served()
    path = tmp_path_factory.mktemp("saved") / "saved_model"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve.get_concrete_function()})
    return path


EXAMPLE = {"age": np.array([[1.0, 2.0], [3.0, 0.5]], "float32"), "code": np.array([0, 2], "int32")}


def test_the_mlflow_model_answers_what_the_signature_answers_and_names_inputs_and_outputs(saved, tmp_path):
    import mlflow.pyfunc
    import tensorflow as tf
    from mlflow.models import Model

    from launcher.export.mlflow_model import save_mlflow_model

    directory = save_mlflow_model(saved, EXAMPLE, tmp_path / "mlflow_model", "serving_default")
    signature = Model.load(str(directory)).signature
    assert sorted(signature.inputs.input_names()) == ["age", "code"]
    assert sorted(signature.outputs.input_names()) == ["label", "score"]
    answered = mlflow.pyfunc.load_model(str(directory)).predict(EXAMPLE)
    function = tf.saved_model.load(str(saved)).signatures["serving_default"]
    want = function(**{name: tf.constant(value) for name, value in EXAMPLE.items()})
    np.testing.assert_array_equal(answered["score"], want["score"].numpy())
    np.testing.assert_array_equal(answered["label"], want["label"].numpy())


def served(saved):
    from launcher.export.served_pyfunc import ServedSavedModel

    model = ServedSavedModel()
    model.load_context(SimpleNamespace(artifacts={"saved_model": str(saved)}, model_config={}))
    return model


@pytest.mark.parametrize(
    ("request_", "said"),
    [
        (
            {"age": EXAMPLE["age"]},
            r"takes the inputs \['age', 'code'\]; the request is missing \['code'\] and has \[\]",
        ),
        ({**EXAMPLE, "extra": EXAMPLE["code"]}, r"is missing \[\] and has \['extra'\]"),
        ({**EXAMPLE, "age": EXAMPLE["age"][:, :1]}, r"input 'age' has shape \[2, 1\]; the model takes \['n', 2\]"),
        ({**EXAMPLE, "code": np.array([0.5, 1.0])}, r"input 'code' holds fractions; the model takes int32 ids"),
        (
            {**EXAMPLE, "age": np.array([["a", "b"], ["c", "d"]])},
            r"input 'age' holds <U1 values; the model takes float32",
        ),
        (EXAMPLE["age"], r"takes named inputs \['age', 'code'\]; send them as a JSON object"),
    ],
    ids=["missing", "extra", "shape", "fractions-for-ids", "strings", "unnamed"],
)
def test_a_request_the_model_cannot_answer_is_refused_naming_the_input(saved, request_, said):
    from mlflow.exceptions import MlflowException

    with pytest.raises(MlflowException, match=said) as refused:
        served(saved).predict(None, request_)
    assert refused.value.get_http_status_code() == 400


def test_whole_numbers_for_ids_are_taken_as_ids(saved):
    answered = served(saved).predict(None, {**EXAMPLE, "code": np.array([0.0, 2.0])})
    assert answered["label"].tolist() == [0, 1]


def test_the_served_code_never_imports_the_launcher():
    """MLflow runs this file wherever the model is served: TensorFlow, NumPy and MLflow are all it may need."""
    from launcher.export import served_pyfunc

    tree = ast.parse(Path(served_pyfunc.__file__).read_text())
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names] + [
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    ]
    assert imported and not [name for name in imported if name.split(".")[0] == "launcher"]


def test_ids_out_of_the_input_s_range_are_refused_not_wrapped(saved):
    from mlflow.exceptions import MlflowException

    with pytest.raises(MlflowException, match=r"input 'code' holds 0..3000000000; the model takes int32"):
        served(saved).predict(None, {**EXAMPLE, "code": np.array([0, 3_000_000_000])})


def test_the_served_code_loads_without_advice_a_person_cannot_act_on():
    """MLflow runs this file at every save and load; without a type hint on `predict` it printed "Add type hints to
    the `predict` method" twice per training run, in colour codes, and no filter could stop it."""
    import runpy
    import warnings

    from launcher.export import served_pyfunc

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runpy.run_path(served_pyfunc.__file__)  # what MLflow does with a model from code
    assert [str(w.message) for w in caught if "type hint" in str(w.message).lower()] == []


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """A SavedModel whose one input `inputs` is a [2, 3] grid per example (as digits' [8, 8, 1]), answering its sum
    weighted by position (so a wrong reshape changes the answer) as `values`."""
    import tensorflow as tf

    weights = tf.constant(np.arange(6, dtype="float32").reshape(2, 3))

    class Served(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 2, 3], tf.float32, name="inputs")])
        def serve(self, inputs):
            return {"values": tf.reduce_sum(inputs * weights, axis=[1, 2])}

    module = Served()
    path = tmp_path_factory.mktemp("grid") / "saved_model"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve.get_concrete_function()})
    return path


def test_a_fixed_shape_input_is_taken_nested_or_flat_as_a_csv_row_and_a_wrong_size_names_both_forms(grid, tmp_path):
    """One input form for a model's features: a CSV's row of 6 values (`inputs_0..inputs_5`, as `mode=predict`
    reads a CSV), a flat JSON list [n, 6] and the nested [n, 2, 3] give one answer, through the saved MLflow model
    (whose signature then names no inputs: MLflow would refuse the flat form before the served code reshapes it)."""
    import mlflow.pyfunc
    import pandas as pd
    from mlflow.exceptions import MlflowException
    from mlflow.models import Model

    from launcher.export.mlflow_model import save_mlflow_model

    nested = np.arange(12, dtype="float32").reshape(2, 2, 3) / 10
    flat = nested.reshape(2, -1)
    directory = save_mlflow_model(grid, {"inputs": nested}, tmp_path / "mlflow_model", "serving_default")
    written = Model.load(str(directory))
    assert written.signature.inputs is None and written.signature.outputs.input_names() == ["values"]
    assert written.metadata["inputs"] == {"inputs": "float32 [n, 2, 3], or each example flat: [n, 6]"}
    model = mlflow.pyfunc.load_model(str(directory))
    want = (nested * np.arange(6).reshape(2, 3)).sum(axis=(1, 2))
    np.testing.assert_allclose(model.predict(nested)["values"], want, rtol=1e-6)
    np.testing.assert_array_equal(model.predict(flat)["values"], model.predict(nested)["values"])
    table = pd.DataFrame({f"inputs_{j}": flat[:, j] for j in range(6)})
    np.testing.assert_array_equal(model.predict(table)["values"], model.predict(nested)["values"])
    with pytest.raises(
        MlflowException,
        match=r"has shape \[2, 5\]; the model takes \['n', 2, 3\] \(n examples\), "
        r"or each example flat: \['n', 6\]",
    ) as refused:
        served(grid).predict(None, flat[:, :5])
    assert refused.value.get_http_status_code() == 400
    with pytest.raises(MlflowException, match=r"the request lacks \['inputs_5'\]"):
        served(grid).predict(None, table.drop(columns="inputs_5"))
