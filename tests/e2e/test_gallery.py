"""The gallery (docs/gallery.md, issue 63): keras.io's kinds of project, each a loader + builder on data a package
ships, trained ONCE here through the page's own command (tests/e2e/test_docs.py leaves the page to this module),
then held against plain Keras `fit` on the same loader's splits with the same builder, epochs, batch and optimizer,
and sent raw inputs as JSON (a table with string columns, text, windows, base64 PNG bytes), which the MLflow model
must answer as the run's `model.keras` does: through a real `mlflow models serve` for the string table and the
images (about 16 CPU-s to start one), parsed by the scoring server's own function and answered in this process for
the others.

The page's text is what is tested: its file blocks are written and its commands parsed and run as typed; the
plain-Keras side reads its epochs, batch, loader arguments, loss and metric arguments, class weights and unfreeze
schedule from the same command. Within one point: 0.01 absolute for accuracy-like metrics; 10% relative for the
forecast's validation MAE. About 160 CPU-s for the seven (measured on the 2-core AMD EPYC)."""

from __future__ import annotations

import base64
import json
import re
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from support.config import ROOT
from support.pages import chains, page_files
from support.serving import invoke, mlflow_server
from support.tracking import store

PAGE = ROOT / "docs" / "gallery.md"
CHAINS = chains(PAGE)


@pytest.fixture(autouse=True)
def projects_forgotten():
    """The page's modules, imported here for plain fit, are gone afterwards: the next project imports its own."""
    yield
    for name in [m for m in sys.modules if m.startswith("gallery_")]:
        del sys.modules[name]


def words_of(command: str) -> dict[str, str]:
    """The command's `key=value` overrides (a leading `+` dropped)."""
    return dict(w.lstrip("+").split("=", 1) for w in shlex.split(command)[3:] if "=" in w)


def loader_params(words: dict[str, str]) -> dict:
    return {k.removeprefix("dataset.params."): int(v) for k, v in words.items() if k.startswith("dataset.params.")}


def component(path: str):
    module, name = path.split(":")
    return getattr(__import__(module), name)


def as_arrays(split):
    """A loader's split as plain Keras takes it: arrays, a DataFrame's columns as (n, 1) arrays, tf.data read out."""
    import pandas as pd
    import tensorflow as tf

    if isinstance(split, tf.data.Dataset):
        pairs = list(split.as_numpy_iterator())
        return np.stack([x for x, _ in pairs]), np.stack([y for _, y in pairs])
    x, y = split[:2]
    if isinstance(x, pd.DataFrame):
        return {c: x[c].to_numpy(str if x[c].dtype.kind in "OT" else "float32")[:, None] for c in x}, y
    return x, y


def batches(x, y=None, batch: int = 64, shuffle: bool = False):
    """Arrays as plain Keras takes strings (keras.io's form: a tf.data of the arrays), shuffled each epoch if asked."""
    import tensorflow as tf

    data = tf.data.Dataset.from_tensor_slices(x if y is None else (x, y))
    return (data.shuffle(len(y), seed=0) if shuffle else data).batch(batch)


def adapt_split(x, y):
    """What the launcher hands `adapt`: the training split, batched by 256, a DataFrame's columns one value each."""
    import tensorflow as tf

    features = {c: v[:, 0] for c, v in x.items()} if isinstance(x, dict) else x
    return tf.data.Dataset.from_tensor_slices((features, y)).batch(256)


def balanced(y) -> dict[int, float]:
    counts = np.bincount(y)
    return {c: len(y) / (len(counts) * n) for c, n in enumerate(counts)}


def plain_fit(words: dict[str, str], compiled, tmp_path: Path):
    """Plain Keras: the loader's splits, the builder (after `adapt`, as keras.io does), `fit` with the command's epochs
    and global batch and Adam at the launcher's default rate; the unfreeze schedule as keras.io writes it (freeze,
    fit, unfreeze with BatchNormalization kept frozen, recompile at the lower rate, fit)."""
    import keras

    keras.utils.set_random_seed(0)
    splits = component(words["dataset.loader"])(**loader_params(words))
    (x, y), validation = as_arrays(splits["train"]), as_arrays(splits["val"])
    shape = next(iter(x.values())).shape[1:] if isinstance(x, dict) else x.shape[1:]
    spec = SimpleNamespace(input_shape=tuple(shape), outputs=int(y.max()) + 1 if y.dtype.kind in "iu" else 1)
    build = component(words["model.builder"])
    if "model.adapt" in words:
        model = build(spec, component(words["model.adapt"])(spec, adapt_split(x, y)))
    else:
        model = build(spec)
    epochs, batch = int(words["train.epochs"]), int(words["scaling.batch_size"])
    x, fit = batches(x, y, batch, shuffle=True), {"validation_data": batches(*validation, batch), "verbose": 0}
    if words.get("task.class_weight") == "balanced":
        fit["class_weight"] = balanced(y)
    if "model.init_from" in words:
        source_run = tmp_path / "outputs" / "runs" / words["model.init_from"]
        source = keras.saving.load_model(
            next(p for p in (source_run / "best.keras", source_run / "model.keras") if p.exists())
        )
        base = model.get_layer("base")
        base.set_weights(source.get_layer("base").get_weights())
        base.trainable = False
        model.compile(keras.optimizers.Adam(1e-3), **compiled)
        first = int(words["train.unfreeze_at_epoch"])
        model.fit(x, epochs=first, **fit)
        base.trainable = True
        for layer in base.layers:
            if isinstance(layer, keras.layers.BatchNormalization):
                layer.trainable = False
        model.compile(keras.optimizers.Adam(float(words["train.unfreeze_learning_rate"])), **compiled)
        return model.fit(x, epochs=epochs, initial_epoch=first, **fit).history
    model.compile(keras.optimizers.Adam(1e-3), **compiled)
    return model.fit(x, epochs=epochs, **fit).history


def keras_compiled(name: str, words: dict[str, str]) -> dict:
    """The loss and metrics plain Keras is compiled with for each project: what its keras.io example uses (the custom
    ones with the arguments the command gives them)."""
    if name == "gallery_custom":
        custom = __import__("gallery_custom")
        factor = float(re.search(r"regularization_factor:([\d.]+)", words["task.loss"]).group(1))
        threshold = float(re.search(r"threshold:([\d.]+)", words["task.metrics"]).group(1))
        return {"loss": custom.CustomMSE(factor), "metrics": ["accuracy", custom.ConfidentlyRight(threshold)]}
    if name in ("gallery_diamonds", "gallery_imbalanced"):
        return {"loss": "binary_crossentropy", "metrics": ["accuracy"]}
    if name == "gallery_weather":
        return {"loss": "mse", "metrics": ["mae"]}
    return {"loss": "sparse_categorical_crossentropy", "metrics": ["accuracy"]}


# The compared validation metric of each project, and how close the launcher's must be to plain fit's.
COMPARED = {
    "gallery_diamonds": [("val_accuracy", 0.01)],
    "gallery_text": [("val_accuracy", 0.01)],
    "gallery_weather": [("val_mae", "10%")],
    "gallery_imbalanced": [("val_accuracy", 0.01)],
    "gallery_custom": [("val_accuracy", 0.01), ("val_confidently_right", 0.01)],
    "gallery_images": [("val_accuracy", 0.01)],
}


def raw_requests(words: dict[str, str], count: int = 6):
    """`count` validation examples as a client holds them, and what the Keras model takes for them."""
    import pandas as pd
    import tensorflow as tf

    splits = component(words["dataset.loader"])(**loader_params(words))
    x, _ = as_arrays(splits["val"])
    if isinstance(x, dict):  # string and numeric columns: a table
        table = pd.DataFrame({c: v[:count, 0] for c, v in x.items()})
        return table, {c: v[:count] for c, v in x.items()}
    x = x[:count]
    if x.dtype.kind in "UO":  # raw text
        return pd.DataFrame({"inputs": list(x)}), x
    if splits.get("raw_images"):  # images: PNG bytes, as a camera or a browser sends them
        return pd.DataFrame({"images": [tf.io.encode_png(image).numpy() for image in x]}), x.astype("float32")
    return x, x  # windows: an array of windows


@pytest.mark.slow
@pytest.mark.parametrize("chain", CHAINS, ids=[words_of(c[-1])["name"] for c in CHAINS])
def test_each_gallery_project_trains_like_plain_keras_fit_and_is_served_raw(chain, tmp_path, launcher_here):
    import keras
    import mlflow.pyfunc
    from mlflow.pyfunc.scoring_server import infer_and_parse_data

    for path, content in page_files(PAGE.read_text()).items():
        (tmp_path / path).write_text(content)
    for command in chain:
        args = shlex.split(command)[3:]
        assert {"precision=auto", "strategy=mirrored", "xla=auto"} <= set(args), command
        done = launcher_here([*args, f"tracking.uri={store(tmp_path / 'outputs' / 'mlflow.db')}"], tmp_path)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    words = words_of(chain[-1])
    module = words["model.builder"].split(":")[0]
    run = tmp_path / "outputs" / "runs" / words["name"]
    launched = json.loads((run / "outcome.json").read_text())["metrics"]
    decided = {k: v["value"] for k, v in yaml.safe_load((run / "plan.yaml").read_text())["decisions"].items()}
    same = (decided["replicas"], decided["batch.global"], decided["optimizer"], decided["lr"])
    assert same == (2, int(words["scaling.batch_size"]), "keras.optimizers.Adam", 0.001), same  # as plain fit has

    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(tmp_path))
        history = plain_fit(words, keras_compiled(module, words), tmp_path)
        table, keras_input = raw_requests(words)
    for metric, bound in COMPARED.get(module, [("val_accuracy", 0.01)]):
        plain = history[metric][-1]
        allowed = float(bound[:-1]) / 100 * plain if isinstance(bound, str) else bound
        print(f"gallery {words['name']}: {metric} launcher {launched[metric]:.4f}, plain fit {plain:.4f}")
        assert abs(launched[metric] - plain) <= allowed, (metric, launched[metric], plain)

    body = request(table)  # the JSON a client sends, in the form the page shows
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(tmp_path))
        trained = keras.saving.load_model(run / "model.keras", compile=False)
        served = mlflow.pyfunc.load_model(str(run / "mlflow_model"))
        answer = served.predict(infer_and_parse_data(body, served.metadata.get_input_schema()))  # as the server does
    want = np.asarray(trained.predict(batches(keras_input), verbose=0))
    np.testing.assert_allclose(answered(answer).reshape(want.shape), want, rtol=1e-4, atol=1e-5)
    if module in REAL_SERVER:
        with mlflow_server(
            str(run / "mlflow_model"), store(tmp_path / "outputs" / "mlflow.db"), tmp_path / "log"
        ) as port:
            response = json.loads(invoke(port, body).read())["predictions"]
        np.testing.assert_allclose(answered(response).reshape(want.shape), want, rtol=1e-4, atol=1e-5)


def answered(predictions) -> np.ndarray:
    """A served answer's numbers: a regression's values, a classifier's probabilities."""
    return np.asarray(predictions["values" if "values" in predictions else "probabilities"], "float32")


def request(table) -> dict:
    """The JSON body of a request: a table of named columns (strings as strings) as records, images as base64 PNG
    bytes, windows as an array."""
    if isinstance(table, np.ndarray):
        return {"inputs": table.tolist()}
    if "images" in table:
        return {
            "dataframe_split": {
                "columns": ["images"],
                "data": [[base64.b64encode(b).decode()] for b in table["images"]],
            }
        }
    return {"dataframe_records": json.loads(table.to_json(orient="records"))}


# A real `mlflow models serve` (~16 CPU-s to start, measured) for the request forms that differ from an array's: a
# table with string columns, image bytes. The others are parsed and answered in this process by the same code.
REAL_SERVER = {"gallery_diamonds", "gallery_images"}
