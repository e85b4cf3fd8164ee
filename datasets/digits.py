"""scikit-learn's bundled 8x8 handwritten digits: the default, needs no network."""

from __future__ import annotations

import numpy as np

from launcher.config.errors import ConfigError
from launcher.train.data import DataSource, split_arrays

LAYOUTS = ("image", "flat")


def load(cfg) -> DataSource:
    from sklearn.datasets import load_digits

    if cfg.layout not in LAYOUTS:
        raise ConfigError.single("dataset.layout", cfg.layout, f"one of {list(LAYOUTS)}", "dataset.layout=image")
    bunch = load_digits()
    x = (bunch.images / 16.0).astype("float32")
    if cfg.layout == "image":
        x, kind = x[..., np.newaxis], "image"
    else:
        x, kind = x.reshape(len(x), -1), "tabular"
    return split_arrays(
        x,
        bunch.target,
        cfg.validation_split,
        cfg.shuffle_seed,
        cfg.limit,
        kind,
        num_classes=10,
        test_split=cfg.test_split,
    )
