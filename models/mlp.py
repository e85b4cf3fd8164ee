"""Multi-layer perceptron: flattens any input, a stack of Dense layers."""

from __future__ import annotations

from launcher.config.errors import ConfigError
from launcher.train.model_io import model_input, output_head


def check(cfg, source) -> None:
    if source.kind == "tokens":
        raise ConfigError.single("model", "mlp", "a model for token inputs (dataset.kind=tokens)", "model=transformer")


def build(cfg, source):
    import keras

    inputs = model_input(source)
    x = keras.layers.Flatten()(inputs)
    for i, units in enumerate(cfg.hidden_units):
        x = keras.layers.Dense(units, activation=cfg.activation, name=f"dense_{i}")(x)
        if cfg.dropout:
            x = keras.layers.Dropout(cfg.dropout)(x)
    return keras.Model(inputs, output_head(x, source), name="mlp")
