"""A tabular project with two named inputs and two heads, named by import path in tests (tests/ is on the path):
a loader returning dict features, dict targets and sample weights, and the model that takes them."""

from __future__ import annotations

import keras
import numpy as np


def _split(rng, n: int):
    num = rng.normal(size=(n, 4)).astype("float32")
    cat = np.eye(3, dtype="float32")[rng.integers(0, 3, n)]
    # kind: 3 classes, imbalanced (class 2 rare); size: a real target of both features.
    score = num[:, 0] + 2.0 * cat[:, 1]
    kind = np.digitize(score, [0.5, 2.2]).astype("int32")
    size = (num[:, 1] + cat.argmax(1)).astype("float32")
    weight = rng.uniform(0.5, 1.5, n).astype("float32")
    return {"num": num, "cat": cat}, {"kind": kind, "size": size}, weight


def load(n: int = 384, seed: int = 0):
    """{"train": (x, y, sample_weight), "val": (x, y, sample_weight)}: x and y dicts by name."""
    rng = np.random.default_rng(seed)
    return {"train": _split(rng, n), "val": _split(rng, n // 4)}


def build(spec, units: int = 16):
    """Inputs `num` (4) and `cat` (3 one-hot); heads `kind` (3 logits) and `size` (1 value), as a dict."""
    num = keras.Input((4,), name="num")
    cat = keras.Input((3,), name="cat")
    h = keras.layers.Dense(units, activation="relu")(keras.layers.Concatenate()([num, cat]))
    outputs = {"kind": keras.layers.Dense(3, name="kind")(h), "size": keras.layers.Dense(1, name="size")(h)}
    return keras.Model({"num": num, "cat": cat}, outputs)


def build_list(spec, units: int = 16):
    """The same model with its heads as a list (output names from the layers)."""
    model = build(spec, units)
    return keras.Model(model.input, [model.output["kind"], model.output["size"]])


KINDS = ["low", "mid", "high"]


def load_raw(n: int = 384, seed: int = 0):
    """`load`'s data as a project holds it before its own preprocessing: `num` in raw units (x100 + 500), scaled
    back by the loader's "preprocess" (run on every batch and exported inside the model); `kind`'s classes named."""
    import tensorflow as tf

    data = load(n, seed)
    for split in ("train", "val"):
        x = data[split][0]
        data[split] = ({**x, "num": x["num"] * 100.0 + 500.0}, *data[split][1:])

    @tf.function
    def preprocess(x):
        return {"num": (x["num"] - 500.0) / 100.0, "cat": x["cat"]}

    return {**data, "preprocess": preprocess, "class_names": {"kind": KINDS}}
