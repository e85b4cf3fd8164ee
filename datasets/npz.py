"""A user's .npz file with a feature array and an integer label array."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from launcher.config.errors import ConfigError
from launcher.train.data import DataSource, split_arrays


def load(cfg) -> DataSource:
    path = Path(str(cfg.path)).expanduser()
    if not path.is_file():
        raise ConfigError.single(
            "dataset.path", str(cfg.path), "an existing .npz file with arrays "
            f"'{cfg.x_key}' and '{cfg.y_key}' (file not found)",
            "dataset.path=/absolute/path/to/data.npz (save one with numpy.savez(path, x=x, y=y))",
        )
    with np.load(path) as archive:
        missing = [k for k in (cfg.x_key, cfg.y_key) if k not in archive.files]
        if missing:
            raise ConfigError.single(
                "dataset.x_key" if cfg.x_key in missing else "dataset.y_key", missing[0],
                f"one of the arrays in {path.name}: {archive.files}",
                f"dataset.x_key=<name> dataset.y_key=<name> (arrays found: {archive.files})",
            )
        x, y = archive[cfg.x_key], archive[cfg.y_key]
    if len(x) != len(y):
        raise ConfigError.single(
            "dataset.path",
            str(path),
            f"x and y of equal length (got {len(x)} and {len(y)})",
            "re-save the file with matching arrays",
        )
    kind = "tokens" if np.issubdtype(x.dtype, np.integer) and x.ndim == 2 else ("image" if x.ndim == 4 else "tabular")
    if kind != "tokens":
        x = x.astype("float32")
    return split_arrays(x, y, cfg.validation_split, cfg.shuffle_seed, cfg.limit, kind)
