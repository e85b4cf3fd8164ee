"""`dataset=custom dataset.loader=pkg.mod:load` (or an installed plugin): the user's data.

The loader is called as `loader(**dataset.params)` and returns one of
    (x, y)                                    arrays, split by dataset.validation_split (and test_split)
    {"train": (x, y), "val": (x, y)}          arrays per split; an optional "test": (x, y)
    {"train": ds, "val": ds}                  unbatched tf.data.Dataset of (x, y) per split; an optional "test"
Its labels are checked against the task afterwards (`launcher.train.labels`), like every dataset's.
"""

from __future__ import annotations

import numpy as np

from launcher.config.errors import ConfigError
from launcher.config.imports import check_call, configured_path, import_component
from launcher.train.data import DataSource, split_arrays
from launcher.train.data_checks import streamed_test_split

RETURNS = '(x, y) arrays, {"train": (x, y), "val": (x, y)} or {"train": ds, "val": ds} of tf.data (x, y)'


def load(cfg) -> DataSource:
    key, path = configured_path("dataset", "loader", cfg)
    function = import_component(key, path, "a data loader function")
    params = dict(cfg.params)
    check_call(key, path, function, (), params, "load(**params) returning " + RETURNS)
    try:
        data = function(**params)
    except ConfigError:
        raise
    except Exception as err:
        raise ConfigError.single(
            key,
            path,
            f"a loader that runs ({type(err).__name__}: {str(err)[:300]})",
            "fix the loader (call it in Python to see the traceback)",
        ) from None
    if isinstance(data, tuple) and len(data) == 2 and not isinstance(data[0], dict):
        x, y = (np.asarray(a) for a in data)
        _check_pair(x, y, key, path, "its (x, y)")
        return split_arrays(
            x,
            y,
            cfg.validation_split,
            cfg.shuffle_seed,
            cfg.limit,
            _kind(cfg, x.dtype, x.shape[1:]),
            num_classes=cfg.num_classes or None,
            test_split=cfg.test_split,
        )
    if isinstance(data, dict) and set(data) >= {"train", "val"}:
        streamed_test_split(cfg, f'(return a "test" entry from {path})')
        source = _from_splits(data["train"], data["val"], cfg, key, path)
        if data.get("test") is not None:
            _add_test(source, data["test"], key, path)
        return source
    raise ConfigError.single(
        key,
        path,
        f"a loader that returns {RETURNS} (it returned {type(data).__name__}"
        + (f" with keys {sorted(data)}" if isinstance(data, dict) else "")
        + ")",
        'return {"train": (x_train, y_train), "val": (x_val, y_val)}',
    )


def _from_splits(train, val, cfg, key: str, path: str) -> DataSource:
    import tensorflow as tf

    if isinstance(train, tf.data.Dataset) and isinstance(val, tf.data.Dataset):
        spec = train.element_spec
        if not (isinstance(spec, tuple) and len(spec) == 2):
            raise ConfigError.single(
                key,
                path,
                f"datasets of (x, y) pairs, unbatched (train's elements are {spec})",
                "ds = tf.data.Dataset.from_tensor_slices((x, y)), no .batch()",
            )
        x_spec = spec[0]
        shape = tuple(x_spec.shape)
        if None in shape:
            raise ConfigError.single(
                key,
                path,
                f"unbatched examples of a fixed shape (train's x is {x_spec.shape}: batched, or ragged?)",
                "drop .batch() from the loader; pad to a fixed length",
            )
        num_train, num_val = _count(train), _count(val)
        if cfg.limit:
            train, num_train = train.take(cfg.limit), min(num_train, cfg.limit)
        kind = _kind(cfg, np.dtype(x_spec.dtype.as_numpy_dtype), shape)
        return DataSource(
            train=train,
            val=val,
            num_train=num_train,
            num_val=num_val,
            input_shape=shape,
            num_classes=int(cfg.num_classes or 0),
            kind=kind,
        )
    pairs = []
    for name, split in (("train", train), ("val", val)):
        if not (isinstance(split, tuple | list) and len(split) == 2):
            raise ConfigError.single(
                key,
                path,
                f"{RETURNS} ({name} is a {type(split).__name__})",
                f'return {{"{name}": (x, y), ...}} or tf.data datasets for both splits',
            )
        x, y = np.asarray(split[0]), np.asarray(split[1])
        _check_pair(x, y, key, path, f"its {name} split")
        pairs.append((x, y))
    (x_train, y_train), (x_val, y_val) = pairs
    if cfg.limit:
        x_train, y_train = x_train[: cfg.limit], y_train[: cfg.limit]
    kind = _kind(cfg, x_train.dtype, x_train.shape[1:])
    if kind != "tokens":
        x_train, x_val = x_train.astype("float32"), x_val.astype("float32")
    labels = np.concatenate([y_train.reshape(len(y_train), -1), y_val.reshape(len(y_val), -1)])
    classes = cfg.num_classes or (
        int(labels.max()) + 1 if labels.dtype.kind in "iu" and labels.shape[1] == 1 else labels.shape[1]
    )
    return DataSource(
        train=(x_train, y_train),
        val=(x_val, y_val),
        num_train=len(x_train),
        num_val=len(x_val),
        input_shape=tuple(x_train.shape[1:]),
        num_classes=int(classes),
        kind=kind,
        vocab_size=int(max(x_train.max(), x_val.max())) + 1 if kind == "tokens" else 0,
    )


def _add_test(source: DataSource, test, key: str, path: str) -> None:
    """The loader's "test" entry, in the form its other splits take."""
    import tensorflow as tf

    if isinstance(source.train, tf.data.Dataset):
        if not isinstance(test, tf.data.Dataset):
            raise ConfigError.single(
                key, path, f'a "test" entry like "train": a tf.data dataset (got {type(test).__name__})', "return ds"
            )
        source.test, source.num_test = test, _count(test)
        return
    if not (isinstance(test, tuple | list) and len(test) == 2):
        raise ConfigError.single(
            key, path, f'a "test" entry like "train": (x, y) arrays (got {type(test).__name__})', "return (x, y)"
        )
    x, y = np.asarray(test[0]), np.asarray(test[1])
    _check_pair(x, y, key, path, "its test split")
    source.test = (x.astype("float32") if source.kind != "tokens" else x, y)
    source.num_test = len(x)


def _check_pair(x, y, key: str, path: str, what: str) -> None:
    if x.ndim < 2 or len(x) != len(y) or len(x) < 2:
        raise ConfigError.single(
            key,
            path,
            f"{what}: x of shape (examples, ...) and y with one entry per example (got x {x.shape}, y {y.shape})",
            "return x with one row per example and y beside it",
        )
    if x.dtype.kind not in "fiub":
        raise ConfigError.single(
            key,
            path,
            f"{what}: numeric inputs (got x of dtype {x.dtype})",
            "convert the inputs to float32 features or integer token ids",
        )


def _kind(cfg, dtype, shape) -> str:
    if cfg.kind and cfg.kind != "auto":
        if cfg.kind not in ("image", "tabular", "tokens"):
            raise ConfigError.single("dataset.kind", cfg.kind, "image, tabular, tokens or auto", "dataset.kind=auto")
        return cfg.kind
    if np.dtype(dtype).kind in "iu" and len(shape) == 1:
        return "tokens"
    return "image" if len(shape) == 3 else "tabular"


def _count(ds) -> int:
    import tensorflow as tf

    n = int(ds.cardinality())
    if n >= 0:
        return n
    if n == tf.data.INFINITE_CARDINALITY:
        raise ConfigError.single(
            "dataset.loader",
            "(a tf.data.Dataset)",
            "finite datasets (an epoch must end)",
            "drop .repeat() from the loader; the launcher repeats per epoch",
        )
    return int(ds.reduce(0, lambda count, _: count + 1))
