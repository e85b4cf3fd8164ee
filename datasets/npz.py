"""A user's .npz file with a feature array and an integer label array."""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

import numpy as np

from launcher.config.errors import ConfigError, raise_if_any
from launcher.train.data import DataSource, split_arrays
from launcher.train.data_checks import array_problems


def load(cfg) -> DataSource:
    path = Path(str(cfg.path)).expanduser()
    if not path.is_file():
        raise ConfigError.single(
            "dataset.path",
            str(cfg.path),
            f"an existing .npz file with arrays '{cfg.x_key}' and '{cfg.y_key}' (file not found)",
            "dataset.path=/absolute/path/to/data.npz (save one with numpy.savez(path, x=x, y=y))",
        )
    x, y = _read(path, cfg)
    if cfg.drop_nonfinite:
        x, y = _drop_nonfinite(x, y, path)
    problems = array_problems(x, y, path, cfg.x_key, cfg.y_key, cfg.num_classes)
    raise_if_any(problems)
    kind = "tokens" if np.issubdtype(x.dtype, np.integer) and x.ndim == 2 else ("image" if x.ndim == 4 else "tabular")
    if kind != "tokens":
        x = x.astype("float32")
    y = y.reshape(len(y)).astype("int64")  # integral class ids (checked above), whatever dtype they were saved as
    return split_arrays(
        x,
        y,
        cfg.validation_split,
        cfg.shuffle_seed,
        cfg.limit,
        kind,
        cfg.num_classes or None,
        cfg.test_split,
        origin=str(path),
    )


def _drop_nonfinite(x: np.ndarray, y: np.ndarray, path: Path) -> tuple[np.ndarray, np.ndarray]:
    if x.dtype.kind != "f" or len(x) != len(y):
        return x, y  # nothing to drop, or shapes the checks below refuse anyway
    keep = np.isfinite(x.reshape(len(x), -1)).all(axis=1)
    if not keep.all():
        print(
            f"  dataset.drop_nonfinite: dropped {int((~keep).sum())} of {len(x)} examples of {path.name} "
            "(NaN or inf in their inputs)",
            flush=True,
        )
    return x[keep], y[keep]


def _read(path: Path, cfg) -> tuple[np.ndarray, np.ndarray]:
    """x and y from the archive; an unreadable file (truncated, not an .npz, pickled objects) is a ConfigError."""
    try:
        archive = np.load(path)  # allow_pickle=False: a data file never runs code
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise ValueError("a single .npy array, not an .npz archive of named arrays")
        with archive:
            missing = [k for k in (cfg.x_key, cfg.y_key) if k not in archive.files]
            if missing:
                raise ConfigError.single(
                    "dataset.x_key" if cfg.x_key in missing else "dataset.y_key",
                    missing[0],
                    f"one of the arrays in {path.name}: {archive.files}",
                    f"dataset.x_key=<name> dataset.y_key=<name> (arrays found: {archive.files})",
                )
            return archive[cfg.x_key], archive[cfg.y_key]
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as err:
        raise ConfigError.single(
            "dataset.path",
            str(path),
            f"a readable .npz file ({str(err).splitlines()[0][:200]})",
            "re-save it with numpy.savez(path, x=x, y=y) (numeric arrays; object arrays are not loaded)",
        ) from None
