"""What MLflow's own views need beyond params and metrics: the data as dataset inputs (digest,
shape, schema: the run page's "Datasets used") and the model as an MLflow model (signature, input
example; `mlflow.pyfunc.load_model` loads it, the registry can take it)."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np

MODEL_ARTIFACT = "mlflow_model"


def dataset_inputs(source, dataset_cfg) -> list[dict]:
    """Each split held as arrays, as MLflow dataset fields plus its context. Splits streamed from
    files (tf.data) are not read twice to be hashed: they are left out."""
    import mlflow.data

    path = getattr(dataset_cfg, "path", "") or None
    found = []
    for context, split in (("training", source.train), ("validation", source.val)):
        if not isinstance(split, tuple):
            continue
        features, targets = split[0], split[1]  # a weighted split's third part, the weights, is not a field
        if isinstance(features, tuple):  # MLflow takes one array or named arrays
            features = {f"input_{i}": array for i, array in enumerate(features)}
        with warnings.catch_warnings():  # a local path resolves to one source type twice; MLflow warns
            warnings.simplefilter("ignore", UserWarning)
            dataset = mlflow.data.from_numpy(
                features, targets=targets, source=str(path) if path else None, name=f"{dataset_cfg.name}-{context}"
            )
        found.append({**dataset.to_dict(), "context": context})
    return found


def save_mlflow_model(model, example, directory: Path, heads: list[str] | None = None) -> Path:
    """The trained model in MLflow's Keras format, with the signature of `example` and its output.

    A model of named features takes them by name (`example` a dict, a tensor spec per feature); a model of several
    heads answers a dict by head (`heads`: their names in the model's order), a tensor spec per head. The pip
    requirements are given (TensorFlow and Keras as running), so MLflow does not infer them by importing the world
    in a subprocess."""
    import keras
    import mlflow.keras
    import tensorflow as tf
    from mlflow.models import infer_signature

    example = _named_features(model, example)
    model = _outputs_by_head(model, heads)
    output = model.predict(example, verbose=0)
    output = {name: np.asarray(value) for name, value in output.items()} if isinstance(output, dict) else output
    if directory.exists():  # a resumed run exports again
        shutil.rmtree(directory)
    directory.mkdir(parents=True)  # MLflow writes the input example before it creates the folder
    mlflow.keras.save_model(
        model,
        str(directory),
        signature=infer_signature(example, output if isinstance(output, dict) else np.asarray(output)),
        input_example=example,
        pip_requirements=[f"tensorflow=={tf.__version__}", f"keras=={keras.__version__}"],
    )
    return directory


def _named_features(model, example):
    """One array as it is; named features as a dict of arrays; a tuple of features named like the model's inputs
    (MLflow's signature names each tensor)."""
    if isinstance(example, dict):
        return {name: np.asarray(array) for name, array in example.items()}
    if isinstance(example, tuple | list):
        names = [t._keras_history[0].name for t in model.inputs]
        return {name: np.asarray(array) for name, array in zip(names, example, strict=True)}
    return np.asarray(example)


def _outputs_by_head(model, heads: list[str] | None):
    """A model of several outputs as a list, answering a dict by head instead (the same layers and weights)."""
    import keras

    outputs = getattr(model, "outputs", None) or []
    if len(outputs) < 2 or isinstance(model.output, dict) or not heads:
        return model
    return keras.Model(model.input, dict(zip(heads, outputs, strict=True)), name=model.name)


def index_installed_packages() -> None:
    """MLflow's map from modules to installed packages, made now: saving a model checks its pip requirements
    against it, and building it reads every installed package's metadata (~0.5 CPU-s, once per process). A
    forkserver calls this before it forks, so the launches it starts find it made. Best effort: a MLflow without
    this private map loses nothing but the head start."""
    from mlflow.utils import requirements_utils

    index = getattr(requirements_utils, "_init_packages_to_modules_map", None)
    if index is not None:
        index()
