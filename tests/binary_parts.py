"""An imbalanced binary project as keras.io writes one: a model ending in sigmoid (or softmax), a focal loss class
whose __init__ takes no `reduction`, and a loader of fixed data (about one positive in eight)."""

from __future__ import annotations

import keras
import numpy as np
from keras import ops


def load(n: int = 512, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6)).astype("float32")
    score = x[:, 0] + 0.5 * x[:, 1] - 0.3 * x[:, 2] + 0.4 * rng.normal(size=n)
    y = (score > 1.3).astype("int64")
    cut = n * 3 // 4
    return {"train": (x[:cut], y[:cut]), "val": (x[cut:], y[cut:])}


def build_sigmoid(spec, units: int = 16):
    inputs = keras.Input(spec.input_shape)
    hidden = keras.layers.Dense(units, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(hidden))


def build_softmax(spec, units: int = 16):
    inputs = keras.Input(spec.input_shape)
    hidden = keras.layers.Dense(units, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(spec.outputs, activation="softmax")(hidden))


class FocalLoss(keras.losses.Loss):
    """keras.io's form: no `reduction` in the signature; probabilities in (the model ends in sigmoid)."""

    def __init__(self, gamma=2.0, name="focal"):
        super().__init__(name=name)
        self.gamma = gamma

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, y_pred.dtype)
        bce = keras.losses.binary_crossentropy(y_true, y_pred)[..., None]
        p_t = y_true * y_pred + (1 - y_true) * (1 - y_pred)
        return ops.mean(ops.power(1.0 - p_t, self.gamma) * bce, axis=-1)


def weighted_crossentropy(y_true, y_pred, positive_weight=1.0):
    """A loss function with an argument from config (task.loss: {name: ..., positive_weight: 4.0})."""
    y_true = ops.cast(y_true, y_pred.dtype)
    y_pred = ops.clip(y_pred, 1e-7, 1 - 1e-7)
    return -ops.mean(positive_weight * y_true * ops.log(y_pred) + (1 - y_true) * ops.log(1 - y_pred), axis=-1)


class PositiveRate(keras.metrics.Metric):
    """A metric that leaves its name to Keras (no default name): Keras would call a second copy positive_rate_1."""

    def __init__(self, threshold=0.5, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.threshold = threshold
        self.positive = self.add_variable(shape=(), initializer="zeros", name="positive")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.positive.assign_add(ops.sum(ops.cast(y_pred > self.threshold, "float32")))
        self.count.assign_add(ops.cast(ops.size(y_pred), "float32"))

    def result(self):
        return self.positive / ops.maximum(self.count, 1.0)
