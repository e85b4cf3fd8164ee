"""Small convnet: conv-BN-relu-pool blocks, global pooling, a dense layer."""

from __future__ import annotations

from launcher.config.errors import ConfigError
from launcher.train.model_io import model_input, output_head


def check(cfg, source) -> None:
    if source.kind != "image":
        raise ConfigError.single(
            "model",
            "cnn",
            f"image inputs (H, W, C); dataset gives {source.kind} {source.input_shape}",
            "model=mlp, or an image dataset (dataset.layout=image for digits)",
        )


def build(cfg, source):
    import keras

    inputs = model_input(source)
    x = inputs
    for i, filters in enumerate(cfg.filters):
        x = keras.layers.Conv2D(filters, cfg.kernel_size, padding="same", use_bias=False, name=f"conv_{i}")(x)
        x = keras.layers.BatchNormalization(name=f"bn_{i}")(x)
        x = keras.layers.Activation("relu")(x)
        if min(x.shape[1], x.shape[2]) >= 4:
            x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dense(cfg.dense_units, activation="relu", name="dense")(x)
    if cfg.dropout:
        x = keras.layers.Dropout(cfg.dropout)(x)
    return keras.Model(inputs, output_head(x, source), name="cnn")
