"""DataSource: what every dataset builder returns, and the tf.data pipeline over it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from launcher.config.errors import raise_if_any
from launcher.train.data_checks import is_text, named_arrays, split_problems

if TYPE_CHECKING:
    from launcher.train.preprocessing import Preprocessing


@dataclass
class DataSource:
    """Train and validation splits (and an optional test split) held as arrays (small data) or as unbatched
    tf.data datasets: what every dataset becomes, and what a dataset inside the launcher returns from `load(cfg)`.

    Args:
        train, val: each split as `(x, y)` or `(x, y, sample_weight)` arrays, or an unbatched tf.data.Dataset of them.
        num_train, num_val: examples per split.
        input_shape: one example's input shape.
        num_classes: the label classes (classification).
        kind: image (H, W, C) floats, tabular (features,) floats or tokens (length,) ints.
        The fields below have defaults: the test split, feature and head names, class names, preprocessing.
    """

    train: Any
    val: Any
    num_train: int
    num_val: int
    input_shape: tuple[int, ...]
    num_classes: int
    # "image" (H, W, C) floats, "tabular" (features,) floats, "tokens" (length,) ints.
    kind: str
    # Token inputs only: ids are in [0, vocab_size).
    vocab_size: int = 0
    # What the labels are for (set by the launch from task.name, then checked by launcher.train.labels).
    task: str = "classification"
    # Width of the output layer when it is not num_classes: targets (regression), vocab_size (sequence).
    num_outputs: int = 0
    # Streamed from files: examples per training shard, in file order (empty for arrays in memory).
    train_shards: tuple[int, ...] = ()
    prefetch: int = -1  # batches prepared ahead; -1 = AUTOTUNE
    # Held out from training and validation, evaluated once after training (train.test_at_end, eval.split=test).
    test: Any = None
    num_test: int = 0
    # Dict features: their names, as the split's dict holds them (empty for one array or a tuple of arrays).
    feature_names: tuple[str, ...] = ()
    # Dict targets: the output names (empty for one target).
    head_names: tuple[str, ...] = ()
    # The examples carry a float32 per-example weight, the third element of (x, y, sample_weight).
    weighted: bool = False
    # Dict targets, set by launcher.train.labels: each head's task, and its output width (classes, labels, targets).
    head_tasks: dict[str, str] = field(default_factory=dict)
    head_outputs: dict[str, int] = field(default_factory=dict)
    # Raw features -> the model's input, run on every batch here and exported inside every served model (None:
    # the features are the model's input as they are).
    preprocessing: Preprocessing | None = None
    # The classes' names by class id (image-folder sub-folders, a loader's "class_names"); per head: a dict.
    class_names: tuple[str, ...] | dict[str, tuple[str, ...]] = ()
    _base: dict = field(default_factory=dict, repr=False)

    @property
    def splits(self) -> tuple[str, ...]:
        """The splits this source holds: train and val, and test when it has one."""
        return ("train", "val", "test") if self.test is not None else ("train", "val")

    def split(self, name: str) -> Any:
        """A split's data by name (arrays or a tf.data dataset)."""
        return {"train": self.train, "val": self.val, "test": self.test}[name]

    def size(self, name: str) -> int:
        return {"train": self.num_train, "val": self.num_val, "test": self.num_test}[name]

    @property
    def outputs(self) -> int:
        """Units of the model's last layer: classes, labels, targets or the vocabulary."""
        return self.num_outputs or self.num_classes

    def _dataset(self, split: str):
        """The split as an unbatched tf.data.Dataset, made from the arrays once and reused every epoch."""
        import tensorflow as tf

        if split not in self._base:
            source = self.split(split)
            self._base[split] = (
                source if isinstance(source, tf.data.Dataset) else tf.data.Dataset.from_tensor_slices(source)
            )
        return self._base[split]

    def first_inputs(self, count: int = 2, split: str = "val"):
        """The first `count` inputs of a split as the model takes them (preprocessed): an array, or the features'
        structure (a dict name -> array, a tuple of arrays) when they have one."""
        raw = self.first_raw(count, split)
        if self.preprocessing is None or not self.preprocessing.changes_features:
            return raw
        return map_arrays(lambda t: np.asarray(t), self.prepared(raw))

    def string_inputs(self) -> tuple[str, ...]:
        """The model's inputs that are strings (raw text, string categories) once the preprocessing ran, by
        feature name (`inputs` for one array): what a lookup layer inside the model reads, and XLA cannot."""
        first = self.first_inputs(1, "train")
        return tuple(name for name, array in named_arrays(first, "inputs") if is_text(np.asarray(array)))

    def first_raw(self, count: int = 2, split: str = "val"):
        """The first `count` features of a split as the data holds them, before preprocessing."""
        source = self.split(split)
        if isinstance(source, tuple):
            return map_arrays(lambda a: np.asarray(a[:count]), source[0])
        features = next(iter(self._dataset(split).batch(count)))[0]
        return map_arrays(lambda t: t.numpy(), features)

    def prepared(self, features):
        """A batch of raw features as the model takes them: the preprocessing applied (the identity without)."""
        if self.preprocessing is None:
            return features
        if isinstance(features, dict):
            return self.preprocessing.prepare(dict(features))
        return self.preprocessing.prepare({"inputs": features})["inputs"]

    def pipeline(
        self,
        split: str,
        batch: int,
        drop_remainder: bool,
        shuffle_seed: int | None,
        shuffle_buffer: int = 10_000,
        skip: int = 0,
        skip_examples: int = 0,
    ):
        """Batches of `batch`; a resumed epoch skips `skip` batches, or `skip_examples` examples of this worker's
        own stream (file-sharded multi-worker data, where a step takes a worker's share of a global batch)."""
        import tensorflow as tf

        ds = self._dataset(split)
        if shuffle_seed is not None:
            size = self.size(split)
            ds = ds.shuffle(min(shuffle_buffer, size), seed=shuffle_seed, reshuffle_each_iteration=False)
        if skip_examples:
            ds = ds.skip(skip_examples)
        ds = ds.batch(batch, drop_remainder=drop_remainder)
        if skip:
            ds = ds.skip(skip)
        if self.preprocessing is not None and self.preprocessing.changes_features:
            ds = ds.map(lambda x, *rest: (self.prepared(x), *rest), num_parallel_calls=tf.data.AUTOTUNE)
        return ds.prefetch(tf.data.AUTOTUNE if self.prefetch < 0 else self.prefetch)


def split_arrays(
    x,
    y,
    validation_split: float,
    seed: int,
    limit: int = 0,
    kind: str = "image",
    num_classes: int | None = None,
    test_split: float = 0.0,
    origin: str = "",
    sample_weight: np.ndarray | None = None,
) -> DataSource:
    """A DataSource from arrays: a seeded shuffle, then the last `validation_split` fraction held out for
    validation and the `test_split` fraction before it for testing (none when 0: the other splits are as without a
    test split). A division that leaves a split empty is refused naming `origin` (where the data came from).

    Args:
        x, y: the examples' features and targets (see below); `sample_weight`: one weight per example, or None.
        validation_split, test_split: fractions of the examples; `seed`: the shuffle's; `limit`: at most this many
            training examples (0 = all).
        kind: image, tabular or tokens; `num_classes`: the label width (None: counted from the labels).

    Returns:
        The DataSource holding the splits.

    `x` is an array, a tuple of arrays or a dict name -> array; `y` an array or a dict output name -> array;
    `sample_weight` a weight per example or None. Every array gets the same permutation and slices, so each
    example keeps its features, targets and weight together.

    Integer class ids become a flat int32 vector; other labels (multi-label rows, real targets, token
    sequences) keep their shape, checked against the task by `launcher.train.labels`."""
    y = map_arrays(_flat_class_ids, y)
    parts = (x, y) if sample_weight is None else (x, y, np.asarray(sample_weight, "float32").reshape(-1))
    count = num_examples(x)
    order = np.random.default_rng(seed).permutation(count)
    parts = take(parts, order)
    num_val, num_test = held_out(count, validation_split, test_split)
    end = count - num_val - num_test
    raise_if_any(split_problems(end, num_val, validation_split, origin or f"{count} examples", test_split))
    train = take(parts, slice(0, min(end, limit) if limit else end))
    first = first_array(parts[0])
    return DataSource(
        train=train,
        val=take(parts, slice(count - num_val, count)),
        num_train=num_examples(train[0]),
        num_val=num_val,
        test=take(parts, slice(end, end + num_test)) if num_test else None,
        num_test=num_test,
        input_shape=tuple(first.shape[1:]),
        num_classes=_classes(parts[1], num_classes),
        kind=kind,
        vocab_size=int(first.max()) + 1 if kind == "tokens" and not isinstance(x, dict | tuple) else 0,
        feature_names=tuple(x) if isinstance(x, dict) else (),
        head_names=tuple(y) if isinstance(y, dict) else (),
        weighted=sample_weight is not None,
    )


def map_arrays(function, tree):
    """`function` applied to every array of a structure (an array, a tuple or list of arrays, a dict name ->
    array), the structure kept (a list becomes a tuple: tf.data reads a list as one stacked tensor)."""
    if isinstance(tree, dict):
        return {name: function(value) for name, value in tree.items()}
    if isinstance(tree, tuple | list):
        return tuple(function(value) for value in tree)
    return function(tree)


def first_array(tree):
    """The first array of a structure (its examples' count and the shape the built-in models read)."""
    return named_arrays(tree, "x")[0][1]


def num_examples(tree) -> int:
    return len(first_array(tree))


def take(parts: tuple, index) -> tuple:
    """Examples `index` (a slice or an order) of (x, y) or (x, y, sample_weight), every array alike."""
    return tuple(map_arrays(lambda a: a[index], part) for part in parts)


def _flat_class_ids(y) -> np.ndarray:
    y = np.asarray(y)
    if y.dtype.kind in "iub" and (y.ndim == 1 or (y.ndim == 2 and y.shape[1] == 1)):
        return y.astype("int32").reshape(-1)
    return y


def _classes(y, configured: int | None) -> int:
    """The configured or counted label width of one target; 0 for a target per head (counted per head by
    `launcher.train.labels`: dataset.num_classes is one head's)."""
    if isinstance(y, dict):
        return 0
    return int(configured if configured is not None else _label_width(y))


def held_out(count: int, validation_split: float, test_split: float = 0.0) -> tuple[int, int]:
    """Validation and test examples of `count` (validation at least 1; test at least 1 when asked for)."""
    num_val = max(1, int(round(count * validation_split)))
    num_test = max(1, int(round(count * test_split))) if test_split > 0 else 0
    return num_val, num_test


def _label_width(y: np.ndarray) -> int:
    """Classes for integer ids (the largest + 1), labels for rows, 1 for a real target."""
    if y.ndim == 1:
        return int(y.max()) + 1 if y.dtype.kind in "iub" and len(y) else 1
    return int(y.shape[-1])
