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


def named_arrays(tree, single: str) -> list[tuple[str, object]]:
    """(name, array) of every array of a structure, named as a person reads it: a dict's keys, `x[0]` for a
    tuple's, `single` for one array (tf.data's element specs alike)."""
    if isinstance(tree, dict):
        return list(tree.items())
    if isinstance(tree, tuple | list):
        return [(f"{single}[{i}]", value) for i, value in enumerate(tree)]
    return [(single, tree)]


def contract_problems(splits: dict, key: str, value: str) -> list[Violation]:
    """Every split's (x, y) or (x, y, sample_weight) arrays: one entry per example in every feature, head and
    weight, numeric finite features, valid weights, and the structure train has (its features, heads, weights)."""
    found: list[Violation] = []
    for name, parts in splits.items():
        found += _example_problems(name, parts, key, value)
        if name != "train" and "train" in splits:
            found += structure_problems(name, parts, splits["train"], key, value)
    return found


def structure_problems(split: str, parts, train, key: str, value: str) -> list[Violation]:
    """A split's features and heads against train's (arrays or tf.data element specs): a model built for train's
    inputs cannot take another split's. Sample weights are each split's own, as in Keras's `fit(x, y,
    sample_weight=w, validation_data=(x_val, y_val))`: a split without them is unweighted."""
    found = []
    for part, what, single in ((0, "features", "x"), (1, "heads (y's keys)", "y")):
        want, got = _names(train[part], single), _names(parts[part], single)
        if want != got:
            missing = [n for n in want if n not in got]
            extra = [n for n in got if n not in want]
            found.append(
                Violation(
                    key,
                    value,
                    f"the {what} of train in {split} too (train has {_listed(want)}; {split} lacks "
                    f"{_listed(missing)}, has {_listed(extra)} besides)",
                    f"return the same {what} in every split, named alike",
                )
            )
    return found


def weight_problems(weights: np.ndarray, count: int, where: str, key: str, value: str) -> list[Violation]:
    """One finite weight >= 0 per example: a negative or NaN weight turns the loss into nonsense, silently."""
    fix = "return one float weight >= 0 per example (0 leaves an example out of the loss), e.g. np.ones(len(y))"
    if weights.dtype.kind not in "fiub":
        return [Violation(key, value, f"{where}: numeric sample weights (got dtype {weights.dtype})", fix)]
    if not (weights.ndim == 1 or (weights.ndim == 2 and weights.shape[1] == 1)) or len(weights) != count:
        return [
            Violation(
                key,
                value,
                f"{where}: one sample weight per example, shape ({count},) (got shape {weights.shape})",
                fix,
            )
        ]
    flat = weights.reshape(-1).astype("float64")
    found = []
    for bad, what in ((~np.isfinite(flat), "NaN or inf"), (np.isfinite(flat) & (flat < 0), "negative weights")):
        if bad.any():
            rows = np.flatnonzero(bad)
            found.append(
                Violation(
                    key,
                    value,
                    f"{where}: finite sample weights >= 0 (found {what} in {len(rows)} example(s), e.g. index "
                    f"{', '.join(map(str, rows[:SHOWN]))})",
                    fix,
                )
            )
    return found


def is_text(x: np.ndarray) -> bool:
    """Strings (raw text, string categories): a str or bytes array, or an object array holding only str or bytes
    (a pandas column of text)."""
    if x.dtype.kind in "US":
        return True
    return x.dtype.kind == "O" and x.size > 0 and all(isinstance(v, str | bytes) for v in x.flat)


def feature_problems(name: str, x: np.ndarray, where: str, key: str, value: str) -> list[Violation]:
    """A named feature: numbers or strings, an array of examples, finite (NaN trains to NaN, silently), every
    example's string present (a missing one is a None or NaN a lookup layer cannot read)."""
    if x.dtype.kind == "O" and x.ndim and not is_text(x):
        bad = _not_strings(x.reshape(len(x), -1))
        return [
            Violation(
                key,
                value,
                f"{where}: feature {name!r} of numbers or of strings (got dtype object holding "
                + ", ".join(f"{v!r} at index {i}" for i, v in bad)
                + ")",
                f"fill or drop the missing values of {name!r} in the loader (e.g. df[{name!r}].fillna('')), or give "
                "it as numbers",
            )
        ]
    if x.dtype.kind not in "fiub" and not is_text(x):
        return [
            Violation(
                key,
                value,
                f"{where}: numeric or string feature {name!r} (got dtype {x.dtype})",
                f"encode {name!r} as numbers (floats, or integer ids for a categorical feature) or as strings",
            )
        ]
    if x.ndim < 1:
        return [
            Violation(
                key,
                value,
                f"{where}: feature {name!r} with one entry per example (got a scalar)",
                f"give {name!r} as an array of shape (examples, ...)",
            )
        ]
    if x.dtype.kind == "f" and len(x):
        rows = np.flatnonzero(~np.isfinite(x.reshape(len(x), -1)).all(axis=1))
        if len(rows):
            return [nonfinite_feature(name, rows, where, key, value)]
    return []


def _not_strings(rows: np.ndarray) -> list[tuple[int, object]]:
    """(index, value) of the first examples holding a value that is not a string (None, NaN, a number)."""
    found = []
    for index, row in enumerate(rows):
        other = next((v for v in row if not isinstance(v, str | bytes)), None)
        if other is not None or any(v is None for v in row):
            found.append((index, other))
        if len(found) == SHOWN:
            break
    return found


def nonfinite_feature(name: str, rows, where: str, key: str, value: str) -> Violation:
    """Feature `name` holds NaN or inf in the examples at `rows` (a NaN input trains the model to NaN, silently)."""
    return Violation(
        key,
        value,
        f"{where}: finite values in feature {name!r} (found NaN or inf in {len(rows)} example(s), "
        f"e.g. index {', '.join(map(str, list(rows)[:SHOWN]))})",
        f"drop or impute those examples of {name!r} in the loader, e.g. np.nan_to_num",
    )


def _example_problems(split: str, parts, key: str, value: str) -> list[Violation]:
    where = f"its {split} split" if split in ("train", "val", "test") else f"its {split}"
    lengths = [(n, len(a)) for n, a in named_arrays(parts[0], "x") if np.ndim(a)]
    lengths += [(n, len(a)) for n, a in named_arrays(parts[1], "y") if np.ndim(a)]
    if len({count for _, count in lengths}) > 1:
        shown = ", ".join(f"{n} {count}" for n, count in lengths)
        return [
            Violation(
                key,
                value,
                f"{where}: one entry per example in every feature and head (lengths: {shown})",
                "return arrays of one length: one row per example in each",
            )
        ]
    count = lengths[0][1] if lengths else 0
    found = [p for n, a in named_arrays(parts[0], "x") for p in feature_problems(n, a, where, key, value)]
    if len(parts) == 3:
        found += weight_problems(np.asarray(parts[2]), count, where, key, value)
    return found


def _names(tree, single: str) -> list[str]:
    """A structure's array names, a dict's sorted (tf.data orders a dict's keys)."""
    names = [n for n, _ in named_arrays(tree, single)]
    return sorted(names) if isinstance(tree, dict) else names


def _listed(names) -> str:
    return ", ".join(repr(n) for n in names) if names else "none"


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


def streamed_test_split(dataset, how: str) -> None:
    """A streamed dataset is not held in memory to be divided: its test data comes as its own files."""
    if float(getattr(dataset, "test_split", 0.0) or 0.0) > 0:
        raise ConfigError.single(
            "dataset.test_split",
            dataset.test_split,
            f"0 for dataset={dataset.name} (streamed data is not divided in memory; it brings its own test data)",
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
