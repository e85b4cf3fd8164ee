"""A residual MLP with a custom layer, built from the spec the launcher passes."""

import keras


@keras.saving.register_keras_serializable(package="my_project")
class ResidualBlock(keras.layers.Layer):
    """x + Dense(relu(Dense(x))): registered so the exported .keras file loads wherever my_project imports.

    The sublayers take this layer's dtype policy: a model trained under a mixed policy then reloads the same
    in a process whose global policy is float32 (sublayers made with the global policy would not match)."""

    def __init__(self, units: int, dropout: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.units, self.dropout = units, dropout
        policy = self.dtype_policy
        self.inner = keras.layers.Dense(units, activation="relu", dtype=policy)
        self.outer = keras.layers.Dense(units, dtype=policy)
        self.drop = keras.layers.Dropout(dropout, dtype=policy)
        self.norm = keras.layers.LayerNormalization(dtype=policy)

    def build(self, input_shape):
        """Builds the sublayers, so a reloaded .keras file restores their weights into built layers."""
        self.inner.build(input_shape)
        self.outer.build((*input_shape[:-1], self.units))
        self.norm.build(input_shape)

    def call(self, x, training=False):
        return self.norm(x + self.drop(self.outer(self.inner(x)), training=training))

    def get_config(self):
        return {**super().get_config(), "units": self.units, "dropout": self.dropout}


def build(spec, units: int = 32, blocks: int = 2, dropout: float = 0.1):
    """The launcher calls this inside the strategy scope under its dtype policy; the output is logits."""
    inputs = keras.Input(shape=spec.input_shape, dtype=spec.input_dtype)
    x = keras.layers.Dense(units)(inputs)
    for _ in range(blocks):
        x = ResidualBlock(units, dropout)(x)
    return keras.Model(inputs, keras.layers.Dense(spec.outputs, name="logits")(x), name="residual_mlp")
