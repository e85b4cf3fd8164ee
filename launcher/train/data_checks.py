"""A user's data, checked before training: every problem of a file in one ConfigError, with the fix.

What fails here would otherwise fail minutes into training as a TensorFlow traceback (labels out
of range, string labels), or worse, train silently on garbage (NaN inputs, one-hot labels read
as class ids, an empty validation split).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from launcher.config.errors import ConfigError, Violation

# The first bytes of the image formats keras.utils.image_dataset_from_directory decodes.
IMAGE_MAGIC = {
    ".png": (b"\x89PNG\r\n\x1a\n",),
    ".jpg": (b"\xff\xd8\xff",),
    ".jpeg": (b"\xff\xd8\xff",),
    ".gif": (b"GIF87a", b"GIF89a"),
    ".bmp": (b"BM",),
}
SHOWN = 3  # offending files or examples named in a message


def array_problems(
    x: np.ndarray, y: np.ndarray, path: Path, x_key: str, y_key: str, num_classes: int = 0
) -> list[Violation]:
    """Shapes, label type and range, finiteness and size of an (x, y) pair read from `path`."""
    found: list[Violation] = []
    where = f"in {path}"
    if x.ndim < 2:
        found.append(
            Violation(
                "dataset.x_key",
                x_key,
                f"an array of examples, shape (N, features...) {where} (got shape {x.shape})",
                "save x with one row per example, e.g. x.reshape(len(x), -1)",
            )
        )
    if len(x) != len(y):
        found.append(
            Violation(
                "dataset.path",
                str(path),
                f"x and y of equal length (got {len(x)} and {len(y)})",
                "re-save the file with one label per example",
            )
        )
    if len(x) < 2:
        found.append(
            Violation(
                "dataset.path",
                str(path),
                f"at least 2 examples (one to train on, one to validate; got {len(x)})",
                "point dataset.path at a file with data in it",
            )
        )
    found += _label_problems(y, where, y_key, num_classes)
    if x.dtype.kind in "OUSV":
        found.append(
            Violation(
                "dataset.x_key",
                x_key,
                f"numeric inputs {where} (got dtype {x.dtype})",
                "encode the inputs as numbers (floats for features and pixels, integer ids for tokens)",
            )
        )
    elif x.dtype.kind == "i" and x.ndim == 2 and len(x) and x.min() < 0:
        found.append(
            Violation(
                "dataset.x_key",
                x_key,
                f"token ids >= 0 {where} (integer 2-D inputs are token ids; smallest is {x.min()})",
                "re-map the ids to 0..vocab-1, or save float features with x.astype('float32')",
            )
        )
    elif x.dtype.kind == "f":
        bad = ~np.isfinite(x.reshape(len(x), -1)).all(axis=1) if len(x) else np.zeros(0, bool)
        if bad.any():
            rows = np.flatnonzero(bad)
            found.append(
                Violation(
                    "dataset.x_key",
                    x_key,
                    f"finite inputs {where} (found NaN or inf in {len(rows)} example(s), e.g. index "
                    f"{', '.join(map(str, rows[:SHOWN]))})",
                    "dataset.drop_nonfinite=true (drop them at load), or drop or impute them before saving, e.g. "
                    "x = np.nan_to_num(x) or keep = np.isfinite(x).all(axis=1)",
                    overrides=("dataset.drop_nonfinite=true",),
                )
            )
    return found


def _label_problems(y: np.ndarray, where: str, y_key: str, num_classes: int) -> list[Violation]:
    if y.dtype.kind in "OUSV":
        sample = ", ".join(repr(str(v)) for v in np.unique(y.astype(str))[:SHOWN])
        return [
            Violation(
                "dataset.y_key",
                y_key,
                f"integer class ids 0..K-1 {where} (got {y.dtype} labels such as {sample})",
                "map them to ids before saving: names, y = np.unique(y, return_inverse=True)",
            )
        ]
    if y.ndim == 2 and y.shape[1] > 1:
        return [
            Violation(
                "dataset.y_key",
                y_key,
                f"one integer class id per example {where} (got shape {y.shape}: one-hot?)",
                "save y.argmax(axis=1) instead of one-hot rows",
            )
        ]
    flat = y.reshape(-1)
    if y.dtype.kind == "f":
        if not np.isfinite(flat).all():
            return [
                Violation(
                    "dataset.y_key",
                    y_key,
                    f"finite integer class ids {where} (found NaN or inf)",
                    "drop the examples without a label before saving",
                )
            ]
        if not np.equal(np.round(flat), flat).all():
            sample = ", ".join(f"{v:g}" for v in flat[np.round(flat) != flat][:SHOWN])
            return [
                Violation(
                    "dataset.y_key",
                    y_key,
                    f"integer class ids {where} (got fractional values such as {sample}: regression targets?)",
                    "the launcher trains classifiers: bin the targets into classes, e.g. np.digitize(y, bins)",
                )
            ]
    elif y.dtype.kind not in "iub":
        return [
            Violation("dataset.y_key", y_key, f"integer class ids {where} (got dtype {y.dtype})", "save y as integers")
        ]
    if not len(flat):
        return []
    low, high = int(flat.min()), int(flat.max())
    if low < 0:
        return [
            Violation(
                "dataset.y_key",
                y_key,
                f"class ids >= 0 {where} (smallest is {low})",
                "shift or re-map the labels: names, y = np.unique(y, return_inverse=True)",
            )
        ]
    if num_classes and high >= num_classes:
        return [
            Violation(
                "dataset.num_classes",
                num_classes,
                f"more classes than the largest label {where} ({high}; ids run 0..num_classes-1)",
                f"dataset.num_classes={high + 1}, or 0 to count them from the labels",
            )
        ]
    return []


def split_problems(
    num_train: int, num_val: int, validation_split: float, origin: str, test_split: float = 0.0
) -> list[Violation]:
    """Both splits need examples: a model cannot train on, or be validated with, nothing."""
    if num_train >= 1 and num_val >= 1:
        return []
    empty = "training" if num_train < 1 else "validation"
    key, value = "dataset.validation_split", validation_split
    if test_split and num_val >= 1:
        key, value = "dataset.test_split", test_split  # the test split took what training needed
    return [
        Violation(
            key,
            value,
            f"a split that leaves examples for both training and validation ({origin} gives "
            f"{num_train} training and {num_val} validation examples: the {empty} split is empty)",
            "dataset.validation_split=0.2" + (" dataset.test_split=0.1" if test_split else "") + ", or more data",
        )
    ]


def streamed_test_split(cfg, how: str) -> None:
    """A streamed dataset is not held in memory to be divided: its test data comes as its own files."""
    if float(getattr(cfg, "test_split", 0.0) or 0.0) > 0:
        raise ConfigError.single(
            "dataset.test_split",
            cfg.test_split,
            f"0 for dataset={cfg.name} (streamed data is not divided in memory; it brings its own test data)",
            f"dataset.test_split=0 {how}",
        )


def image_folder_problems(root: Path, classes: list[str]) -> list[Violation]:
    """Empty class folders and files that are not the image their extension says (read 8 bytes each)."""
    found: list[Violation] = []
    empty = [c for c in classes if not any(_images(root / c))]
    if empty:
        found.append(
            Violation(
                "dataset.path",
                str(root),
                f"at least one image in every class folder (empty: {', '.join(empty[:SHOWN])})",
                f"add images to {root / empty[0]}, or remove the folder",
            )
        )
    broken = [p for c in classes for p in _images(root / c) if not _looks_like_image(p)]
    if broken:
        found.append(
            Violation(
                "dataset.path",
                str(root),
                f"readable images ({len(broken)} file(s) are empty or not the format their extension says, e.g. "
                f"{', '.join(str(p) for p in broken[:SHOWN])})",
                "delete or re-export those files",
            )
        )
    return found


def _images(folder: Path):
    return (p for p in sorted(folder.rglob("*")) if p.suffix.lower() in IMAGE_MAGIC and p.is_file())


def _looks_like_image(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
    except OSError:
        return False
    return any(head.startswith(magic) for magic in IMAGE_MAGIC[path.suffix.lower()])
