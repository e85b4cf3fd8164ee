"""The run's MLflow model: the SavedModel's served function as an MLflow pyfunc (`export/served_pyfunc.py`).

So the model a person registers and serves with `mlflow models serve` answers what the SavedModel answers, in the
task's served form (probabilities and label, per head), not the network's raw logits. Its signature names every
input (but one of 2+ dimensions per example, also taken flat: `_signature`) and every served output; its input
example is a raw example, what a client sends.

`launcher.export.served_pyfunc` is the code MLflow runs when the model is loaded.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from launcher.export import served_pyfunc

MODEL_ARTIFACT = "mlflow_model"


def save_mlflow_model(
    saved_model: Path, example: dict[str, np.ndarray], directory: Path, signature: str, keras_model: Path | None = None
) -> Path:
    """`directory` as an MLflow model serving `saved_model`'s `signature` (a SavedModel signature name), with the
    MLflow signature of `example` (input name -> raw arrays; one input called `inputs` is sent as one array) and of
    the served answer. The pip requirements are given (TensorFlow as running), so MLflow does not infer them by
    importing the world in a subprocess. `keras_model` (model.keras) rides along as an artifact: a registered
    version is also what `model.init_from=models:/<name>/<version>` starts from."""
    import mlflow.pyfunc
    import tensorflow as tf

    answer = _answer(saved_model, signature, example)
    sent = _as_sent(example)
    if directory.exists():  # a resumed run exports again
        shutil.rmtree(directory)
    with _quiet("mlflow.pyfunc", "mlflow.models"):  # "Validating input example against model signature"
        mlflow.pyfunc.save_model(
            str(directory),
            python_model=str(Path(served_pyfunc.__file__)),
            artifacts={
                served_pyfunc.ARTIFACT: str(saved_model),
                **({"keras_model": str(keras_model)} if keras_model else {}),
            },
            model_config={served_pyfunc.SIGNATURE_KEY: signature},
            signature=_signature(sent, answer),
            input_example=sent,
            metadata={"inputs": _takes(example)} if not isinstance(sent, pd.DataFrame) else None,
            pip_requirements=[f"tensorflow=={tf.__version__}", "pandas", "numpy"],
        )
    return directory


def _signature(sent, answer: dict):
    """The MLflow signature of `sent` and `answer`. An input whose examples are arrays of two or more dimensions
    (digits' [8, 8, 1]) is also taken flat, a CSV row ([n, 64]): MLflow would refuse that form against a tensor
    schema before the served code reshapes it, so such a model's signature names its outputs only, the served code
    checks the request (names, dtypes, shapes: an HTTP 400 naming the shape and the flat form), and its
    `serving_input_example.json` shows the nested form."""
    from mlflow.models import ModelSignature, infer_signature

    signature = infer_signature(sent, answer)
    arrays = sent.values() if isinstance(sent, dict) else [] if isinstance(sent, pd.DataFrame) else [sent]
    if any(np.ndim(array) > 2 for array in arrays):
        return ModelSignature(inputs=None, outputs=signature.outputs)
    return signature


def _takes(example: dict[str, np.ndarray]) -> dict[str, str]:
    """What each input takes, written in the MLmodel file (`metadata.inputs`) where the signature may name no
    inputs: `float32 [n, 8, 8, 1], or each example flat: [n, 64]`."""
    takes = {}
    for name, array in example.items():
        array = np.asarray(array)
        shape = ["n", *array.shape[1:]]
        flat = f", or each example flat: [n, {int(np.prod(array.shape[1:]))}]" if array.ndim > 2 else ""
        takes[name] = f"{array.dtype.name} [{', '.join(map(str, shape))}]{flat}"
    return takes


@contextlib.contextmanager
def _quiet(*names: str):
    """MLflow's INFO notes while it saves, kept off the console (warnings still show)."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _answer(saved_model: Path, signature: str, example: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The signature's answer on `example`: the output half of the MLflow signature."""
    import tensorflow as tf

    function = tf.saved_model.load(str(saved_model)).signatures[signature]
    answer = function(**{name: tf.constant(value) for name, value in example.items()})
    return {key: served_pyfunc.plain(value.numpy()) for key, value in answer.items()}


def _as_sent(example: dict[str, np.ndarray]):
    """One input called `inputs` as the one array a client sends; named inputs as a dict; encoded bytes (images,
    records) as a table with one column per input (MLflow's JSON carries bytes base64-encoded in a column)."""
    if any(np.asarray(value).dtype == object for value in example.values()):
        return pd.DataFrame({name: list(value) for name, value in example.items()})
    if list(example) == ["inputs"]:
        return example["inputs"]
    return example
