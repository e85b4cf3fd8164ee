"""scikit-learn's bundled 8x8 handwritten digits: the default, needs no network. The raw examples are the
intensities 0..16; the scaling to [0, 1] runs on every batch and inside every export, so a client sends raw."""

from __future__ import annotations

import numpy as np

from launcher.config.errors import ConfigError
from launcher.train.data import DataSource, split_arrays
from launcher.train.preprocessing import Preprocessing

LAYOUTS = ("image", "flat")


def load(cfg) -> DataSource:
    from sklearn.datasets import load_digits

    if cfg.layout not in LAYOUTS:
        raise ConfigError.single("dataset.layout", cfg.layout, f"one of {list(LAYOUTS)}", "dataset.layout=image")
    bunch = load_digits()
    x = bunch.images.astype("float32")  # intensities 0..16, as the scanner gave them
    if cfg.layout == "image":
        x, kind = x[..., np.newaxis], "image"
    else:
        x, kind = x.reshape(len(x), -1), "tabular"
    source = split_arrays(
        x,
        bunch.target,
        cfg.validation_split,
        cfg.shuffle_seed,
        cfg.limit,
        kind,
        num_classes=10,
        test_split=cfg.test_split,
    )
    source.preprocessing = Preprocessing(_scaled)  # on every batch, and inside every export: raw 0..16 served
    return source


def _scaled(raw: dict) -> dict:
    """Intensities 0..16 to [0, 1]."""
    import tensorflow as tf

    return {"inputs": tf.cast(raw["inputs"], tf.float32) / 16.0}
