"""Pieces every model builder shares: the input layer, the float32 classifier head."""

from __future__ import annotations

import keras


def model_input(source):
    dtype = "int32" if source.kind == "tokens" else "float32"
    return keras.Input(shape=source.input_shape, dtype=dtype, name="inputs")


def classifier_head(x, num_classes: int):
    """Logits always computed in float32: under a mixed policy the loss needs the range."""
    return keras.layers.Dense(num_classes, dtype="float32", name="logits")(x)


def output_head(x, source):
    """The task's output layer in float32: class or label logits, regression targets, token logits."""
    return classifier_head(x, source.outputs)


@keras.saving.register_keras_serializable(package="launcher")
class PositionEmbedding(keras.layers.Layer):
    """Learned position embedding added to a (batch, length, dim) sequence."""

    def build(self, input_shape):
        self.positions = self.add_weight(
            shape=(input_shape[1], input_shape[2]), initializer="random_normal", name="positions"
        )

    def call(self, x):
        return x + keras.ops.cast(self.positions, x.dtype)
