"""Deliberately broken models for the numerics tests, swapped in for `model=mlp` with `use(monkeypatch, name)`.

Each is the MLP's shape with one fault a person meets in real projects:

- `overflow`:  a layer whose activations exceed float16's range (65504) and one that scales them back,
               as a large-magnitude embedding or un-normalised sum followed by a normalisation does;
- `float16_logits`: logits left in the compute dtype, so a loss on them would compute in float16;
- `poisoned`:  gradients that turn non-finite after a given number of updates (an injected non-finite
               gradient stream: the forward pass stays finite, so only the gradients show it).
"""

from __future__ import annotations

import keras
from keras import ops

from launcher.train.model_io import classifier_head, model_input
from launcher.train.registry import MODELS

POISON_FROM_STEP = 5


@keras.saving.register_keras_serializable(package="tests")
class Scale(keras.layers.Layer):
    def __init__(self, factor: float, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, x):
        return x * ops.cast(self.factor, x.dtype)

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}


@keras.saving.register_keras_serializable(package="tests")
class PoisonGradients(keras.layers.Layer):
    """Identity forward; once the optimizer has applied `from_step` updates, its backward returns inf.

    Skipped steps do not advance the optimizer's counter, so the stream stays non-finite (a collapse).
    """

    def __init__(self, from_step: int = POISON_FROM_STEP, **kwargs):
        super().__init__(**kwargs)
        self.from_step = from_step
        self.owner = None  # the model; the engine gives it its optimizer before the first step

    def call(self, x, training=False):
        import tensorflow as tf

        if not training or self.owner is None or getattr(self.owner, "optimizer", None) is None:
            return x
        applied = tf.cast(self.owner.optimizer.iterations, tf.float32)
        gate = tf.where(applied >= self.from_step, float("inf"), 1.0)

        @tf.custom_gradient
        def identity(v):
            return tf.identity(v), lambda dy: dy * tf.cast(gate, dy.dtype)

        return identity(x)

    def get_config(self):
        return {**super().get_config(), "from_step": self.from_step}


class _Builder:
    def __init__(self, body):
        self.body = body

    def check(self, cfg, source) -> None:
        pass

    def build(self, cfg, source):
        inputs = model_input(source)
        x = keras.layers.Flatten()(inputs)
        x = keras.layers.Dense(32, activation="relu", name="dense_0")(x)
        x = self.body(x)
        model = keras.Model(inputs, classifier_head(x, source.num_classes), name="mlp")
        for layer in model.layers:
            if isinstance(layer, PoisonGradients):
                object.__setattr__(layer, "owner", model)  # not tracked: the model is not the layer's state
        return model


class _Float16Logits(_Builder):
    """The classifier without the float32 output layer a careful builder adds: logits in the policy's dtype."""

    def build(self, cfg, source):
        inputs = model_input(source)
        x = keras.layers.Flatten()(inputs)
        x = keras.layers.Dense(32, activation="relu", name="dense_0")(x)
        return keras.Model(inputs, keras.layers.Dense(source.num_classes, name="logits16")(x), name="mlp")


BUILDERS = {
    "float16_logits": _Float16Logits(None),
    "overflow": _Builder(lambda x: Scale(1e-5, name="attenuate")(Scale(1e5, name="amplify")(x))),
    "poisoned": _Builder(lambda x: PoisonGradients(name="poison")(x)),
}


def use(monkeypatch, name: str) -> None:
    """`model=mlp` builds the named broken model in this process."""
    builder = BUILDERS[name]
    monkeypatch.setattr(MODELS, "get", lambda model_name: builder)
