"""Pieces every model builder shares: the input layer, the float32 output head, what a builder is told."""

from __future__ import annotations

from dataclasses import dataclass

import keras


@dataclass(frozen=True)
class ModelSpec:
    """What a user's model builder is given, `builder(spec, **model.params)`: the data's shapes and the task's output
    width.

    Args:
        input_shape: one example's input shape; `input_dtype`: string for raw text or string categories (one
            array of strings), int32 for token ids, else float32.
        outputs: the last layer's units: classes, labels, targets or the vocabulary, decided by the task.
        task: classification, multilabel, regression or sequence; `kind`: image, tabular or tokens.
        vocab_size: token inputs' ids are in [0, vocab_size); 0 otherwise.
    """

    input_shape: tuple[int, ...]
    input_dtype: str  # string for one array of strings, int32 for token ids, else float32
    outputs: int  # units of the last layer: classes, labels, targets or the vocabulary
    task: str  # classification, multilabel, regression or sequence
    kind: str  # image, tabular or tokens
    vocab_size: int = 0  # token inputs: ids are in [0, vocab_size)

    @classmethod
    def of(cls, source) -> ModelSpec:
        return cls(
            tuple(source.input_shape),
            "string" if source.string_inputs() == ("inputs",) else "int32" if source.kind == "tokens" else "float32",
            source.outputs,
            source.task,
            source.kind,
            int(source.vocab_size or 0),
        )


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
