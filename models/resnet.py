"""A real keras.applications ResNet for small images: random, from a local weights file, or ImageNet's from Keras's
cache (a run never downloads)."""

from __future__ import annotations

import os
from pathlib import Path

from launcher.config.errors import ConfigError, Violation, raise_if_any
from launcher.train.model_io import model_input, output_head

VARIANTS = ("ResNet50", "ResNet101", "ResNet152", "ResNet50V2", "ResNet101V2", "ResNet152V2")


def check(cfg, source) -> None:
    if cfg.variant not in VARIANTS:
        raise ConfigError.single("model.variant", cfg.variant, f"one of {list(VARIANTS)}", "model.variant=ResNet50")
    if source.kind != "image":
        raise ConfigError.single("model", "resnet", f"image inputs; dataset gives {source.kind}", "model=mlp")
    raise_if_any(weights_problems(cfg, source))


def imagenet_file(variant: str) -> Path:
    """Where keras.applications keeps (and looks for) this variant's ImageNet weights without the top."""
    home = Path(os.environ.get("KERAS_HOME") or Path.home() / ".keras")
    return home / "models" / f"{variant.lower()}_weights_tf_dim_ordering_tf_kernels_notop.h5"


def weights_problems(cfg, source) -> list[Violation]:
    wanted = str(getattr(cfg, "weights", "none") or "none")
    if wanted == "none":
        return []
    if wanted == "imagenet":
        cached = imagenet_file(cfg.variant)
        problems = []
        if not cached.is_file():
            problems.append(
                Violation(
                    "model.weights",
                    wanted,
                    f"ImageNet weights already in Keras's cache ({cached} is missing; a run never downloads)",
                    f"put the file there (keras.applications.{cfg.variant}(weights='imagenet', include_top=False) on a "
                    "machine with network writes it), or model.weights=<a local weights file>, or model.weights=none",
                )
            )
        if source.input_shape[-1] != 3:
            problems.append(
                Violation(
                    "model.weights",
                    wanted,
                    f"3-channel (RGB) images for ImageNet weights (the dataset's have {source.input_shape[-1]})",
                    "model.weights=none, or an RGB dataset (dataset.color_mode=rgb)",
                )
            )
        return problems
    if not Path(wanted).expanduser().is_file():
        return [
            Violation(
                "model.weights",
                wanted,
                "none, imagenet or an existing weights file of this variant's backbone (file not found)",
                f"model.weights=/path/to/{cfg.variant.lower()}_notop.weights.h5",
            )
        ]
    return []


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
    wanted = str(getattr(cfg, "weights", "none") or "none")
    backbone = backbone_cls(
        include_top=False,
        weights=None if wanted == "none" else wanted if wanted == "imagenet" else str(Path(wanted).expanduser()),
        input_shape=(x.shape[1], x.shape[2], channels),
        pooling="avg",
    )
    x = backbone(x)
    return keras.Model(inputs, output_head(x, source), name=cfg.variant.lower())
