"""The data contract's loaders and a two-input, two-head model, named by import path in tests (tests/ is on the
path): (x, y) or (x, y, sample_weight) with x an array, a tuple or a dict of named features and y an array or a
dict by head, per split or whole, as arrays or unbatched tf.data; and loaders that break the contract one way each.

Every example carries its own index in feature `age` (and `dose` = -age, head `size` = age, weight = 1 + age), so
a test can see that a split, a shuffle or a shard kept each example's arrays together."""

from __future__ import annotations

import keras
import numpy as np

N = 40


def _arrays(n: int = N, start: int = 0):
    index = np.arange(start, start + n, dtype="float32")
    x = {"age": index[:, None], "dose": -index[:, None]}
    y = {"kind": (index % 3).astype("int64"), "size": index.copy()}
    return x, y, 1.0 + index


def whole(weighted: bool = True):
    """(x, y, sample_weight) for the launcher to split: dict features, dict targets."""
    x, y, w = _arrays()
    return (x, y, w) if weighted else (x, y)


def tuple_features():
    """((age, dose), kind, sample_weight): a tuple of features, one target."""
    x, y, w = _arrays()
    return (x["age"], x["dose"]), y["kind"], w


def per_split():
    """{"train": (x, y, w), "val": (x, y, w)} of arrays."""
    return {"train": _arrays(30), "val": _arrays(10, start=30)}


def per_split_tf():
    """{"train": ds, "val": ds}: unbatched tf.data of (dict x, dict y, w)."""
    import tensorflow as tf

    return {name: tf.data.Dataset.from_tensor_slices(parts) for name, parts in per_split().items()}


def whole_tf():
    """One unbatched tf.data dataset of (dict x, dict y, w), for the launcher to split."""
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices(_arrays())


def missing_in_val():
    """Feature `dose` in train, not in val."""
    splits = per_split()
    del splits["val"][0]["dose"]
    return splits


def missing_in_val_tf():
    import tensorflow as tf

    return {name: tf.data.Dataset.from_tensor_slices(parts) for name, parts in missing_in_val().items()}


def several_problems():
    """NaN in train's `dose`, `dose` missing in val, negative weights in val: three problems, one refusal."""
    splits = missing_in_val()
    splits["train"][0]["dose"][2] = np.nan
    splits["val"] = (*splits["val"][:2], -splits["val"][2])
    return splits


def heads_differ():
    """Head `size` in train, `weight` in val instead."""
    splits = per_split()
    y = splits["val"][1]
    y["weight"] = y.pop("size")
    return splits


def unweighted_val(form: str = "arrays"):
    """Sample weights in the training split alone (`form`: arrays or tf.data), as Keras's `fit(x, y,
    sample_weight=w, validation_data=(x_val, y_val))` takes them."""
    splits = per_split()
    splits["val"] = splits["val"][:2]
    if form == "tf":
        import tensorflow as tf

        return {name: tf.data.Dataset.from_tensor_slices(tuple(parts)) for name, parts in splits.items()}
    return splits


def nan_feature():
    x, y, w = _arrays()
    x["dose"][[3, 7]] = np.nan
    return x, y, w


def short_feature():
    x, y, w = _arrays()
    x["dose"] = x["dose"][:-1]
    return x, y, w


def short_head():
    x, y, w = _arrays()
    y["size"] = y["size"][:-2]
    return x, y, w


def bad_weights(kind: str):
    """Weights of the wrong length, negative or NaN (`kind`)."""
    x, y, w = _arrays()
    w = {"short": w[:-1], "negative": w - 5.0, "not_a_number": np.where(np.arange(N) == 4, np.nan, w)}[kind]
    return x, y, w


def negative_weights_tf():
    import tensorflow as tf

    x, y, w = _arrays()
    return {
        "train": tf.data.Dataset.from_tensor_slices((x, y, -w)),
        "val": tf.data.Dataset.from_tensor_slices((x, y, w)),
    }


def bad_class_ids():
    """Head `kind` with a negative class id."""
    x, y, w = _arrays()
    y["kind"][5] = -1
    return x, y, w


def ragged_feature_tf():
    """Feature `dose` batched (no fixed per-example shape)."""
    import tensorflow as tf

    x, y, _ = _arrays()
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    return {
        "train": ds.map(lambda x, y: ({"age": x["age"], "dose": tf.zeros([tf.cast(x["age"][0], "int32")])}, y)),
        "val": ds,
    }


def windows(n: int = 120, length: int = 8, form: str = "fixed"):
    """Forecasting windows as keras.io makes them: timeseries_dataset_from_array(..., batch_size=None) yields
    (length, 2) windows of static shape (None, 2) and the next step's first value as target. `form`: "fixed"
    (as made), "batched" (.batch(16): a smaller last batch), "even" (.batch(10), every batch full) or "ragged"
    (every window cut to a length of its own)."""

    series = np.stack([np.sin(np.arange(n) / 5.0), np.cos(np.arange(n) / 7.0)], axis=1).astype("float32")
    made = keras.utils.timeseries_dataset_from_array(series[:-length], series[length:, 0], length, batch_size=None)
    cut = int(made.cardinality()) * 3 // 4
    splits = {"train": made.take(cut), "val": made.skip(cut)}
    if form == "batched":
        splits["train"] = splits["train"].batch(16)
    if form == "even":
        splits = {name: ds.batch(10, drop_remainder=True) for name, ds in splits.items()}
    if form == "ragged":
        splits["train"] = splits["train"].enumerate().map(lambda i, e: (e[0][: 4 + i % 3], e[1]))
    return splits


def window_model(spec, units: int = 8):
    """Reads spec.input_shape, as a builder does: the windows' length and features, known only from the data."""
    inputs = keras.Input(spec.input_shape)
    return keras.Model(inputs, keras.layers.Dense(spec.outputs)(keras.layers.LSTM(units)(inputs)))


def two_inputs_two_heads(spec=None, units: int = 8):
    """Inputs `age` and `dose` (one value each); heads `kind` (3 logits) and `size` (1 value), as a dict."""
    age, dose = keras.Input((1,), name="age"), keras.Input((1,), name="dose")
    h = keras.layers.Dense(units, activation="relu")(keras.layers.Concatenate(name="features")([age, dose]))
    outputs = {"kind": keras.layers.Dense(3, name="kind")(h), "size": keras.layers.Dense(1, name="size")(h)}
    return keras.Model({"age": age, "dose": dose}, outputs)


def one_head():
    """(dict x, one target, sample_weight) for the launcher to split: head `kind` only."""
    x, y, w = _arrays(n=160)
    return {name: value / 160.0 for name, value in x.items()}, y["kind"], w / 160.0


def two_inputs_one_head(spec=None, units: int = 8):
    """Inputs `age` and `dose`; one output of spec.outputs logits."""
    model = two_inputs_two_heads(spec, units)
    return keras.Model(model.input, keras.layers.Dense(spec.outputs, name="kind")(model.get_layer("features").output))


def token_ids(weighted: bool = True):
    """One array of token ids (int64) with a class each, weighted or not: weights change nothing else."""
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 50, size=(40, 8)), rng.integers(0, 2, size=40)
    return (x, y, np.ones(40, "float32")) if weighted else (x, y)


def nan_rows(form: str):
    """NaN in examples 3 and 7 of the features, in every loader form (`form`): one plain array split by the
    launcher, plain arrays per split, a tuple of features, named features, and tf.data read whole or per split."""
    import tensorflow as tf

    x, y, _ = _arrays()
    x["dose"][[3, 7]] = np.nan
    plain = np.concatenate([x["age"], x["dose"]], axis=1)
    by_split = {"train": (plain[:30], y["kind"][:30]), "val": (plain[30:], y["kind"][30:])}
    return {
        "plain": lambda: (plain, y["kind"]),
        "plain_per_split": lambda: by_split,
        "tuple": lambda: ((x["age"], x["dose"]), y["kind"]),
        "named": lambda: (x, y["kind"]),
        "tf_whole": lambda: tf.data.Dataset.from_tensor_slices((plain, y["kind"])),
        "tf_per_split": lambda: {k: tf.data.Dataset.from_tensor_slices(v) for k, v in by_split.items()},
        "tf_named_per_split": lambda: {
            "train": tf.data.Dataset.from_tensor_slices(({k: v[:30] for k, v in x.items()}, y["kind"][:30])),
            "val": tf.data.Dataset.from_tensor_slices(({k: v[30:] for k, v in x.items()}, y["kind"][30:])),
        },
    }[form]()


def repeated_tf():
    """{"train": ds.repeat(), "val": ds}: an epoch that never ends."""
    import tensorflow as tf

    return {name: tf.data.Dataset.from_tensor_slices(parts) for name, parts in per_split().items()} | {
        "train": tf.data.Dataset.from_tensor_slices(per_split()["train"]).repeat()
    }


def strings(form: str):
    """String categories or text (keras.io's form) in every loader form (`form`): one array of text split by the
    launcher, per split, a dict with a pandas-style object column, a pandas DataFrame, tf.data whole and per split;
    the class is whether the color is red. `missing`: a None among the strings (a DataFrame's empty cell)."""
    import pandas as pd
    import tensorflow as tf

    color = np.array(["red", "green", "blue", "blue"] * (N // 4), dtype=object)
    size = np.arange(N, dtype="float32")
    label = (color == "red").astype("int64")
    text = np.array([f"a {c} thing" for c in color])  # str, one string per example
    by_split = {"train": (text[:30], label[:30]), "val": (text[30:], label[30:])}
    return {
        "plain": lambda: (text, label),
        "plain_per_split": lambda: by_split,
        "named": lambda: ({"color": color, "size": size}, label),
        "frame": lambda: (pd.DataFrame({"color": color, "size": size}), label),
        "tf_whole": lambda: tf.data.Dataset.from_tensor_slices((text, label)),
        "tf_named_per_split": lambda: {
            "train": tf.data.Dataset.from_tensor_slices(
                ({"color": color[:30].astype(str), "size": size[:30]}, label[:30])
            ),
            "val": tf.data.Dataset.from_tensor_slices(
                ({"color": color[30:].astype(str), "size": size[30:]}, label[30:])
            ),
        },
        "missing": lambda: ({"color": np.where(np.arange(N) == 5, None, color), "size": size}, label),
    }[form]()
