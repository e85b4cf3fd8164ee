"""What MLflow's own views need beyond params and metrics: the data as dataset inputs (digest, shape, schema: the
run page's "Datasets used"). The model as an MLflow model is `launcher.export.mlflow_model`'s."""

from __future__ import annotations

import warnings


def dataset_inputs(source, dataset_config) -> list[dict]:
    """Each split held as arrays, as MLflow dataset fields plus its context. Splits streamed from
    files (tf.data) are not read twice to be hashed: they are left out."""
    import mlflow.data

    path = getattr(dataset_config, "path", "") or None
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
                features, targets=targets, source=str(path) if path else None, name=f"{dataset_config.name}-{context}"
            )
        found.append({**dataset.to_dict(), "context": context})
    return found


def index_installed_packages() -> None:
    """MLflow's map from modules to installed packages, made now: saving a model checks its pip requirements
    against it, and building it reads every installed package's metadata (~0.5 CPU-s, once per process). A
    forkserver calls this before it forks, so the launches it starts find it made. Best effort: a MLflow without
    this private map loses nothing but the head start."""
    from mlflow.utils import requirements_utils

    index = getattr(requirements_utils, "_init_packages_to_modules_map", None)
    if index is not None:
        index()
