"""`dataset=custom dataset.loader=pkg.mod:load` (or an installed plugin): the user's data.

The loader is called as `loader(**dataset.params)` and returns one of
    (x, y)                                    arrays, split by dataset.validation_split (and test_split)
    ds                                        an unbatched tf.data.Dataset of (x, y), read into memory and split so
    {"train": (x, y), "val": (x, y)}          arrays per split; an optional "test": (x, y)
    {"train": ds, "val": ds}                  unbatched tf.data.Dataset of (x, y) per split; an optional "test"
where every (x, y) may be (x, y, sample_weight): x is an array, a tuple of arrays (one per model input) or a dict
name -> array (the model's input names); y an array or a dict output name -> array (one per head); sample_weight
one float >= 0 per example. The dict forms may add "preprocess" (a Keras layer or tf.function from the raw
features to the model's input, run on every batch and exported inside the model), "class_names" (by class id,
or a dict of them per head; served as the label) and "raw_images": True (x is images as 0-255 pixels: scaled and
served as an image folder's, image bytes included). Its labels are checked against the task afterwards
(`launcher.train.labels`), like every dataset's.
"""

from __future__ import annotations

import sys

import numpy as np

from launcher.config.errors import ConfigError, Violation, raise_if_any
from launcher.config.imports import check_call, configured_path, import_component
from launcher.config.raised import told
from launcher.train.data import DataSource, first_array, map_arrays, num_examples, split_arrays, take
from launcher.train.data_checks import (
    contract_problems,
    feature_problems,
    is_text,
    named_arrays,
    nonfinite_feature,
    streamed_test_split,
    structure_problems,
)
from launcher.train.example_shapes import with_fixed_shapes
from launcher.train.preprocessing import loader_images, users

RETURNS = (
    '(x, y) arrays, {"train": (x, y), "val": (x, y)} or {"train": ds, "val": ds} of tf.data (x, y); '
    "(x, y, sample_weight) wherever (x, y) is"
)


def load(dataset) -> DataSource:
    key, path = configured_path("dataset", "loader", dataset)
    function = import_component(key, path, "a data loader function")
    params = dict(dataset.params)
    check_call(key, path, function, (), params, "load(**params) returning " + RETURNS)
    try:
        data = function(**params)
    except ConfigError:
        raise
    except Exception as err:
        raise ConfigError.single(
            key,
            path,
            "a loader that runs (it raised the error below)",
            "fix the loader where it raised (call it in Python with the same params for the whole traceback)",
            detail=told(err, function),
        ) from None
    if _is_dataset(data):
        data = _in_memory(data, key, path)
    if isinstance(data, tuple) and len(data) in (2, 3):
        return _split_whole(data, dataset, key, path)
    if isinstance(data, dict) and set(data) >= {"train", "val"}:
        streamed_test_split(dataset, f'(return a "test" entry from {path})')
        source = _from_splits(data["train"], data["val"], dataset, key, path)
        if data.get("test") is not None:
            _add_test(source, data["test"], key, path)
        _add_served(source, data, key, path)
        return source
    raise ConfigError.single(
        key,
        path,
        f"a loader that returns {RETURNS} (it returned {type(data).__name__}"
        + (f" with keys {sorted(data)}" if isinstance(data, dict) else "")
        + ")",
        'return {"train": (x_train, y_train), "val": (x_val, y_val)}',
    )


def _from_splits(train, val, dataset, key: str, path: str) -> DataSource:
    if _is_dataset(train) and _is_dataset(val):
        return _from_datasets(train, val, dataset, key, path)
    splits = {}
    for name, split in (("train", train), ("val", val)):
        if not (isinstance(split, tuple | list) and len(split) in (2, 3)):
            raise ConfigError.single(
                key,
                path,
                f"{RETURNS} ({name} is a {type(split).__name__})",
                f'return {{"{name}": (x, y), ...}} or tf.data datasets for both splits',
            )
        splits[name] = _parts(split)
    if not all(_plain(parts) for parts in splits.values()):
        return _structured_splits(splits, dataset, key, path)
    raise_if_any([p for name, (x, y) in splits.items() for p in _pair_problems(x, y, key, path, f"its {name} split")])
    (x_train, y_train), (x_val, y_val) = splits["train"], splits["val"]
    if dataset.limit:
        x_train, y_train = x_train[: dataset.limit], y_train[: dataset.limit]
    kind = _kind(dataset, x_train.dtype, x_train.shape[1:])
    x_train, x_val = _as_model_input(x_train, kind), _as_model_input(x_val, kind)
    classes = dataset.num_classes or _classes(y_train, y_val)
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
    if _is_dataset(source.train):
        if not _is_dataset(test):
            raise ConfigError.single(
                key, path, f'a "test" entry like "train": a tf.data dataset (got {type(test).__name__})', "return ds"
            )
        num_test = _count(test)
        test = with_fixed_shapes({"test": test}, key, path)["test"]
        raise_if_any(_spec_problems({"train": source.train.element_spec, "test": test.element_spec}, key, path))
        source.test, source.num_test = test, num_test
        raise_if_any(_stream_problems({"test": test}, key, path))
        return
    if not (isinstance(test, tuple | list) and len(test) in (2, 3)):
        raise ConfigError.single(
            key, path, f'a "test" entry like "train": (x, y) arrays (got {type(test).__name__})', "return (x, y)"
        )
    parts = _parts(test)
    if not (_plain(parts) and _plain(source.train)):
        raise_if_any(contract_problems({"train": source.train, "test": parts}, key, path))
        source.test, source.num_test = _cast_parts(parts), num_examples(parts[0])
        return
    x, y = parts
    raise_if_any(_pair_problems(x, y, key, path, "its test split"))
    source.test = (_as_model_input(x, source.kind), y)
    source.num_test = len(x)


def _add_served(source: DataSource, data: dict, key: str, path: str) -> None:
    """The loader's "preprocess" (raw features -> the model's input: run on every batch and exported inside the
    model) and "class_names" (by class id; a dict of them per head), checked by a call on the first examples."""
    given, names = data.get("preprocess"), data.get("class_names")
    if data.get("raw_images"):
        _check_raw_images(source, given, key, path)
        source.preprocessing = loader_images(source)
    if given is not None:
        if not callable(given):
            raise ConfigError.single(
                key,
                path,
                f'a "preprocess" entry that is a Keras layer or a tf.function (got {type(given).__name__})',
                'return {"train": ..., "val": ..., "preprocess": keras.layers.Normalization(...)} (adapted)',
            )
        source.preprocessing = users(given)
        try:
            prepared = source.first_inputs(2, "train")
        except Exception as err:
            raise ConfigError.single(
                key,
                path,
                'a "preprocess" that takes the raw features (it raised the error below)',
                "call it on your loader's x in Python to see the traceback; it gets a batch (an array or the dict)",
                detail=told(err, given),
            ) from None
        if not isinstance(prepared, dict | tuple):
            source.input_shape = tuple(np.asarray(prepared).shape[1:])
    if names is not None:
        source.class_names = _class_names(names, key, path)


def _check_raw_images(source: DataSource, given, key: str, path: str) -> None:
    """`"raw_images": True` declares one feature array of images, 0-255 pixels (H, W, C), with no other preprocess."""
    shape = tuple(source.input_shape)
    if given is not None or source.feature_names or len(shape) != 3 or shape[-1] not in (1, 3, 4):
        raise ConfigError.single(
            key,
            path,
            '"raw_images": True beside one feature array of images, 0-255 pixels of shape (height, width, 1, 3 or '
            f'4 channels), and no "preprocess" (x is {shape}'
            + (", named features" if source.feature_names else "")
            + (', with a "preprocess"' if given is not None else "")
            + ")",
            'return {"train": (pixels, y), "val": (pixels, y), "raw_images": True} with pixels (n, h, w, 3) 0-255',
        )


def _class_names(names, key: str, path: str):
    """A list of names by class id, or a dict head -> list; each a non-empty list of distinct strings."""
    lists = names if isinstance(names, dict) else {"": names}
    bad = [
        head or "class_names"
        for head, listed in lists.items()
        if not (isinstance(listed, list | tuple) and listed and len(set(map(str, listed))) == len(listed))
    ]
    if bad:
        raise ConfigError.single(
            key,
            path,
            f'"class_names": distinct names by class id (a list; per head a dict of lists); {bad} are not',
            '"class_names": ["cat", "dog"] (class 0, class 1)',
        )
    if isinstance(names, dict):
        return {str(head): tuple(str(n) for n in listed) for head, listed in names.items()}
    return tuple(str(n) for n in names)


def _split_whole(data: tuple, dataset, key: str, path: str) -> DataSource:
    """(x, y) or (x, y, sample_weight) for the launcher to split by dataset.validation_split (and test_split)."""
    parts = _parts(data)
    if _plain(parts):
        x, y = parts
        raise_if_any(_pair_problems(x, y, key, path, "its (x, y)"))
        kind = _kind(dataset, x.dtype, x.shape[1:])
    else:
        raise_if_any(contract_problems({"(x, y)": parts}, key, path))
        parts = _cast_parts(parts)
        kind = _structured_kind(dataset, parts[0])
    return split_arrays(
        parts[0],
        parts[1],
        dataset.validation_split,
        dataset.shuffle_seed,
        dataset.limit,
        kind,
        num_classes=dataset.num_classes or None,
        test_split=dataset.test_split,
        sample_weight=parts[2] if len(parts) == 3 else None,
    )


def _structured_splits(splits: dict, dataset, key: str, path: str) -> DataSource:
    """Per-split arrays with named or several features, a target per head, or sample weights: checked per
    feature, head and weight against the contract and against train, every problem at once."""
    raise_if_any(contract_problems(splits, key, path))
    train, val = _cast_parts(splits["train"]), _cast_parts(splits["val"])
    if dataset.limit:
        train = take(train, slice(0, dataset.limit))
    x, y = train[0], train[1]
    return DataSource(
        train=train,
        val=val,
        num_train=num_examples(x),
        num_val=num_examples(val[0]),
        input_shape=tuple(first_array(x).shape[1:]),
        num_classes=0 if isinstance(y, dict) else int(dataset.num_classes or _classes(y, val[1])),
        kind=_structured_kind(dataset, x),
        feature_names=tuple(x) if isinstance(x, dict) else (),
        head_names=tuple(y) if isinstance(y, dict) else (),
        weighted=len(train) == 3,
    )


def _from_datasets(train, val, dataset, key: str, path: str) -> DataSource:
    """Unbatched tf.data splits: counted, shapes tf.data leaves unknown read from the examples
    (`launcher.train.example_shapes`), their element structure checked (train's features and heads in val)."""
    specs = {"train": train.element_spec, "val": val.element_spec}
    spec = specs["train"]
    if not (isinstance(spec, tuple) and len(spec) in (2, 3)):
        raise ConfigError.single(
            key,
            path,
            f"datasets of (x, y) or (x, y, sample_weight) examples, unbatched (train's elements are {spec})",
            "ds = tf.data.Dataset.from_tensor_slices((x, y)), no .batch()",
        )
    num_train, num_val = _count(train), _count(val)  # an infinite dataset is refused here, before it is read
    fixed = with_fixed_shapes({"train": train, "val": val}, key, path)  # shapes tf.data leaves unknown, read
    train, val = fixed["train"], fixed["val"]
    specs = {"train": train.element_spec, "val": val.element_spec}
    raise_if_any(_spec_problems(specs, key, path))
    spec = specs["train"]
    x_spec = spec[0]
    first = first_array(x_spec)
    shape = tuple(first.shape)
    raise_if_any(_stream_problems({"train": train, "val": val}, key, path))
    if dataset.limit:
        train, num_train = train.take(dataset.limit), min(num_train, dataset.limit)
    if isinstance(x_spec, dict | tuple):
        kind = _structured_kind(dataset, x_spec)
    else:
        kind = _kind(dataset, np.dtype(first.dtype.as_numpy_dtype), shape)
    return DataSource(
        train=train,
        val=val,
        num_train=num_train,
        num_val=num_val,
        input_shape=shape,
        num_classes=0 if isinstance(spec[1], dict) else int(dataset.num_classes or 0),
        kind=kind,
        feature_names=tuple(x_spec) if isinstance(x_spec, dict) else (),
        head_names=tuple(spec[1]) if isinstance(spec[1], dict) else (),
        weighted=len(spec) == 3,
    )


def _spec_problems(specs: dict, key: str, path: str) -> list:
    """tf.data splits' element specs: (x, y) or (x, y, sample_weight) in each, every feature of a fixed shape
    (named), a scalar weight per example, and train's structure in the other splits."""
    found = []
    for split, spec in specs.items():
        if not (isinstance(spec, tuple) and len(spec) in (2, 3)):
            found.append(
                Violation(
                    key,
                    path,
                    f"datasets of (x, y) or (x, y, sample_weight) examples, unbatched ({split}'s elements are {spec})",
                    "ds = tf.data.Dataset.from_tensor_slices((x, y)), no .batch()",
                )
            )
            continue
        for name, feature in named_arrays(spec[0], "x"):
            if None in tuple(feature.shape):
                found.append(
                    Violation(
                        key,
                        path,
                        f"unbatched examples of a fixed shape ({split}'s feature {name!r} is {feature.shape}: "
                        "batched, or ragged?)",
                        f"ds.unbatch() if batched; else give {name!r} a known rank and shape in a ds.map "
                        "(tf.ensure_shape)",
                    )
                )
        if len(spec) == 3 and tuple(spec[2].shape) not in ((), (1,)):
            found.append(
                Violation(
                    key,
                    path,
                    f"one sample weight per example, a scalar ({split}'s weights are {spec[2].shape})",
                    "return (x, y, w) with w of shape (examples,) in from_tensor_slices, no .batch()",
                )
            )
        if split != "train" and isinstance(specs.get("train"), tuple):
            found += structure_problems(split, spec, specs["train"], key, path)
    return found


def _parts(split) -> tuple:
    """(x, y) or (x, y, sample_weight) as arrays, the features' and heads' structure kept; a pandas DataFrame of
    features is a dict of its columns (each column a named feature)."""
    parts = (map_arrays(np.asarray, _columns(split[0])), map_arrays(np.asarray, split[1]))
    return parts + ((np.asarray(split[2]),) if len(split) == 3 else ())


def _columns(x):
    """A pandas DataFrame as its columns by name (keras.io's `dict(dataframe)`); anything else as it is."""
    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(x, pandas.DataFrame):
        return {str(name): x[name].to_numpy() for name in x.columns}
    return x


def _as_model_input(x: np.ndarray, kind: str) -> np.ndarray:
    """One feature array as the model takes it: strings as str, token ids as they are, the rest float32."""
    if is_text(x):
        return x.astype(str)
    return x if kind == "tokens" else x.astype("float32")


def _plain(parts) -> bool:
    """One feature array, one target, no weights: the form every earlier loader returned."""
    return len(parts) == 2 and not isinstance(parts[0], dict | tuple) and not isinstance(parts[1], dict)


def _cast_parts(parts: tuple) -> tuple:
    """Named or several features as the model takes them (real values float32, integer ids int32), weights
    float32. One feature array stays as an (x, y) loader's does: weights change nothing else."""
    x = parts[0]
    if isinstance(x, dict | tuple):
        x = map_arrays(_as_feature, x)
    weights = (parts[2].astype("float32").reshape(-1),) if len(parts) == 3 else ()
    return (x, parts[1], *weights)


def _as_feature(a: np.ndarray) -> np.ndarray:
    """A named feature as the model takes it: strings as str, integer ids int32, real values float32."""
    if is_text(a):
        return a.astype(str)
    return a.astype("int32") if a.dtype.kind in "iu" else a.astype("float32")


def _structured_kind(dataset, x) -> str:
    """Named or several features are image or tabular by the first one's shape (token models take one array);
    one array is judged as an (x, y) loader's is, by its dtype and shape."""
    if not isinstance(x, dict | tuple):
        return _kind(dataset, x.dtype, x.shape[1:])
    return _kind(dataset, np.float32, tuple(first_array(x).shape[1:]))


def _classes(y_train: np.ndarray, y_val: np.ndarray) -> int:
    labels = np.concatenate([y_train.reshape(len(y_train), -1), y_val.reshape(len(y_val), -1)])
    return int(labels.max()) + 1 if labels.dtype.kind in "iu" and labels.shape[1] == 1 else labels.shape[1]


def _is_dataset(data) -> bool:
    """A tf.data dataset (TensorFlow is not imported for a loader of arrays: no dataset then)."""
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(data, tf.data.Dataset)


def _in_memory(ds, key: str, path: str) -> tuple:
    """One unbatched tf.data dataset for the launcher to split: read whole into arrays (divided in memory)."""
    count = _count(ds)
    ds = with_fixed_shapes({"the dataset": ds}, key, path)["the dataset"]
    raise_if_any(_spec_problems({"the dataset": ds.element_spec}, key, path))
    whole = next(iter(ds.batch(count)))
    return tuple(map_arrays(lambda t: t.numpy(), part) for part in whole)


def _pair_problems(x, y, key: str, path: str, what: str) -> list[Violation]:
    """One feature array and its targets: the shape (one string per example may be a vector of them), numbers or
    strings, finite (the checks named features get)."""
    if x.ndim < (1 if is_text(x) else 2) or len(x) != len(y) or len(x) < 2:
        return [
            Violation(
                key,
                path,
                f"{what}: x of shape (examples, ...) and y with one entry per example (got x {x.shape}, y {y.shape})",
                "return x with one row per example and y beside it",
            )
        ]
    return feature_problems("x", x, what, key, path)


def _stream_problems(splits: dict, key: str, path: str) -> list[Violation]:
    """tf.data splits read once: every floating feature finite, the examples that are not named by index."""
    import tensorflow as tf

    found = []
    for split, ds in splits.items():
        features = dict(named_arrays(ds.element_spec[0], "x"))
        floating = [name for name, spec in features.items() if spec.dtype.is_floating]
        if not floating:
            continue

        def flags(index, example, floating=floating):
            arrays = dict(named_arrays(example[0], "x"))
            bad = [tf.logical_not(tf.reduce_all(tf.math.is_finite(arrays[name]))) for name in floating]
            return index, tf.stack(bad)

        rows: dict[str, list[int]] = {name: [] for name in floating}
        flagged = ds.enumerate().map(flags).filter(lambda _, bad: tf.reduce_any(bad))
        for index, bad in flagged.as_numpy_iterator():
            for name, is_bad in zip(floating, bad, strict=True):
                if is_bad:
                    rows[name].append(int(index))
        found += [nonfinite_feature(n, r, f"its {split} split", key, path) for n, r in rows.items() if r]
    return found


def _kind(dataset, dtype, shape) -> str:
    if dataset.kind and dataset.kind != "auto":
        if dataset.kind not in ("image", "tabular", "tokens"):
            raise ConfigError.single(
                "dataset.kind", dataset.kind, "image, tabular, tokens or auto", "dataset.kind=auto"
            )
        return dataset.kind
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
