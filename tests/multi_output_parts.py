"""Builders of models with several outputs, named by import path in tests (tests/ is on the path)."""

from __future__ import annotations

import keras


def two_heads(spec):
    """Two logits heads, `a` and `b`, on one body: a list of outputs."""
    inputs = keras.Input(spec.input_shape)
    x = keras.layers.Dense(16, activation="relu", name="body")(inputs)
    return keras.Model(
        inputs, [keras.layers.Dense(spec.outputs, name="a")(x), keras.layers.Dense(spec.outputs, name="b")(x)]
    )


class TwoHeadsSubclassed(keras.Model):
    """A subclassed model returning a dict of two outputs: no symbolic outputs until it is called."""

    def __init__(self, outputs, **kwargs):
        super().__init__(**kwargs)
        self.body = keras.layers.Dense(16, activation="relu")
        self.first = keras.layers.Dense(outputs)
        self.second = keras.layers.Dense(outputs)

    def call(self, x):
        h = self.body(x)
        return {"first": self.first(h), "second": self.second(h)}


def two_heads_subclassed(spec):
    return TwoHeadsSubclassed(spec.outputs)
