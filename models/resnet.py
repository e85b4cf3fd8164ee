"""A real keras.applications ResNet, randomly initialised, for small images."""

from __future__ import annotations

from launcher.config.errors import ConfigError
from launcher.train.model_io import model_input, output_head

VARIANTS = ("ResNet50", "ResNet101", "ResNet152", "ResNet50V2", "ResNet101V2", "ResNet152V2")


def check(cfg, source) -> None:
    if cfg.variant not in VARIANTS:
        raise ConfigError.single("model.variant", cfg.variant, f"one of {list(VARIANTS)}", "model.variant=ResNet50")
    if source.kind != "image":
        raise ConfigError.single("model", "resnet", f"image inputs; dataset gives {source.kind}", "model=mlp")


def build(cfg, source):
    import keras

    inputs = model_input(source)
    x = inputs
    height, width, channels = source.input_shape
    size = max(cfg.min_input_size, 32)
    if min(height, width) < size:
        # keras.applications ResNets need >= 32x32 inputs.
        x = keras.layers.Resizing(max(height, size), max(width, size))(x)
    backbone_cls = getattr(keras.applications, cfg.variant)
    backbone = backbone_cls(
        include_top=False,
        weights=None,
        input_shape=(x.shape[1], x.shape[2], channels),
        pooling="avg",
    )
    x = backbone(x)
    return keras.Model(inputs, output_head(x, source), name=cfg.variant.lower())
